package plan

import (
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

// World is everything the plan reads of the cluster: the objects as the speaker lists them
// from its cache, and the Secrets its BGPPeers reference.
type World struct {
	Services       []corev1.Service
	EndpointSlices []discoveryv1.EndpointSlice
	Nodes          []corev1.Node
	Advertisements []v1alpha1.L2Advertisement
	Pools          []v1alpha1.IPAddressPool
	BGPPeers       []v1alpha1.BGPPeer
	BGPAds         []v1alpha1.BGPAdvertisement
	BFDProfiles    []v1alpha1.BFDProfile
	// Secrets holds the Secrets BGPPeers reference for their passwords (as far as the speaker
	// could read them).
	Secrets []corev1.Secret
	// VRFs are the names of this node's VRF devices, read from the kernel; nil when not read
	// (no BGPPeer names a vrf), and then a peer's vrf is not checked here.
	VRFs map[string]bool
	// IgnoreExcludeLabel: nodes labelled exclude-from-external-load-balancers announce too.
	IgnoreExcludeLabel bool
	// IgnoreClassless: Services without a loadBalancerClass are another load balancer's.
	IgnoreClassless bool
	// Now is the time the plan is made at; CordonedSince, when the speaker first saw each
	// cordoned node cordoned (one missing was cordoned just now); DrainGrace, how long a
	// cordoned node advertises with GRACEFUL_SHUTDOWN before it withdraws (rules.BGPStandingOf).
	Now           time.Time
	CordonedSince map[string]time.Time
	DrainGrace    time.Duration
	// Subnets are where each node can answer over L2 (rules.Subnets): from the Speakers'
	// status, this node's own included, so that every node plans with the same.
	Subnets rules.Subnets
	// Holders are the nodes answering for each address over L2, from the Speakers' status
	// (rules.HoldersOf): an address stays with its holder (rules.L2Owner). Speakers are the
	// nodes that have a Speaker, and BalanceSettle how long all of them must have been alive
	// and every address held where it is before one moves for balance (election.Balance;
	// zero balances nothing). MembersSince is when the latest speaker joined as this node saw
	// it (its own start included): a speaker back from a crash takes nothing for balance until
	// the settle window has passed since, so an address that just moved off it does not move
	// straight back (a second move, with its flows handed off twice).
	Holders       rules.Holders
	Speakers      []string
	BalanceSettle time.Duration
	MembersSince  time.Time

	selectors rules.Selectors // filled while one plan is made
	routerIDs map[string]rules.RouterID
}

// Cluster is what the shared L2 and BGP rules read of the world.
func (w World) Cluster() rules.Cluster {
	return rules.Cluster{Nodes: w.Nodes, EndpointSlices: w.EndpointSlices, L2Advertisements: w.Advertisements, Pools: w.Pools,
		IgnoreExcludeLabel: w.IgnoreExcludeLabel, Subnets: w.Subnets, Holders: w.Holders, Speakers: w.Speakers,
		BGPPeers: w.BGPPeers, BGPAdvertisements: w.BGPAds, Drain: w.drain()}
}

// Claim is one address this node answers for.
type Claim struct {
	Services []string // namespace/name, sorted: several when Services share the address
	// Interfaces to answer on; nil means every suitable interface.
	Interfaces []string
	// GratuitousEvery is how often the address is announced again (the shortest of the
	// Services' L2Advertisements' gratuitousInterval); 0: only when this node takes it over.
	GratuitousEvery time.Duration
}

// Plan is what this node should answer for (L2) and advertise (BGP), and what it finds wrong
// with the configuration.
type Plan struct {
	Mine     map[netip.Addr]Claim // addresses this node answers for over L2 (ARP/NDP)
	BGP      BGP
	Routed   map[netip.Addr]BGPClaim // addresses this node advertises over BGP
	Problems []string
	// BFDProblems: the BGPPeers whose sessions run without the BFD their bfdProfile asks for,
	// and why (nil: none).
	BFDProblems map[string]BFDProblem
	// ReplanAt is when a cordoned node's grace ends or the cluster will have settled for
	// balance (ReplanFor says which), so that the plan changes with no change to the cluster:
	// the speaker plans everything again then (zero: no such time).
	ReplanAt  time.Time
	ReplanFor string
	// Standing is what this node's fitness lets it do with its BGP routes (drains: a change
	// of it changes the node's place in its addresses' ECMP sets).
	Standing rules.BGPStanding
}

// Make decides, from the cluster's objects and the live members, which addresses node me
// answers for and advertises. Every speaker plans on the same inputs and the shared rules
// (rules.L2Owner, election.Balance) make them agree. It is a Planner's first plan: the speaker keeps the Planner and plans again only
// what changes.
func Make(w World, me, lbClass string, alive func(node string) bool) Plan {
	pl := NewPlanner(me, lbClass)
	pl.Replan(w, alive)
	return pl.Plan()
}

// claimOf is this node's claim on an address the Services sharing it list: every Service, and
// the interfaces any of them answers on.
func claimOf(ss []rules.L2Share) Claim {
	var c Claim
	all := false
	for _, s := range ss {
		c.Services = append(c.Services, s.Service)
		all = all || s.Interfaces == nil
		c.Interfaces = append(c.Interfaces, s.Interfaces...)
		if s.GratuitousEvery > 0 && (c.GratuitousEvery == 0 || s.GratuitousEvery < c.GratuitousEvery) {
			c.GratuitousEvery = s.GratuitousEvery
		}
	}
	slices.Sort(c.Services)
	c.Services = slices.Compact(c.Services)
	if all {
		c.Interfaces = nil
	} else {
		slices.Sort(c.Interfaces)
		c.Interfaces = slices.Compact(c.Interfaces)
	}
	return c
}
