package v1alpha1

import (
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// IngressAddrs reads the addresses in a Service's status.loadBalancer.ingress, in order.
// Hostname entries and garbage (another controller's business) are skipped; IPv4-mapped IPv6
// addresses are read as IPv4, so every component sees one spelling.
func IngressAddrs(svc *corev1.Service) []netip.Addr {
	var ips []netip.Addr
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(in.IP); err == nil {
			ips = append(ips, ip.Unmap())
		}
	}
	return ips
}

// AllocatedFromPools reads the pools the controller wrote in AnnotationAllocatedFromPool: one,
// or two ("v4pool,v6pool", in the addresses' order) when a dual-stack Service took each family
// from another pool; none when it is not set.
func AllocatedFromPools(svc *corev1.Service) []string {
	v := svc.Annotations[AnnotationAllocatedFromPool]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// SameAddr reports whether s, an address as a status lists it (an Announcement's or a
// SelfCheck's IP), is ip, in whichever spelling (IPv4-mapped IPv6 is IPv4).
func SameAddr(s string, ip netip.Addr) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Unmap() == ip.Unmap()
}
