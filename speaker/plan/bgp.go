package plan

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

// BGPClaim is one address this node advertises over BGP.
type BGPClaim struct {
	Services []string // namespace/name, sorted: several when Services share the address
	Peers    []string // BGPPeer names, sorted
	// Teller: this node tells the address's Services (an Announced event and its Speaker
	// status): every advertising node advertises the same, so one of them speaks for all.
	Teller bool
	// FirstTo are the peers of Peers no live node before this one by name sends the address
	// to: this node's status.bgp lists the address's routes to them, so each route to each
	// peer is listed by one node (all of Peers for the teller).
	FirstTo []string
}

// advertiseAddress adds ip of the Service key to p's routes from node n, as the BGP rule says
// (rules.BGPSendsOf): through each of the Service's advertisements ads that selects n, to each
// of n's sessions the advertisement sends to. ready counts the Service's ready endpoints by
// node, for externalTrafficPolicy Local (isLocal).
func (n *bgpNode) advertiseAddress(w *World, p *Plan, key string, ip netip.Addr, ads []*v1alpha1.BGPAdvertisement, isLocal bool, ready map[string]int) {
	if n == nil {
		return
	}
	endpoints := 0 // the node's ready endpoints of the Service, counted for externalTrafficPolicy Local only
	if isLocal {
		endpoints = ready[n.name]
	}
	w.selectors.BGPSendsOf(&n.rule, ads, ip, isLocal, endpoints, func(ad *v1alpha1.BGPAdvertisement, to, noNextHop []rules.BGPSession) {
		advertise(p, ad, key, ip, n.mine, to, noNextHop, n.rule.Standing == rules.BGPGracefulShutdown, endpoints)
	})
}

// sentEarlier asks the live nodes before this one by name what they do with ip of the Service key: teller
// when none advertises it (the teller is the first advertising node in name order, so one
// Announced event and one Speaker status entry stand for every node, however many advertise),
// and firstTo, the peers of mine none of them sends it to (whose routes this node lists). Each
// question stops at the first earlier node that answers it, and for a peer only the earlier
// nodes holding that peer are asked: with peers per rack, the rack's nodes, not the cluster's.
func (pl *Planner) sentEarlier(key string, ip netip.Addr, ads []*v1alpha1.BGPAdvertisement, isLocal bool, ready map[string]int, mine []string) (teller bool, firstTo []string) {
	asked := map[*bgpNode][]string{} // the peers each node asked sends ip to (nil: none)
	sends := func(n *bgpNode) []string {
		if peers, ok := asked[n]; ok {
			return peers
		}
		theirs := pl.scratchFor(n)
		n.advertiseAddress(&pl.w, theirs, key, ip, ads, isLocal, ready)
		asked[n] = theirs.Routed[ip].Peers
		return asked[n]
	}
	if !slices.ContainsFunc(pl.earlier, func(n *bgpNode) bool { return len(sends(n)) > 0 }) {
		return true, mine
	}
	for _, peer := range mine {
		if !slices.ContainsFunc(pl.earlierWith[peer], func(n *bgpNode) bool { return slices.Contains(sends(n), peer) }) {
			firstTo = append(firstTo, peer)
		}
	}
	return false, firstTo
}

// GracefulShutdown is the well-known GRACEFUL_SHUTDOWN community (RFC 8326, 65535:0): a route
// carrying it is about to go, and routers that honour it prefer any other path.
const GracefulShutdown uint32 = 0xFFFF0000

// BandwidthPerEndpoint is the link bandwidth a route of a weightByEndpoints advertisement
// carries per ready local endpoint, in bytes per second (the community's unit): 1 Mbit/s, the
// smallest figure FRR, which counts in Mbit/s, does not round to nothing. Only the ratio
// between nodes matters to a router.
const BandwidthPerEndpoint float32 = 1e6 / 8

// advertise adds ip (or its aggregate) to the sessions to that ad sends it to, and says that
// it cannot go to those of noNextHop; shutdown adds GracefulShutdown to its communities;
// endpoints, the node's ready endpoints of an externalTrafficPolicy Local Service (0 for
// others), sets the link bandwidth when ad weighs routes by endpoints.
func advertise(p *Plan, ad *v1alpha1.BGPAdvertisement, service string, ip netip.Addr, mine map[netip.Addr]bool, to, noNextHop []rules.BGPSession, shutdown bool, endpoints int) {
	for _, s := range noNextHop {
		p.Problems = append(p.Problems, fmt.Sprintf("BGPPeer %s: cannot advertise %s over an %s session: this node has no %s InternalIP for the next hop",
			s.Peer, ip, familyName(!s.IPv6), familyName(ip.Is4())))
	}
	if len(to) == 0 {
		return
	}
	prefix, attrs, ok := routeOf(p, ad, ip, shutdown, endpoints)
	if !ok {
		return
	}
	claim := p.Routed[ip]
	if !slices.Contains(claim.Services, service) {
		claim.Services = append(claim.Services, service)
		slices.Sort(claim.Services)
	}
	for _, s := range to {
		peer := p.BGP.Peers[s.Peer]
		a := attrs
		if peer.iBGP() && ad.Spec.LocalPref != nil {
			a.LocalPref = *ad.Spec.LocalPref
		}
		if s.IPv6 == ip.Is4() {
			// The session's local address is of the other family: name this node's own.
			a.NextHop = rules.LowestOfFamily(maps.Keys(mine), ip.Is4())
		}
		routes := p.BGP.Routes[s.Peer]
		r, had := routes[prefix]
		if problem := mergeRoute(&r, had, s.Peer, Route{Prefix: prefix, Attrs: a, Services: []string{service}}); problem != "" {
			p.Problems = append(p.Problems, problem)
		}
		routes[prefix] = r
		if !slices.Contains(claim.Peers, s.Peer) {
			claim.Peers = append(claim.Peers, s.Peer)
			slices.Sort(claim.Peers)
		}
	}
	p.Routed[ip] = claim
}

// routeOf is the prefix ad advertises ip in (itself or its aggregate) and the attributes it
// gives it; false, with the problem added to p, when ad's aggregation does not fit ip.
func routeOf(p *Plan, ad *v1alpha1.BGPAdvertisement, ip netip.Addr, shutdown bool, endpoints int) (netip.Prefix, Attrs, bool) {
	s := &ad.Spec
	bits := 32
	if s.AggregationLength != nil {
		bits = int(*s.AggregationLength)
	}
	if ip.Is6() {
		bits = 128
		if s.AggregationLengthV6 != nil {
			bits = int(*s.AggregationLengthV6)
		}
	}
	var attrs Attrs
	prefix, err := ip.Prefix(bits)
	if err != nil {
		p.Problems = append(p.Problems, fmt.Sprintf("BGPAdvertisement %s: %v", ad.Name, err))
		return prefix, attrs, false
	}
	for _, c := range s.Communities {
		if err := attrs.addCommunity(c); err != nil {
			p.Problems = append(p.Problems, fmt.Sprintf("BGPAdvertisement %s: %v", ad.Name, err))
		}
	}
	if shutdown && !slices.Contains(attrs.Communities, GracefulShutdown) {
		attrs.Communities = append(attrs.Communities, GracefulShutdown)
	}
	if s.WeightByEndpoints {
		attrs.LinkBandwidth = float32(endpoints) * BandwidthPerEndpoint
	}
	return prefix, attrs, true
}

// mergeRoute adds add to the route r to BGPPeer peer (had: r holds one already), and says
// when the two ask for different local-prefs.
func mergeRoute(r *Route, had bool, peer string, add Route) (problem string) {
	if !had {
		*r = Route{Prefix: add.Prefix, Attrs: add.Attrs, Services: slices.Clone(add.Services)}
		return ""
	}
	if r.Attrs.LocalPref != add.Attrs.LocalPref && r.Attrs.LocalPref != 0 && add.Attrs.LocalPref != 0 {
		problem = fmt.Sprintf("%s to BGPPeer %s: advertisements ask for local-pref %d and %d; using the higher",
			add.Prefix, peer, r.Attrs.LocalPref, add.Attrs.LocalPref)
	}
	bandwidth := max(r.Attrs.LinkBandwidth, add.Attrs.LinkBandwidth) // two advertisements of one Service
	if !slices.ContainsFunc(add.Services, func(s string) bool { return slices.Contains(r.Services, s) }) {
		// Other Services on the same prefix (a shared address, an aggregate): the prefix
		// reaches the endpoints of all of them.
		bandwidth = r.Attrs.LinkBandwidth + add.Attrs.LinkBandwidth
	}
	r.Attrs = mergeAttrs(r.Attrs, add.Attrs)
	r.Attrs.LinkBandwidth = bandwidth
	r.Services = unionSorted(r.Services, add.Services)
	return problem
}

// ListsRoutesTo are the peers this node lists the routes of prefix p to in its Speaker status:
// its address's FirstTo, or for an aggregate those of the addresses in it (aggregates are few:
// reading every address for one is the price of aggregation).
func (p Plan) ListsRoutesTo(prefix netip.Prefix) []string {
	if prefix.IsSingleIP() {
		return p.Routed[prefix.Addr()].FirstTo
	}
	var peers []string
	for ip, c := range p.Routed {
		if prefix.Contains(ip) {
			peers = unionSorted(peers, c.FirstTo)
		}
	}
	return peers
}

// unionSorted is the sorted union of two sorted lists (a new list when b adds to a).
func unionSorted(a, b []string) []string {
	out := a
	for _, s := range b {
		if i, found := slices.BinarySearch(out, s); !found {
			if len(out) == len(a) {
				out = slices.Clone(a)
			}
			out = slices.Insert(out, i, s)
		}
	}
	return out
}

// mergeAttrs combines two advertisements of one prefix to one peer: the union of communities,
// the higher local-pref.
func mergeAttrs(a, b Attrs) Attrs {
	out := a
	out.LocalPref = max(a.LocalPref, b.LocalPref)
	out.Communities = append(slices.Clone(a.Communities), b.Communities...)
	out.Large = append(slices.Clone(a.Large), b.Large...)
	slices.Sort(out.Communities)
	out.Communities = slices.Compact(out.Communities)
	slices.SortFunc(out.Large, func(x, y LargeCommunity) int {
		if x.Global != y.Global {
			return int(int64(x.Global) - int64(y.Global))
		}
		if x.Local1 != y.Local1 {
			return int(int64(x.Local1) - int64(y.Local1))
		}
		return int(int64(x.Local2) - int64(y.Local2))
	})
	out.Large = slices.Compact(out.Large)
	return out
}
