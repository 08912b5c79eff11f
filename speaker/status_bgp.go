package speaker

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/bgp"
)

// routesView is status.bgp's routes as last listed. Listing them reads every route, so while
// routes change they are listed again at most once per routesRefresh (the status writer holds a
// change to them alone that long anyway), the last listing standing meanwhile.
type routesView struct {
	routes    []v1alpha1.AdvertisedRoute
	omitted   int32
	at        time.Time
	stale     bool // the routes changed since they were listed
	scheduled bool // a re-report is on its way for them
}

// bgpStatus is the Speaker status's view of the BGP side (see bgpPeersStatus) with the routes
// of the latest listing: listed again now when they changed (changed) and the last listing is
// routesRefresh old, else at that time, when later calls the re-report.
func (v *statusView) bgpStatus(d bgp.Desired, states map[string]bgp.State, changed bool, now time.Time, later func(time.Duration)) *v1alpha1.SpeakerBGP {
	out := bgpPeersStatus(d, states)
	rv := &v.routes
	rv.stale = rv.stale || changed
	if due := rv.at.Add(routesRefresh).Sub(now); rv.stale && (due <= 0 || rv.at.IsZero()) {
		rv.routes, rv.omitted = bgpRoutes(d)
		rv.at, rv.stale, rv.scheduled = now, false, false
	} else if rv.stale && !rv.scheduled {
		rv.scheduled = true
		later(due)
	}
	if out != nil {
		out.Routes, out.OmittedRoutes = rv.routes, rv.omitted
	}
	return out
}

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

// bgpRoutes are the routes with the attributes the routers get, one entry per prefix and
// attributes naming all its peers, by prefix, capped at MaxBGPRoutes (the rest counted). Only
// the entries listed are rendered.
func bgpRoutes(d bgp.Desired) ([]v1alpha1.AdvertisedRoute, int32) {
	type entry struct {
		attrs bgp.Attrs
		peers []string
	}
	byPrefix := map[netip.Prefix][]entry{}
	for _, name := range slices.Sorted(maps.Keys(d.Peers)) {
		for pfx, r := range d.Routes[name] {
			es := byPrefix[pfx]
			if i := slices.IndexFunc(es, func(e entry) bool { return e.attrs.Equal(r.Attrs) }); i >= 0 {
				es[i].peers = append(es[i].peers, name) // names come sorted
				continue
			}
			byPrefix[pfx] = append(es, entry{r.Attrs, []string{name}})
		}
	}
	prefixes := slices.SortedFunc(maps.Keys(byPrefix), func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), a.Bits()-b.Bits())
	})
	var out []v1alpha1.AdvertisedRoute
	total := 0
	for _, pfx := range prefixes {
		es := byPrefix[pfx]
		total += len(es)
		if len(out) == v1alpha1.MaxBGPRoutes {
			continue
		}
		slices.SortFunc(es, func(a, b entry) int { return strings.Compare(fmt.Sprint(a.attrs), fmt.Sprint(b.attrs)) })
		for _, e := range es[:min(len(es), v1alpha1.MaxBGPRoutes-len(out))] {
			ar := v1alpha1.AdvertisedRoute{Prefix: pfx.String(), Peers: e.peers, LocalPref: e.attrs.LocalPref,
				Communities: capCommunities(e.attrs.CommunityStrings())}
			if e.attrs.NextHop.IsValid() {
				ar.NextHop = e.attrs.NextHop.String()
			}
			out = append(out, ar)
		}
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
