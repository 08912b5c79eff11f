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
	"github.com/portico-lb/portico/rules/election"
)

// liveSpeakers are the nodes whose Speaker counts, as the controller counts them
// (rules.CountedSpeakers: live by their Lease, or every one while no speaker holds a Lease or
// the Leases cannot be read), and a line saying which do not or why every one counts.
func liveSpeakers(ctx context.Context, c client.Client, speakers []porticov1.Speaker, now time.Time) (func(string) bool, string) {
	var leases coordinationv1.LeaseList
	err := c.List(ctx, &leases, client.HasLabels{rules.SpeakerLeaseLabel})
	counted, stale := rules.CountedSpeakers(speakers, leases.Items, now)
	live := map[string]bool{}
	for _, s := range counted {
		live[s.Name] = true
	}
	alive := func(n string) bool { return live[n] }
	switch {
	case err != nil:
		return alive, "speakers' Leases not read (" + err.Error() + "): every Speaker counts as live"
	case len(stale) > 0:
		slices.Sort(stale)
		return alive, "not live (Lease not renewed): " + strings.Join(stale, ",") + "; their Speaker objects do not count"
	}
	return alive, ""
}

// electedLines say, by the rule every speaker runs (rules.L2EligibilityOf), which node
// answers for each of the Service's addresses over L2, or why none does; ignoreExclude is the
// live speakers' --ignore-exclude-lb-label (rules.IgnoreExcludeLabel), subnets where they can
// answer (rules.SubnetsOf), holders the addresses they answer for (rules.HoldersOf).
func electedLines(ctx context.Context, c client.Client, svc *corev1.Service, live func(string) bool, ignoreExclude bool, subnets rules.Subnets, holders rules.Holders) ([]string, error) {
	ips := porticov1.IngressAddrs(svc)
	if len(ips) == 0 {
		return nil, nil
	}
	cl := rules.Cluster{IgnoreExcludeLabel: ignoreExclude, Subnets: subnets, Holders: holders}
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
	for _, s := range svcs.Items { // svc is among them
		if !sharing(svc, &s, ips) {
			continue
		}
		if s.Namespace != svc.Namespace || s.Name != svc.Name {
			cl.Services = append(cl.Services, s)
		}
		var eps discoveryv1.EndpointSliceList
		if err := c.List(ctx, &eps, client.InNamespace(s.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: s.Name}); err != nil {
			return nil, err
		}
		cl.EndpointSlices = append(cl.EndpointSlices, eps.Items...)
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
			if i := slices.IndexFunc(holders[ip], func(h election.Holder) bool { return h.Node == e.Owner }); i >= 0 {
				since := ""
				if at := holders[ip][i].Since; !at.IsZero() {
					since = " since " + at.UTC().Format(time.RFC3339)
				}
				line += fmt.Sprintf("; it has answered for it%s and keeps it while it may answer (placement is sticky)", since)
			}
			if len(e.Sharers) > 1 {
				line += "; one owner for " + strings.Join(e.Sharers, ", ")
			}
			if e.Conflict != "" {
				line += "; " + e.Conflict
			}
			if e.OffSubnet {
				line += "; " + rules.OffSubnetNote(ip)
			}
		}
		lines = append(lines, ip.String()+": "+line)
	}
	return lines, nil
}

// sharing reports whether s, a Service of svc's load balancer (rules.Handles with svc's class,
// or Portico's default class, and Services without a class, as the controller runs by default),
// holds one of ips.
func sharing(svc, s *corev1.Service, ips []netip.Addr) bool {
	class := porticov1.DefaultLoadBalancerClass
	if svc.Spec.LoadBalancerClass != nil {
		class = *svc.Spec.LoadBalancerClass
	}
	if !rules.Handles(s, class, true) {
		return false
	}
	return slices.ContainsFunc(porticov1.IngressAddrs(s), func(ip netip.Addr) bool { return slices.Contains(ips, ip) })
}
