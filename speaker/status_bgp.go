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

// bgpStatus is the Speaker status's view of the BGP side: each peer's AS numbers and address
// as resolved here (learned ones from the running sessions), and the routes with the
// attributes the routers get, one entry per prefix and attributes naming all its peers, capped
// at MaxBGPRoutes. Nil when this node holds no session.
func bgpStatus(d bgp.Desired, states map[string]bgp.State) *v1alpha1.SpeakerBGP {
	if len(d.Peers) == 0 {
		return nil
	}
	out := &v1alpha1.SpeakerBGP{}
	type key struct {
		prefix netip.Prefix
		attrs  string
	}
	routes := map[key]*v1alpha1.AdvertisedRoute{}
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
		for pfx, r := range d.Routes[name] {
			k := key{pfx, fmt.Sprint(r.Attrs)}
			if ar := routes[k]; ar != nil {
				ar.Peers = append(ar.Peers, name) // names come sorted
				continue
			}
			ar := &v1alpha1.AdvertisedRoute{Prefix: pfx.String(), Peers: []string{name}, LocalPref: r.Attrs.LocalPref,
				Communities: capCommunities(r.Attrs.CommunityStrings())}
			if r.Attrs.NextHop.IsValid() {
				ar.NextHop = r.Attrs.NextHop.String()
			}
			routes[k] = ar
		}
	}
	keys := slices.SortedFunc(maps.Keys(routes), func(a, b key) int {
		if c := a.prefix.Addr().Compare(b.prefix.Addr()); c != 0 {
			return c
		}
		return cmp.Or(a.prefix.Bits()-b.prefix.Bits(), strings.Compare(a.attrs, b.attrs))
	})
	for i, k := range keys {
		if i == v1alpha1.MaxBGPRoutes {
			out.OmittedRoutes = int32(len(keys) - i)
			break
		}
		out.Routes = append(out.Routes, *routes[k])
	}
	return out
}

func capCommunities(cs []string) []string {
	if len(cs) <= v1alpha1.MaxRouteCommunities {
		return cs
	}
	keep := v1alpha1.MaxRouteCommunities - 1
	return append(cs[:keep], fmt.Sprintf("+%d more", len(cs)-keep))
}
