package plan

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

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
	// IgnoreExcludeLabel: nodes labelled exclude-from-external-load-balancers announce too.
	IgnoreExcludeLabel bool
	// IgnoreClassless: Services without a loadBalancerClass are another load balancer's.
	IgnoreClassless bool

	selectors rules.Selectors // filled while one plan is made
}

// Cluster is what the shared L2 rules read of the world.
func (w World) Cluster() rules.Cluster {
	return rules.Cluster{Nodes: w.Nodes, EndpointSlices: w.EndpointSlices, L2Advertisements: w.Advertisements, Pools: w.Pools,
		IgnoreExcludeLabel: w.IgnoreExcludeLabel}
}

// Claim is one address this node answers for.
type Claim struct {
	Services []string // namespace/name, sorted: several when Services share the address
	// Interfaces to answer on; nil means every suitable interface.
	Interfaces []string
}

// Plan is what this node should answer for (L2) and advertise (BGP), and what it finds wrong
// with the configuration.
type Plan struct {
	Mine     map[netip.Addr]Claim
	BGP      BGP
	Routed   map[netip.Addr]BGPClaim // addresses this node advertises over BGP
	Problems []string
}

// Make decides, from the cluster's objects and the live members, which addresses node me
// answers for and advertises. Every speaker plans on the same inputs and election.Owner makes
// them agree. It is a Planner's first plan: the speaker keeps the Planner and plans again only
// what changes.
func Make(w World, me, lbClass string, alive func(node string) bool) Plan {
	pl := NewPlanner(me, lbClass)
	pl.Replan(w, alive)
	return pl.Plan()
}

// sharer is one Service that lists an address, as the L2 rules see it.
type sharer struct {
	service  string
	eligible []string         // nodes that may answer for it
	ifaces   []string         // where this node would answer (nil: every suitable interface)
	weights  map[string]int32 // preferredNodeSelectors weights by node (nil: none)
}

// weightsOf adds up the sharers' preferences: a node every Service prefers comes first.
func weightsOf(ss []sharer) map[string]int32 {
	if len(ss) == 1 {
		return ss[0].weights
	}
	sum := map[string]int32{}
	for _, s := range ss {
		for n, w := range s.weights {
			sum[n] += w
		}
	}
	return sum
}

// answerers are the nodes the owner of ip is elected among. Services sharing an address have
// one owner, or two nodes would answer for it: a node eligible for every one of them. When no
// node is (their advertisements pick different nodes), any node eligible for one of them
// answers, and the configuration is reported as a problem.
func answerers(ip netip.Addr, ss []sharer) (nodes []string, problem string) {
	nodes = slices.Clone(ss[0].eligible)
	var all []string
	for _, s := range ss {
		nodes = slices.DeleteFunc(nodes, func(n string) bool { return !slices.Contains(s.eligible, n) })
		all = append(all, s.eligible...)
	}
	if len(nodes) > 0 || len(all) == 0 {
		return nodes, ""
	}
	slices.Sort(all)
	var names []string
	for _, s := range ss {
		names = append(names, s.service)
	}
	slices.Sort(names)
	return slices.Compact(all), fmt.Sprintf("%s is shared by %s, but no node may answer for all of them (their L2Advertisements or endpoints pick different nodes); a node one of them allows answers",
		ip, strings.Join(names, ", "))
}

// claimOf is this node's claim on an address the sharers list: every Service, and the
// interfaces any of them answers on.
func claimOf(ss []sharer) Claim {
	var c Claim
	all := false
	for _, s := range ss {
		c.Services = append(c.Services, s.service)
		all = all || s.ifaces == nil
		c.Interfaces = append(c.Interfaces, s.ifaces...)
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
