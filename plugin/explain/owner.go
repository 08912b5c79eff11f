package explain

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

// liveSpeakers are the nodes whose speaker is live by its Lease (rules.LiveSpeakers), and a
// line saying so; when no speaker holds a Lease (or they cannot be read), every Speaker
// counts, as the controller counts them.
func liveSpeakers(ctx context.Context, c client.Client, speakers []porticov1.Speaker, now time.Time) (func(string) bool, string) {
	running := map[string]bool{}
	for _, s := range speakers {
		running[s.Name] = true
	}
	var leases coordinationv1.LeaseList
	if err := c.List(ctx, &leases, client.HasLabels{rules.SpeakerLeaseLabel}); err != nil {
		return func(n string) bool { return running[n] }, "speakers' Leases not read (" + err.Error() + "): every Speaker counts as live"
	}
	live, _, leased := rules.LiveSpeakers(leases.Items, now)
	if !leased {
		return func(n string) bool { return running[n] }, ""
	}
	var stale []string
	for _, s := range speakers {
		if !live[s.Name] {
			stale = append(stale, s.Name)
		}
	}
	if len(stale) == 0 {
		return func(n string) bool { return live[n] }, ""
	}
	slices.Sort(stale)
	return func(n string) bool { return live[n] },
		"not live (Lease not renewed): " + strings.Join(stale, ",") + "; their Speaker objects do not count"
}

// electedLines say, by the rule every speaker runs (rules.L2EligibilityOf), which node
// answers for each of the Service's addresses over L2, or why none does.
func electedLines(ctx context.Context, c client.Client, svc *corev1.Service, live func(string) bool) ([]string, error) {
	ips := porticov1.IngressAddrs(svc)
	if len(ips) == 0 {
		return nil, nil
	}
	var cl rules.Cluster
	var nodes corev1.NodeList
	var pools porticov1.IPAddressPoolList
	var ads porticov1.L2AdvertisementList
	var svcs corev1.ServiceList
	for _, list := range []client.ObjectList{&nodes, &pools, &ads, &svcs} {
		if err := c.List(ctx, list); err != nil {
			return nil, err
		}
	}
	cl.Nodes, cl.Pools, cl.L2Advertisements = nodes.Items, pools.Items, ads.Items
	for _, s := range append(svcs.Items, *svc) {
		if !sharing(svc, &s, ips) {
			continue
		}
		if s.Namespace != svc.Namespace || s.Name != svc.Name {
			cl.Services = append(cl.Services, s)
		}
		var slices discoveryv1.EndpointSliceList
		if err := c.List(ctx, &slices, client.InNamespace(s.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: s.Name}); err != nil {
			return nil, err
		}
		cl.EndpointSlices = append(cl.EndpointSlices, slices.Items...)
	}
	var lines []string
	for _, ip := range ips {
		e := rules.L2EligibilityOf(cl, svc, ip, live)
		var line string
		switch {
		case e.Pool == "":
			line = "in no IPAddressPool: no node answers for it"
		case !e.Advertised:
			line = "no L2Advertisement selects pool " + e.Pool + " for this Service"
		case e.Owner == "":
			line = "no node may answer: " + e.WhyNone
		default:
			line = fmt.Sprintf("node %s answers over L2 (elected among %s)", e.Owner, strings.Join(e.Eligible, ","))
			if len(e.Sharers) > 1 {
				line += "; one owner for " + strings.Join(e.Sharers, ", ")
			}
			if e.Conflict != "" {
				line += "; " + e.Conflict
			}
		}
		lines = append(lines, ip.String()+": "+line)
	}
	return lines, nil
}

// sharing reports whether s, a Service of svc's load balancer, holds one of ips.
func sharing(svc, s *corev1.Service, ips []netip.Addr) bool {
	if s.Spec.Type != corev1.ServiceTypeLoadBalancer || !equalClass(svc.Spec.LoadBalancerClass, s.Spec.LoadBalancerClass) {
		return false
	}
	return slices.ContainsFunc(porticov1.IngressAddrs(s), func(ip netip.Addr) bool { return slices.Contains(ips, ip) })
}

func equalClass(a, b *string) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}
