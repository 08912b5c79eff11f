package decide

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
	"github.com/portico-lb/portico/rules"
)

// annotationError is a Service annotation that cannot be honoured.
type annotationError struct{ msg string }

func (e *annotationError) Error() string { return e.msg }

// annotation returns the first of Portico's and MetalLB's spellings that is set.
func annotation(svc *corev1.Service, portico string, metallb []string) (name, value string, ok bool) {
	for _, k := range append([]string{portico}, metallb...) {
		if v, ok := svc.Annotations[k]; ok {
			return k, v, true
		}
	}
	return "", "", false
}

// Request builds the allocator request for a Service against the given pools, evaluating
// their serviceAllocation; nsLabels are its namespace's labels (read only when a pool has
// namespaceSelectors: NeedsNamespaceLabels). A malformed annotation is an error; the request
// returned with it still names the Service and its ports, so held addresses can be kept.
func Request(svc *corev1.Service, pools []porticov1.IPAddressPool, nsLabels map[string]string) (allocator.Request, error) {
	var selected []string
	for i := range pools {
		if sa := pools[i].Spec.ServiceAllocation; sa != nil && selects(sa, svc, nsLabels) {
			selected = append(selected, pools[i].Name)
		}
	}
	return buildRequest(svc, selected)
}

// NeedsNamespaceLabels reports whether a pool selects Services by their namespace's labels.
func NeedsNamespaceLabels(pools []porticov1.IPAddressPool) bool {
	for i := range pools {
		if sa := pools[i].Spec.ServiceAllocation; sa != nil && len(sa.NamespaceSelectors) > 0 {
			return true
		}
	}
	return false
}

// buildRequest turns a Service into an allocator request. selected names the pools whose
// serviceAllocation selects the Service. A malformed annotation is an *annotationError; the
// request returned with it still names the Service and its ports, so held addresses can be kept.
func buildRequest(svc *corev1.Service, selected []string) (allocator.Request, error) {
	req := allocator.Request{
		Service:  svc.Namespace + "/" + svc.Name,
		Selected: selected,
		Local:    svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
		Selector: labels.SelectorFromSet(svc.Spec.Selector).String(),
	}
	for _, p := range svc.Spec.Ports {
		req.Ports = append(req.Ports, allocator.Port{Protocol: string(p.Protocol), Port: p.Port})
	}
	for _, f := range svc.Spec.IPFamilies {
		req.Families = append(req.Families, map[corev1.IPFamily]allocator.Family{corev1.IPv4Protocol: allocator.IPv4, corev1.IPv6Protocol: allocator.IPv6}[f])
	}
	if p := svc.Spec.IPFamilyPolicy; p != nil {
		req.DualStack = map[corev1.IPFamilyPolicy]allocator.DualStack{
			corev1.IPFamilyPolicyPreferDualStack:  allocator.PreferDualStack,
			corev1.IPFamilyPolicyRequireDualStack: allocator.RequireDualStack,
		}[*p]
	}
	if _, v, ok := annotation(svc, porticov1.AnnotationAllowSharedIP, porticov1.MetalLBAllowSharedIP); ok {
		req.SharingKey = v
	}
	if name, v, ok := annotation(svc, porticov1.AnnotationAddressPool, porticov1.MetalLBAddressPool); ok {
		pools, err := requestedPools(name, v)
		if err != nil {
			return req, err
		}
		req.Pools = pools
	}
	ips, err := requestedIPs(svc)
	req.IPs = ips
	if len(ips) > 0 {
		req.Families = nil
		for _, ip := range ips {
			req.Families = append(req.Families, allocator.FamilyOf(ip))
		}
	}
	return req, err
}

// requestedPools reads the address-pool annotation (Portico's or MetalLB's spelling): one pool,
// or two separated by a comma, one per family ("v4pool,v6pool").
func requestedPools(name, v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, &annotationError{fmt.Sprintf("%s is empty; name an IPAddressPool", name)}
	}
	var pools []string
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
			return nil, &annotationError{fmt.Sprintf("%s: %q names an empty pool", name, v)}
		case slices.Contains(pools, p):
			return nil, &annotationError{fmt.Sprintf("%s: %q names pool %s twice", name, v, p)}
		}
		pools = append(pools, p)
	}
	if len(pools) > 2 {
		return nil, &annotationError{fmt.Sprintf("%s: %q names %d pools; name one, or two (one per family: an IPv4 pool and an IPv6 pool)", name, v, len(pools))}
	}
	return pools, nil
}

// requestedIPs reads the loadBalancerIPs annotation, or else the deprecated
// spec.loadBalancerIP: at most one address per family.
func requestedIPs(svc *corev1.Service) ([]netip.Addr, error) {
	name, v, ok := annotation(svc, porticov1.AnnotationLoadBalancerIPs, porticov1.MetalLBLoadBalancerIPs)
	if !ok {
		if svc.Spec.LoadBalancerIP == "" {
			return nil, nil
		}
		name, v = "spec.loadBalancerIP", svc.Spec.LoadBalancerIP
	}
	var ips []netip.Addr
	seen := map[allocator.Family]bool{}
	for _, s := range strings.Split(v, ",") {
		ip, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || ip.Zone() != "" || ip.Is4In6() {
			return nil, &annotationError{fmt.Sprintf("%s: %q is not an IP address", name, strings.TrimSpace(s))}
		}
		if seen[allocator.FamilyOf(ip)] {
			return nil, &annotationError{fmt.Sprintf("%s: %q names two %s addresses; give at most one per family", name, v, allocator.FamilyOf(ip))}
		}
		seen[allocator.FamilyOf(ip)] = true
		ips = append(ips, ip)
	}
	return ips, nil
}

// selects reports whether a pool's serviceAllocation selects a Service in a namespace with
// the given labels. Namespaces and namespace selectors are alternatives; service selectors
// must also match when given.
func selects(sa *porticov1.ServiceAllocation, svc *corev1.Service, nsLabels map[string]string) bool {
	nsOK := len(sa.Namespaces) == 0 && len(sa.NamespaceSelectors) == 0
	for _, n := range sa.Namespaces {
		nsOK = nsOK || string(n) == svc.Namespace
	}
	nsOK = nsOK || rules.MatchesAny(sa.NamespaceSelectors, nsLabels)
	return nsOK && (len(sa.ServiceSelectors) == 0 || rules.MatchesAny(sa.ServiceSelectors, svc.Labels))
}
