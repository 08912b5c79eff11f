package status

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/plan"
)

// TestRoutesListing: status.bgp.routes lists the routes to the peers this node is the first to
// send them to (FirstTo), one entry per prefix and attributes naming those peers, by prefix,
// within MaxBGPRoutes, the rest counted.
func TestRoutesListing(t *testing.T) {
	p := plan.Plan{Routed: map[netip.Addr]plan.BGPClaim{},
		BGP: plan.BGP{Peers: map[string]plan.Peer{"a": {}, "b": {}}, Routes: map[string]map[netip.Prefix]plan.Route{"a": {}, "b": {}}}}
	ip := netip.MustParseAddr("198.51.100.0")
	for range 300 {
		pfx := netip.PrefixFrom(ip, 32)
		for _, peer := range []string{"a", "b"} {
			p.BGP.Routes[peer][pfx] = plan.Route{Prefix: pfx}
		}
		p.Routed[ip] = plan.BGPClaim{Peers: []string{"a", "b"}, FirstTo: []string{"a", "b"}, Teller: true}
		ip = ip.Next()
	}
	first := netip.MustParsePrefix("198.51.100.0/32")
	p.BGP.Routes["b"][first] = plan.Route{Prefix: first, Attrs: plan.Attrs{LocalPref: 200}} // b gets other attributes
	// An earlier node sends 198.51.100.2 to a: this one lists its route to b only.
	p.Routed[netip.MustParseAddr("198.51.100.2")] = plan.BGPClaim{Peers: []string{"a", "b"}, FirstTo: []string{"b"}}
	// And it sends 198.51.100.3 to both: not listed here.
	p.Routed[netip.MustParseAddr("198.51.100.3")] = plan.BGPClaim{Peers: []string{"a", "b"}}
	v := View{}
	v.Update(p, nil, nil, sortedAddrs(p.Routed), nil, true, time.Time{})
	st := v1alpha1.SpeakerStatus{BGP: &v1alpha1.SpeakerBGP{}}
	v.Fill(&st)
	routes, omitted := st.BGP.Routes, st.BGP.OmittedRoutes
	if len(routes) != v1alpha1.MaxBGPRoutes || omitted != 300-v1alpha1.MaxBGPRoutes {
		t.Fatalf("%d routes listed, %d omitted; want %d and %d", len(routes), omitted, v1alpha1.MaxBGPRoutes, 300-v1alpha1.MaxBGPRoutes)
	}
	for i, want := range []struct {
		prefix    string
		peers     []string
		localPref uint32
	}{
		{"198.51.100.0/32", []string{"a"}, 0},
		{"198.51.100.0/32", []string{"b"}, 200},
		{"198.51.100.1/32", []string{"a", "b"}, 0},
		{"198.51.100.2/32", []string{"b"}, 0},
		{"198.51.100.4/32", []string{"a", "b"}, 0},
	} {
		if r := routes[i]; r.Prefix != want.prefix || !slices.Equal(r.Peers, want.peers) || r.LocalPref != want.localPref {
			t.Errorf("entry %d: %+v, want %s to %v with local-pref %d", i, r, want.prefix, want.peers, want.localPref)
		}
	}
}

// TestAListChangeIsWritten: a report whose announcements changed since the last write is
// written at once, also when the written list was empty and the new one is not made yet (the
// writer makes it); a report of the same list is not written again.
func TestAListChangeIsWritten(t *testing.T) {
	var v View
	p := plan.Plan{Mine: map[netip.Addr]plan.Claim{}, Routed: map[netip.Addr]plan.BGPClaim{}}
	v.Update(p, nil, nil, nil, nil, false, time.Time{})
	written := v.Report(p, nil)
	written.Listed = v.Fill(&written.Status)
	ip := netip.MustParseAddr("203.0.113.10")
	p.Routed[ip] = plan.BGPClaim{Services: []string{"default/web"}, Peers: []string{"tor"}, Teller: true}
	v.Update(p, nil, nil, []netip.Addr{ip}, nil, false, time.Time{})
	r := v.Report(p, nil)
	if Same(written, r) {
		t.Fatalf("a new announcement is not written")
	}
	// The same address again without a change is no news.
	r.Listed = v.Fill(&r.Status)
	v.Update(p, nil, nil, []netip.Addr{ip}, nil, false, time.Time{})
	if again := v.Report(p, nil); !Same(r, again) {
		t.Errorf("an unchanged list is written again")
	}
}

// TestWritePause: a small status may be written twice a second; one listing 1000 addresses
// and 256 routes waits 1.756 s after its write, and no status waits more than 10 s.
func TestWritePause(t *testing.T) {
	if got := WritePause(v1alpha1.SpeakerStatus{}); got != WriteInterval {
		t.Errorf("an empty status waits %v, want %v", got, WriteInterval)
	}
	big := v1alpha1.SpeakerStatus{Announcements: make([]v1alpha1.Announcement, 1000),
		BGP: &v1alpha1.SpeakerBGP{Routes: make([]v1alpha1.AdvertisedRoute, v1alpha1.MaxBGPRoutes)}}
	if got, want := WritePause(big), 1756*time.Millisecond; got != want {
		t.Errorf("1000 announcements and 256 routes wait %v, want %v", got, want)
	}
	big.Announcements = make([]v1alpha1.Announcement, 20000)
	if got := WritePause(big); got != maxWriteInterval {
		t.Errorf("20 000 announcements wait %v, want the cap %v", got, maxWriteInterval)
	}
}

// TestSinceKeptWhileAnswering: an L2 address is listed since the node began answering for it;
// a change to its claim (a Service sharing it) keeps that time, and an address answered again
// after a gap gets a new one.
func TestSinceKeptWhileAnswering(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.200")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	since := func(v *View) []time.Time {
		var st v1alpha1.SpeakerStatus
		v.Fill(&st)
		var out []time.Time
		for _, a := range st.Announcements {
			if a.Since == nil {
				t.Fatalf("%s listed with no since", a.Service)
			}
			out = append(out, a.Since.Time)
		}
		return out
	}
	v := &View{}
	p := plan.Plan{Mine: map[netip.Addr]plan.Claim{ip: {Services: []string{"default/web"}}}}
	v.Update(p, nil, []netip.Addr{ip}, nil, nil, false, t0)
	p.Mine[ip] = plan.Claim{Services: []string{"default/ssh", "default/web"}}
	v.Update(p, nil, []netip.Addr{ip}, nil, nil, false, t0.Add(time.Minute))
	if got := since(v); !slices.Equal(got, []time.Time{t0, t0}) {
		t.Fatalf("since %v after the claim changed, want %v for both Services", got, t0)
	}
	delete(p.Mine, ip)
	v.Update(p, nil, []netip.Addr{ip}, nil, nil, false, t0.Add(2*time.Minute))
	p.Mine[ip] = plan.Claim{Services: []string{"default/web"}}
	v.Update(p, nil, []netip.Addr{ip}, nil, nil, false, t0.Add(3*time.Minute))
	if got := since(v); !slices.Equal(got, []time.Time{t0.Add(3 * time.Minute)}) {
		t.Fatalf("since %v after answering again, want %v", got, t0.Add(3*time.Minute))
	}
}
