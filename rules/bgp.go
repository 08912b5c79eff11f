package rules

import (
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// Which nodes advertise an address of a Service over BGP, and to which of their sessions, is
// decided here, once, for every side: each speaker's plan (its own routes, and whether a node
// before it by name already tells of the address), the controller's Announced condition (who
// should, or why none does) and kubectl portico explain. Unlike L2 there is no owner: every
// node the rule admits advertises, and routers spread the traffic over them (ECMP).

// BGPSession is one BGPPeer a node holds a session with, as the rule reads it.
type BGPSession struct {
	Peer string // the BGPPeer's name
	IPv6 bool   // the session runs over IPv6 (an unnumbered peer's always does)
}

// BGPNode is one node as the BGP rule reads it (BGPNodeOf).
type BGPNode struct {
	Name   string
	Labels map[string]string
	// Sessions are the BGPPeers it holds a session with, by name.
	Sessions []BGPSession
	Excluded bool // ExcludedFromLB
	Fitness  NodeFitness
	Standing BGPStanding
	// Has4, Has6: it has an InternalIP of the family, the next hop of an address sent over a
	// session of the other family.
	Has4, Has6 bool
}

// BGPPeerSelects reports whether BGPPeer bp holds a session with a node labelled labels.
func (sel Selectors) BGPPeerSelects(bp *v1alpha1.BGPPeer, labels map[string]string) bool {
	return len(bp.Spec.NodeSelectors) == 0 || sel.MatchesAny(bp.Spec.NodeSelectors, labels)
}

// BGPSessionOf is the session BGPPeer bp opens, as the rule reads it.
func BGPSessionOf(bp *v1alpha1.BGPPeer) BGPSession {
	addr, err := netip.ParseAddr(string(bp.Spec.PeerAddress))
	return BGPSession{Peer: bp.Name, IPv6: bp.Spec.Interface != "" || err == nil && addr.Unmap().Is6()}
}

// bgpFit reports whether node n, alive, may advertise without reservation: it holds a
// session, is not excluded, Ready, its network available, not cordoned.
func (sel Selectors) bgpFit(n *corev1.Node, peers []v1alpha1.BGPPeer, ignoreExclude bool) bool {
	if ExcludedFromLB(n, ignoreExclude) || !FitnessOf(n).Fit() {
		return false
	}
	return slices.ContainsFunc(peers, func(bp v1alpha1.BGPPeer) bool { return sel.BGPPeerSelects(&bp, n.Labels) })
}

// BGPFitNodes counts the live nodes that may advertise without reservation: a cordoned node
// keeps advertising while no other node can (BGPStandingOf).
func (sel Selectors) BGPFitNodes(nodes []corev1.Node, peers []v1alpha1.BGPPeer, alive func(string) bool, ignoreExclude bool) int {
	fit := 0
	for i := range nodes {
		if alive(nodes[i].Name) && sel.bgpFit(&nodes[i], peers, ignoreExclude) {
			fit++
		}
	}
	return fit
}

// BGPNodeOf reads node n for the rule: its sessions are those of the BGPPeers selecting it
// (the speaker then leaves out those it cannot open: BGPNode.Keep), its standing
// BGPStandingOf's with fitNodes from BGPFitNodes, n itself not counted among the others.
func (sel Selectors) BGPNodeOf(n *corev1.Node, peers []v1alpha1.BGPPeer, ignoreExclude bool, drain Drain, fitNodes int) BGPNode {
	b := BGPNode{Name: n.Name, Labels: n.Labels, Excluded: ExcludedFromLB(n, ignoreExclude), Fitness: FitnessOf(n)}
	for i := range peers {
		if sel.BGPPeerSelects(&peers[i], n.Labels) {
			b.Sessions = append(b.Sessions, BGPSessionOf(&peers[i]))
		}
	}
	slices.SortFunc(b.Sessions, func(x, y BGPSession) int { return strings.Compare(x.Peer, y.Peer) })
	if sel.bgpFit(n, peers, ignoreExclude) {
		fitNodes-- // itself
	}
	b.Standing = BGPStandingOf(b.Fitness, drain.CordonedFor(n.Name), drain.grace(), fitNodes > 0)
	for _, ip := range InternalIPs(n) {
		b.Has4, b.Has6 = b.Has4 || ip.Is4(), b.Has6 || ip.Is6()
	}
	return b
}

// Keep leaves out of the node's sessions those keep refuses.
func (b *BGPNode) Keep(keep func(peer string) bool) {
	b.Sessions = slices.DeleteFunc(b.Sessions, func(s BGPSession) bool { return !keep(s.Peer) })
}

// BGPAdvertisementsFor returns the BGPAdvertisements that advertise the pool's addresses for svc.
func (sel Selectors) BGPAdvertisementsFor(ads []v1alpha1.BGPAdvertisement, pool *v1alpha1.IPAddressPool, svc *corev1.Service) []*v1alpha1.BGPAdvertisement {
	var out []*v1alpha1.BGPAdvertisement
	for i := range ads { // by index: the cache's keys point into ads
		s := &ads[i].Spec
		if sel.Covers(s.IPAddressPools, s.IPAddressPoolSelectors, s.ServiceSelectors, pool, svc) {
			out = append(out, &ads[i])
		}
	}
	return out
}

// BGPWhyNot is why a node does not advertise an address (BGPSends: it does).
type BGPWhyNot int

const (
	BGPSends              BGPWhyNot = iota
	BGPNoSession                    // no BGPPeer selects it (or none it can open)
	BGPNotSelected                  // no advertisement of the address selects it (nodeSelectors)
	BGPNoPeerOfAd                   // the advertisements' peers name none of its sessions
	BGPNoNextHop                    // every session is of the other family, and it has no InternalIP of the address's
	BGPExcluded                     // ExcludedFromLB
	BGPNetworkUnavailable           // its routes are withdrawn (BGPStandingOf)
	BGPNotReady                     // its routes are withdrawn (BGPStandingOf)
	BGPOutOfService                 // its routes are withdrawn (BGPStandingOf)
	BGPDrained                      // cordoned past the drain grace while another node can advertise
	BGPNoLocalEndpoint              // externalTrafficPolicy Local, and it holds no ready endpoint
)

// String says why, for the conditions and explain.
func (w BGPWhyNot) String() string {
	return [...]string{"advertises", "no BGP session (no BGPPeer selects it)", "not matched by the BGPAdvertisements' nodeSelectors",
		"the BGPAdvertisements' peers name none of its sessions", "no InternalIP of the address's family for the next hop over its sessions",
		"labelled node.kubernetes.io/exclude-from-external-load-balancers", "condition NetworkUnavailable True", "not Ready",
		"tainted node.kubernetes.io/out-of-service",
		"cordoned, past the drain grace, while another node can advertise", "no ready local endpoint (externalTrafficPolicy Local)"}[w]
}

// BGPSendsOf says whether node n advertises ip, of a Service whose BGPAdvertisements are ads
// (BGPAdvertisementsFor), and calls send for each advertisement it sends ip through: to, its
// sessions the advertisement names that can carry ip; noNextHop, those of the other family
// that cannot (n has no InternalIP of ip's family). localEndpoints counts n's ready endpoints
// of the Service, for externalTrafficPolicy Local (isLocal).
func (sel Selectors) BGPSendsOf(n *BGPNode, ads []*v1alpha1.BGPAdvertisement, ip netip.Addr, isLocal bool, localEndpoints int,
	send func(ad *v1alpha1.BGPAdvertisement, to, noNextHop []BGPSession)) BGPWhyNot {
	if len(n.Sessions) == 0 {
		return BGPNoSession
	}
	why, checked := BGPNotSelected, false
	for _, ad := range ads {
		if len(ad.Spec.NodeSelectors) > 0 && !sel.MatchesAny(ad.Spec.NodeSelectors, n.Labels) {
			continue
		}
		to, noNextHop := n.sessionsFor(ad, ip)
		switch {
		case len(to) > 0:
			why = BGPSends
		case len(noNextHop) > 0 && why != BGPSends:
			why = BGPNoNextHop
		case why == BGPNotSelected:
			why = BGPNoPeerOfAd
		}
		if len(to) == 0 && len(noNextHop) == 0 {
			continue
		}
		if !checked {
			if v := n.withdrawn(isLocal, localEndpoints); v != BGPSends {
				return v
			}
			checked = true
		}
		send(ad, to, noNextHop)
	}
	return why
}

// sessionsFor are the node's sessions ad names (all when it names none), split into those that
// can carry ip and those of the other family that cannot, the node having no next hop for it.
func (n *BGPNode) sessionsFor(ad *v1alpha1.BGPAdvertisement, ip netip.Addr) (to, noNextHop []BGPSession) {
	hasFamily := ip.Is4() && n.Has4 || ip.Is6() && n.Has6
	for _, s := range n.Sessions {
		switch {
		case len(ad.Spec.Peers) > 0 && !slices.Contains(ad.Spec.Peers, v1alpha1.Name(s.Peer)):
		case s.IPv6 == ip.Is4() && !hasFamily:
			noNextHop = append(noNextHop, s)
		default:
			to = append(to, s)
		}
	}
	return to, noNextHop
}

// withdrawn says why a node that an advertisement sends an address through does not
// advertise it after all: the node is excluded, unfit (its standing), or holds no ready
// endpoint of an externalTrafficPolicy Local Service.
func (n *BGPNode) withdrawn(isLocal bool, localEndpoints int) BGPWhyNot {
	switch {
	case n.Excluded:
		return BGPExcluded
	case n.Standing == BGPWithdraw && n.Fitness.NetworkUnavailable:
		return BGPNetworkUnavailable
	case n.Standing == BGPWithdraw && n.Fitness.NotReady:
		return BGPNotReady
	case n.Standing == BGPWithdraw && n.Fitness.OutOfService:
		return BGPOutOfService
	case n.Standing == BGPWithdraw:
		return BGPDrained
	case isLocal && localEndpoints == 0:
		return BGPNoLocalEndpoint
	}
	return BGPSends
}
