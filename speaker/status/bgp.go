package status

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/plan"
)

// BGPPeers is the Speaker status's view of the BGP side: each peer's AS numbers and
// address as resolved here (learned ones from the running sessions). Nil when this node holds
// no session.
func BGPPeers(d plan.BGP, states map[string]plan.SessionState) *v1alpha1.SpeakerBGP {
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
// there (plan.BGPClaim.FirstTo): every node sends the same, so one Service change rewrites one
// Speaker's routes (the teller's, with the same write as its announcement), however many nodes
// advertise it.

// updateRoutes rewrites the entries of the prefixes that changed: those given, the host routes
// of the addresses in routed and the aggregates holding them (whose lister may have changed
// with an address's FirstTo), every prefix when all. The caller holds v.mu.
func (v *View) updateRoutes(p plan.Plan, routed []netip.Addr, prefixes []netip.Prefix, all bool) {
	touched := map[netip.Prefix]bool{}
	for _, pfx := range prefixes {
		touched[pfx] = true
	}
	if all {
		for pfx := range v.routes {
			touched[pfx] = true
		}
		for _, routes := range p.BGP.Routes {
			for pfx := range routes {
				touched[pfx] = true
			}
		}
	}
	for _, ip := range routed {
		touched[netip.PrefixFrom(ip, ip.BitLen())] = true
		for pfx := range v.aggregates {
			if pfx.Contains(ip) {
				touched[pfx] = true
			}
		}
	}
	for pfx := range touched {
		if !pfx.IsSingleIP() && routedAnywhere(p, pfx) {
			v.aggregates[pfx] = true
		} else {
			delete(v.aggregates, pfx)
		}
		setEntries(v, v.routes, pfx, routeEntries(p, pfx))
	}
}

func routedAnywhere(p plan.Plan, pfx netip.Prefix) bool {
	for _, routes := range p.BGP.Routes {
		if _, ok := routes[pfx]; ok {
			return true
		}
	}
	return false
}

// routeEntries are prefix pfx's entries in status.bgp.routes: one per set of attributes, naming
// the peers (of those this node lists it to) that get it, ordered by attributes.
func routeEntries(p plan.Plan, pfx netip.Prefix) []v1alpha1.AdvertisedRoute {
	type entry struct {
		attrs plan.Attrs
		peers []string
	}
	var es []entry
	for _, name := range p.ListsRoutesTo(pfx) {
		r, ok := p.BGP.Routes[name][pfx]
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
		ar := v1alpha1.AdvertisedRoute{Prefix: pfx.String(), Peers: e.peers, LocalPref: e.attrs.LocalPref,
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
func (v *View) listRoutes() ([]v1alpha1.AdvertisedRoute, int32) {
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
