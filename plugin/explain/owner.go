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

// electedLines say, by the rules every speaker runs (WhoAnnounces), which nodes announce each
// of the Service's addresses, or why none does; ignoreExclude is the live speakers'
// --ignore-exclude-lb-label (rules.IgnoreExcludeLabel), subnets where they can answer
// (rules.SubnetsOf), holders the addresses they answer for (rules.HoldersOf).
func electedLines(ctx context.Context, c client.Client, svc *corev1.Service, live func(string) bool, ignoreExclude bool, subnets rules.Subnets, holders rules.Holders) ([]string, error) {
	ips := porticov1.IngressAddrs(svc)
	if len(ips) == 0 {
		return nil, nil
	}
	cl := rules.Cluster{IgnoreExcludeLabel: ignoreExclude, Subnets: subnets, Holders: holders}
	var nodes corev1.NodeList
	var pools porticov1.IPAddressPoolList
	var ads porticov1.L2AdvertisementList
	var bgpAds porticov1.BGPAdvertisementList
	var peers porticov1.BGPPeerList
	var svcs corev1.ServiceList
	for _, list := range []client.ObjectList{&nodes, &pools, &ads, &bgpAds, &peers, &svcs} {
		if err := c.List(ctx, list); err != nil {
			return nil, err
		}
	}
	cl.Nodes, cl.Pools, cl.L2Advertisements = nodes.Items, pools.Items, ads.Items
	cl.BGPAdvertisements, cl.BGPPeers = bgpAds.Items, peers.Items
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
	return WhoAnnounces(cl, svc, live), nil
}

// WhoAnnounces says, for each of svc's addresses, which node answers for it over L2
// (rules.L2EligibilityOf) and which advertise it over BGP (rules.BGPEligibilityOf), or why
// none does, as every speaker decides it; live says which nodes run a live speaker.
func WhoAnnounces(cl rules.Cluster, svc *corev1.Service, live func(string) bool) []string {
	var lines []string
	for _, ip := range porticov1.IngressAddrs(svc) {
		l2 := rules.L2EligibilityOf(cl, svc, ip, live)
		if l2.Pool == "" {
			lines = append(lines, ip.String()+": in no IPAddressPool: no node answers for it")
			continue
		}
		bgp := rules.BGPEligibilityOf(cl, svc, ip, live)
		if !l2.Advertised && !bgp.Advertised {
			lines = append(lines, ip.String()+": no L2Advertisement or BGPAdvertisement selects pool "+l2.Pool+" for this Service")
			continue
		}
		if l2.Advertised {
			lines = append(lines, ip.String()+": "+l2Line(ip, l2, cl.Holders))
		}
		if bgp.Advertised {
			lines = append(lines, ip.String()+": "+bgpLine(bgp))
		}
	}
	return lines
}

// l2Line says which node answers for ip over L2, or why none does.
func l2Line(ip netip.Addr, e rules.L2Eligibility, holders rules.Holders) string {
	if e.Owner == "" {
		return "no node may answer over L2: " + e.WhyNone
	}
	line := fmt.Sprintf("node %s answers over L2 (elected among %s)", e.Owner, strings.Join(e.Eligible, ","))
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
	return line
}

// bgpLine says which nodes advertise an address over BGP and to which peers, or why none does.
func bgpLine(e rules.BGPEligibility) string {
	if len(e.Advertisers) == 0 {
		return "no node may advertise over BGP: " + e.WhyNone
	}
	var each []string
	for _, a := range e.Advertisers {
		s := a.Node + " to " + strings.Join(a.Peers, ",")
		if a.Standing == rules.BGPGracefulShutdown {
			s += " (cordoned: with GRACEFUL_SHUTDOWN, withdrawn after the speakers' --bgp-drain-grace while another node can advertise)"
		}
		each = append(each, s)
	}
	line := fmt.Sprintf("advertised over BGP by nodes %s (%s)", strings.Join(e.AdvertiserNames(), ","), strings.Join(each, "; "))
	for _, w := range e.Withdrawn {
		line += fmt.Sprintf("; node %s %s: its routes are withdrawn", w.Node, w.Why)
	}
	return line
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
