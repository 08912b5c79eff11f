package rules

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules/election"
)

// Which node answers for an address over L2 is decided here, once, for every side: each
// speaker's plan (which answers), the controller's Announced condition (which it names), the
// self-check (who probes) and kubectl portico explain. A Service's share of an address
// (L2ShareOf) reads its advertisements, the nodes and its endpoints; the owner (L2Owner) is
// elected from the shares of every Service listing the address. L2EligibilityOf puts the two
// together; the speaker's planner calls them apart, to plan again only the Services that change.

// L2Share is one Service's part in who answers for one of its addresses over L2.
type L2Share struct {
	Service string // namespace/name
	// Eligible are the nodes that may answer for the Service, sorted (election.Eligible).
	Eligible []string
	// Interfaces are where node me (L2ShareOf's) answers: nil means every suitable interface.
	Interfaces []string
	// GratuitousEvery is how often node me announces the address again (the shortest
	// gratuitousInterval of the advertisements selecting it; 0: only when it takes it over).
	GratuitousEvery time.Duration
	// Weights are the preferredNodeSelectors' weights by node (nil: none).
	Weights map[string]int32
	// WhyNone names what excluded every node, when none is eligible.
	WhyNone string
	// NoLocalEndpoint: nodes would be eligible but for externalTrafficPolicy Local, none of
	// them holding a ready endpoint.
	NoLocalEndpoint bool
	// Nodes is how many nodes were considered (0: the cluster has no Node objects).
	Nodes int
}

// L2ShareOf is svc's share of an address its L2Advertisements ads cover. local are svc's
// endpoints on each node (LocalEndpointsOf); alive says whether a node runs a live speaker.
func (sel Selectors) L2ShareOf(c *Cluster, ads []*v1alpha1.L2Advertisement, svc *corev1.Service, local LocalEndpoints, me string, alive func(string) bool) L2Share {
	s := L2Share{Service: svc.Namespace + "/" + svc.Name}
	cands, ifaces := sel.Candidates(c.Nodes, ads, local, me, alive, c.IgnoreExcludeLabel)
	s.Interfaces, s.Weights, s.Nodes = ifaces, election.Weights(cands), len(cands)
	for i := range c.Nodes {
		if c.Nodes[i].Name == me {
			s.GratuitousEvery = sel.GratuitousEvery(ads, c.Nodes[i].Labels)
		}
	}
	isLocal := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	s.Eligible, s.WhyNone = election.Eligible(cands, election.Policy{LocalOnly: isLocal})
	if len(s.Eligible) == 0 && isLocal {
		anyway, _ := election.Eligible(cands, election.Policy{})
		s.NoLocalEndpoint = len(anyway) > 0
	}
	return s
}

// GratuitousEvery is how often a node labelled nodeLabels announces again an address the
// advertisements ads cover: the shortest gratuitousInterval of those selecting it, 0 (only on
// takeover) when none sets one.
func (sel Selectors) GratuitousEvery(ads []*v1alpha1.L2Advertisement, nodeLabels map[string]string) time.Duration {
	var every time.Duration
	for _, ad := range ads {
		if ad.Spec.GratuitousInterval == nil || len(ad.Spec.NodeSelectors) > 0 && !sel.MatchesAny(ad.Spec.NodeSelectors, nodeLabels) {
			continue
		}
		if d := ad.Spec.GratuitousInterval.Duration; d > 0 && (every == 0 || d < every) {
			every = d
		}
	}
	return every
}

// L2Election is who answers for an address over L2 and among which nodes (L2Owner).
type L2Election struct {
	// Owner is the node elected, "" when no node may answer.
	Owner string
	// Nodes are the nodes eligible for every Service listing the address (for any, on a
	// Conflict) with an up interface in its subnet, or all of them when none has one
	// (OffSubnet); Electable are the heaviest preferred of those, whom the owner is elected
	// among.
	Nodes, Electable []string
	// Conflict says that no node may answer for every Service sharing the address; OffSubnet,
	// that the owner may answer where nobody hears it.
	Conflict  string
	OffSubnet bool
}

// L2Owner elects the node that answers for ip over L2 from the shares of every Service listing
// it. Services sharing an address have one owner, or two nodes would answer and clients would
// flap between them: it is elected among the nodes eligible for every one of them, or, when no
// node is (their advertisements or endpoints pick different nodes), among those eligible for
// any, which Conflict then describes. Only the heaviest preferred of those nodes (the shares'
// weights add up) take part, and of those only the ones with an up interface in ip's subnet
// (subnets) unless none has one. Among them a node holding ip keeps it (election.Sticky:
// holders are the nodes whose Speaker status lists it), else the hash picks. The order of
// shares does not matter.
func L2Owner(ip netip.Addr, shares []L2Share, subnets Subnets, holders []election.Holder) L2Election {
	var e L2Election
	if len(shares) == 0 {
		return e
	}
	nodes := slices.Clone(shares[0].Eligible)
	var all []string
	for _, s := range shares {
		nodes = slices.DeleteFunc(nodes, func(n string) bool { return !slices.Contains(s.Eligible, n) })
		all = append(all, s.Eligible...)
	}
	if len(nodes) == 0 && len(all) > 0 {
		slices.Sort(all)
		nodes = slices.Compact(all)
		names := make([]string, 0, len(shares))
		for _, s := range shares {
			names = append(names, s.Service)
		}
		slices.Sort(names)
		e.Conflict = fmt.Sprintf("%s is shared by %s, but no node may answer for all of them (their L2Advertisements or endpoints pick different nodes); a node one of them allows answers",
			ip, strings.Join(slices.Compact(names), ", "))
	}
	e.Nodes, e.OffSubnet = subnets.reaching(ip, nodes)
	e.Electable = election.Preferred(e.Nodes, weightsOf(shares))
	e.Owner, _ = election.Sticky(ip, e.Electable, holders)
	return e
}

// weightsOf adds up the shares' preferences: a node every Service prefers comes first.
func weightsOf(shares []L2Share) map[string]int32 {
	if len(shares) == 1 {
		return shares[0].Weights
	}
	sum := map[string]int32{}
	for _, s := range shares {
		for n, w := range s.Weights {
			sum[n] += w
		}
	}
	return sum
}

// L2Eligibility is what the rules say about who answers for one address of a Service over L2.
type L2Eligibility struct {
	// Pool the address came from; "" when it is in no pool.
	Pool string
	// Advertised: some L2Advertisement selects the pool and the Service.
	Advertised bool
	// Eligible are the nodes the owner is elected among, sorted (with a shared address, those
	// eligible for every Service listing it), and Owner the one elected to answer.
	Eligible []string
	Owner    string
	// OffSubnet: no node the owner is elected among has an up interface in the address's
	// subnet (L2Owner), so the owner answers where its neighbours may not hear it.
	OffSubnet bool
	// Sharers are the Services whose addresses' owner this is (namespace/name, sorted): the
	// Service asked about and those sharing the address, as far as an L2Advertisement covers
	// them. Conflict says that no node may answer for all of them (L2Owner).
	Sharers  []string
	Conflict string
	// WhyNone names what excluded every node (election.Eligible's reason), when none is eligible.
	WhyNone string
	// Nodes is how many nodes were considered (0: the cluster has no Node objects).
	Nodes int
	// NoLocalEndpoint: no node answers, and nodes would but for externalTrafficPolicy Local,
	// none of them holding a ready endpoint.
	NoLocalEndpoint bool
}

// L2EligibilityOf says which node answers for ip of svc over L2, and why none does: svc's share
// and those of the Services in c.Services that list ip, their owner elected by L2Owner (c.Holders
// keeping it where it is). alive says whether a node runs a live speaker. A move for balance
// (election.Balance) is not told: it needs every address, and lasts until the new owner holds it.
func L2EligibilityOf(c Cluster, svc *corev1.Service, ip netip.Addr, alive func(node string) bool) L2Eligibility {
	var e L2Eligibility
	sel := Selectors{}
	pools, _ := ParsePools(c.Pools)
	pool, ok := PoolOf(svc, ip, pools)
	if !ok {
		return e
	}
	e.Pool = pool.Name
	ads := sel.L2AdvertisementsFor(c.L2Advertisements, pool, svc)
	if len(ads) == 0 {
		return e
	}
	e.Advertised = true
	key := svc.Namespace + "/" + svc.Name
	sharing := []corev1.Service{*svc}
	for i := range c.Services {
		s := &c.Services[i]
		if s.Namespace+"/"+s.Name != key && slices.Contains(v1alpha1.IngressAddrs(s), ip) {
			sharing = append(sharing, *s)
		}
	}
	local := LocalEndpointsOf(sharing, c.EndpointSlices)
	own := sel.L2ShareOf(&c, ads, svc, local[key], "", alive)
	shares := []L2Share{own}
	for i := range sharing[1:] {
		s := &sharing[1+i]
		if p, ok := PoolOf(s, ip, pools); ok {
			if theirs := sel.L2AdvertisementsFor(c.L2Advertisements, p, s); len(theirs) > 0 {
				shares = append(shares, sel.L2ShareOf(&c, theirs, s, local[s.Namespace+"/"+s.Name], "", alive))
			}
		}
	}
	el := L2Owner(ip, shares, c.Subnets, c.Holders[ip])
	e.Owner, e.Eligible, e.Conflict, e.OffSubnet = el.Owner, el.Nodes, el.Conflict, el.OffSubnet
	for _, s := range shares {
		e.Sharers = append(e.Sharers, s.Service)
	}
	slices.Sort(e.Sharers)
	e.Nodes = own.Nodes
	if e.Owner == "" {
		e.WhyNone, e.NoLocalEndpoint = own.WhyNone, own.NoLocalEndpoint
	}
	return e
}
