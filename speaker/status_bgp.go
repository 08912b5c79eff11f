package speaker

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/bgp"
)

// bgpPeersStatus is the Speaker status's view of the BGP side: each peer's AS numbers and
// address as resolved here (learned ones from the running sessions). Nil when this node holds
// no session.
func bgpPeersStatus(d bgp.Desired, states map[string]bgp.State) *v1alpha1.SpeakerBGP {
	if len(d.Peers) == 0 {
		return nil
	}
	out := &v1alpha1.SpeakerBGP{}
	for _, name := range slices.Sorted(maps.Keys(d.Peers)) {
		p := d.Peers[name]
		in := v1alpha1.BGPPeerInUse{Peer: name, MyASN: p.MyASN, PeerASN: p.PeerASN}
		addr := p.Address
		if st, ok := states[name]; ok {
			in.PeerASN = cmp.Or(in.PeerASN, st.PeerASN)
			addr = cmp.Or(addr, st.Address)
		}
		if addr.IsValid() {
			in.Address = addr.String()
		}
		out.Peers = append(out.Peers, in)
	}
	return out
}

// Each route to each peer is listed by one node, the first live one by name that sends it
// there (BGPClaim.FirstTo): every node sends the same, so one Service change rewrites one
// Speaker's routes (the teller's, with the same write as its announcement), however many nodes
// advertise it.

// updateRoutes rewrites the entries of the prefixes that changed: those given, the host routes
// of the addresses in routed and the aggregates holding them (whose lister may have changed
// with an address's FirstTo), every prefix when all. The caller holds v.mu.
func (v *statusView) updateRoutes(plan Plan, routed []netip.Addr, prefixes []netip.Prefix, all bool) {
	touched := map[netip.Prefix]bool{}
	for _, p := range prefixes {
		touched[p] = true
	}
	if all {
		for p := range v.routes {
			touched[p] = true
		}
		for _, routes := range plan.BGP.Routes {
			for p := range routes {
				touched[p] = true
			}
		}
	}
	for _, ip := range routed {
		touched[netip.PrefixFrom(ip, ip.BitLen())] = true
		for p := range v.aggregates {
			if p.Contains(ip) {
				touched[p] = true
			}
		}
	}
	for p := range touched {
		if !p.IsSingleIP() && routedAnywhere(plan, p) {
			v.aggregates[p] = true
		} else {
			delete(v.aggregates, p)
		}
		setEntries(v, v.routes, p, routeEntries(plan, p))
	}
}

func routedAnywhere(plan Plan, p netip.Prefix) bool {
	for _, routes := range plan.BGP.Routes {
		if _, ok := routes[p]; ok {
			return true
		}
	}
	return false
}

// listFirstTo are the peers this node lists the routes of prefix p to: its address's FirstTo,
// or for an aggregate those of the addresses in it (aggregates are few: reading every address
// for one is the price of aggregation).
func listFirstTo(plan Plan, p netip.Prefix) []string {
	if p.IsSingleIP() {
		return plan.Routed[p.Addr()].FirstTo
	}
	var peers []string
	for ip, c := range plan.Routed {
		if p.Contains(ip) {
			peers = unionSorted(peers, c.FirstTo)
		}
	}
	return peers
}

// routeEntries are prefix p's entries in status.bgp.routes: one per set of attributes, naming
// the peers (of those this node lists it to) that get it, ordered by attributes.
func routeEntries(plan Plan, p netip.Prefix) []v1alpha1.AdvertisedRoute {
	type entry struct {
		attrs bgp.Attrs
		peers []string
	}
	var es []entry
	for _, name := range listFirstTo(plan, p) {
		r, ok := plan.BGP.Routes[name][p]
		if !ok {
			continue
		}
		if i := slices.IndexFunc(es, func(e entry) bool { return e.attrs.Equal(r.Attrs) }); i >= 0 {
			es[i].peers = append(es[i].peers, name) // names come sorted
			continue
		}
		es = append(es, entry{r.Attrs, []string{name}})
	}
	slices.SortFunc(es, func(a, b entry) int { return strings.Compare(fmt.Sprint(a.attrs), fmt.Sprint(b.attrs)) })
	var out []v1alpha1.AdvertisedRoute
	for _, e := range es {
		ar := v1alpha1.AdvertisedRoute{Prefix: p.String(), Peers: e.peers, LocalPref: e.attrs.LocalPref,
			Communities: capCommunities(e.attrs.CommunityStrings())}
		if e.attrs.NextHop.IsValid() {
			ar.NextHop = e.attrs.NextHop.String()
		}
		out = append(out, ar)
	}
	return out
}

// listRoutes is status.bgp.routes: the entries by prefix, at most MaxBGPRoutes, and how many
// were left out. The caller holds v.mu.
func (v *statusView) listRoutes() ([]v1alpha1.AdvertisedRoute, int32) {
	prefixes := slices.SortedFunc(maps.Keys(v.routes), func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), a.Bits()-b.Bits())
	})
	var out []v1alpha1.AdvertisedRoute
	total := 0
	for _, p := range prefixes {
		es := v.routes[p]
		total += len(es)
		out = append(out, es[:min(len(es), v1alpha1.MaxBGPRoutes-len(out))]...)
	}
	return out, int32(total - len(out))
}

func capCommunities(cs []string) []string {
	if len(cs) <= v1alpha1.MaxRouteCommunities {
		return cs
	}
	keep := v1alpha1.MaxRouteCommunities - 1
	return append(cs[:keep], fmt.Sprintf("+%d more", len(cs)-keep))
}
