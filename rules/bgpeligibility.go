package rules

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// BGPAdvertiser is one node that advertises an address over BGP.
type BGPAdvertiser struct {
	Node  string
	Peers []string // the BGPPeers it sends the address to, sorted
	// Standing is BGPAdvertise, or BGPGracefulShutdown for a cordoned node within its grace.
	Standing BGPStanding
}

// BGPEligibility is what the rule says about who advertises one address of a Service over BGP.
type BGPEligibility struct {
	// Pool the address came from; "" when it is in no pool.
	Pool string
	// Advertised: some BGPAdvertisement selects the pool and the Service.
	Advertised bool
	// Advertisers are the nodes that advertise it, by name.
	Advertisers []BGPAdvertiser
	// WhyNone names what kept every node from advertising, when none does, and Withdrawn the
	// nodes that would advertise but for their fitness (not Ready, network unavailable,
	// drained), by name, with why.
	WhyNone   string
	Withdrawn []BGPWithdrawn
	// NoLocalEndpoint: no node advertises, and some would but for externalTrafficPolicy
	// Local, holding no ready endpoint.
	NoLocalEndpoint bool
	// Nodes is how many nodes were considered (0: the cluster has no Node objects).
	Nodes int
}

// BGPWithdrawn is a node whose fitness withdraws its route of an address.
type BGPWithdrawn struct {
	Node string
	Why  BGPWhyNot // BGPNetworkUnavailable, BGPNotReady, BGPOutOfService or BGPDrained
}

// AdvertiserNames are the advertisers' node names.
func (e BGPEligibility) AdvertiserNames() []string {
	out := make([]string, 0, len(e.Advertisers))
	for _, a := range e.Advertisers {
		out = append(out, a.Node)
	}
	return out
}

// BGPEligibilityOf says which nodes advertise ip of svc over BGP, to which peers, and why none
// does: each node's verdict is BGPSendsOf's. alive says whether a node runs a live speaker.
func BGPEligibilityOf(c Cluster, svc *corev1.Service, ip netip.Addr, alive func(node string) bool) BGPEligibility {
	var e BGPEligibility
	sel := Selectors{}
	pools, _ := ParsePools(c.Pools)
	pool, ok := PoolOf(svc, ip, pools)
	if !ok {
		return e
	}
	e.Pool = pool.Name
	ads := sel.BGPAdvertisementsFor(c.BGPAdvertisements, pool, svc)
	if e.Advertised = len(ads) > 0; !e.Advertised {
		return e
	}
	key := svc.Namespace + "/" + svc.Name
	isLocal := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	local := LocalEndpointsOf([]corev1.Service{*svc}, c.EndpointSlices)[key].Ready
	fit := sel.BGPFitNodes(c.Nodes, c.BGPPeers, alive, c.IgnoreExcludeLabel)
	none := map[BGPWhyNot][]string{}
	var dead []string
	for i := range c.Nodes {
		n := &c.Nodes[i]
		if !alive(n.Name) {
			dead = append(dead, n.Name)
			continue
		}
		b := sel.BGPNodeOf(n, c.BGPPeers, c.IgnoreExcludeLabel, c.Drain, fit)
		var peers []string
		why := sel.BGPSendsOf(&b, ads, ip, isLocal, local[n.Name], func(_ *v1alpha1.BGPAdvertisement, to, _ []BGPSession) {
			for _, s := range to {
				peers = append(peers, s.Peer)
			}
		})
		switch why {
		case BGPSends:
			slices.Sort(peers)
			e.Advertisers = append(e.Advertisers, BGPAdvertiser{Node: n.Name, Peers: slices.Compact(peers), Standing: b.Standing})
		case BGPNetworkUnavailable, BGPNotReady, BGPOutOfService, BGPDrained:
			e.Withdrawn = append(e.Withdrawn, BGPWithdrawn{Node: n.Name, Why: why})
			fallthrough
		default:
			none[why] = append(none[why], n.Name)
		}
	}
	slices.SortFunc(e.Advertisers, func(a, b BGPAdvertiser) int { return strings.Compare(a.Node, b.Node) })
	slices.SortFunc(e.Withdrawn, func(a, b BGPWithdrawn) int { return strings.Compare(a.Node, b.Node) })
	e.Nodes = len(c.Nodes)
	if len(e.Advertisers) == 0 {
		e.NoLocalEndpoint = len(none[BGPNoLocalEndpoint]) > 0
		e.WhyNone = whyNoAdvertiser(dead, none)
	}
	return e
}

// whyNoAdvertiser names what kept each node from advertising: "no node may advertise (speaker
// not alive: a; not Ready: b)".
func whyNoAdvertiser(dead []string, none map[BGPWhyNot][]string) string {
	var parts []string
	if len(dead) > 0 {
		slices.Sort(dead)
		parts = append(parts, "speaker not alive: "+strings.Join(dead, ","))
	}
	for why := BGPNoSession; why <= BGPNoLocalEndpoint; why++ {
		if nodes := none[why]; len(nodes) > 0 {
			slices.Sort(nodes)
			parts = append(parts, fmt.Sprintf("%s: %s", why, strings.Join(nodes, ",")))
		}
	}
	if len(parts) == 0 {
		return "no speaker is running"
	}
	msg := "no node may advertise (" + strings.Join(parts, "; ") + ")"
	if len(none[BGPExcluded]) > 0 {
		msg += "; speakers run with --ignore-exclude-lb-label announce from labelled nodes"
	}
	return msg
}
