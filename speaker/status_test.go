package speaker

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/bgp"
)

// TestRoutesWaitForTheRefresh: a report that changes only status.bgp's routes is held until
// routesRefresh after the last write (so one Service change does not rewrite every advertising
// node's Speaker at once); any other change is written at once.
func TestRoutesWaitForTheRefresh(t *testing.T) {
	route := func(prefix string) statusReport {
		return statusReport{status: v1alpha1.SpeakerStatus{BGP: &v1alpha1.SpeakerBGP{
			Routes: []v1alpha1.AdvertisedRoute{{Prefix: prefix}}}}}
	}
	written := route("203.0.113.1/32")
	at := time.Unix(1_800_000_000, 0)
	if got := routesHold(nil, time.Time{}, written, at); got != 0 {
		t.Errorf("first report held %v", got)
	}
	moreRoutes := route("203.0.113.2/32")
	if got := routesHold(&written, at, moreRoutes, at.Add(3*time.Second)); got != routesRefresh-3*time.Second {
		t.Errorf("a routes-only change 3 s after a write held %v, want %v", got, routesRefresh-3*time.Second)
	}
	if got := routesHold(&written, at, moreRoutes, at.Add(routesRefresh)); got != 0 {
		t.Errorf("a routes-only change %v after a write held %v", routesRefresh, got)
	}
	other := moreRoutes
	other.status.ConfigErrors = []string{"a problem"}
	if got := routesHold(&written, at, other, at.Add(time.Second)); got != 0 {
		t.Errorf("a change beyond the routes held %v", got)
	}
}

// TestRoutesListing: status.bgp.routes has one entry per prefix and attributes naming every
// peer that gets it, by prefix, within MaxBGPRoutes, the rest counted.
func TestRoutesListing(t *testing.T) {
	d := bgp.Desired{Peers: map[string]bgp.Peer{"a": {}, "b": {}}, Routes: map[string]map[netip.Prefix]bgp.Route{"a": {}, "b": {}}}
	ip := netip.MustParseAddr("198.51.100.0")
	for range 300 {
		pfx := netip.PrefixFrom(ip, 32)
		for _, peer := range []string{"a", "b"} {
			d.Routes[peer][pfx] = bgp.Route{Prefix: pfx}
		}
		ip = ip.Next()
	}
	first := netip.MustParsePrefix("198.51.100.0/32")
	d.Routes["b"][first] = bgp.Route{Prefix: first, Attrs: bgp.Attrs{LocalPref: 200}} // b gets other attributes
	routes, omitted := bgpRoutes(d)
	if len(routes) != v1alpha1.MaxBGPRoutes || omitted != 301-v1alpha1.MaxBGPRoutes {
		t.Fatalf("%d routes listed, %d omitted; want %d and %d", len(routes), omitted, v1alpha1.MaxBGPRoutes, 301-v1alpha1.MaxBGPRoutes)
	}
	if r := routes[0]; r.Prefix != "198.51.100.0/32" || !slices.Equal(r.Peers, []string{"a"}) || r.LocalPref != 0 {
		t.Errorf("first entry %+v, want 198.51.100.0/32 to a", r)
	}
	if r := routes[1]; r.Prefix != "198.51.100.0/32" || !slices.Equal(r.Peers, []string{"b"}) || r.LocalPref != 200 {
		t.Errorf("second entry %+v, want 198.51.100.0/32 to b with local-pref 200", r)
	}
	if r := routes[2]; r.Prefix != "198.51.100.1/32" || !slices.Equal(r.Peers, []string{"a", "b"}) {
		t.Errorf("third entry %+v, want 198.51.100.1/32 to a and b", r)
	}
}

// TestAListChangeIsWritten: a report whose announcements changed since the last write is
// written at once, also when the written list was empty and the new one is not made yet (the
// writer makes it); a report of the same list is not written again.
func TestAListChangeIsWritten(t *testing.T) {
	var v statusView
	plan := Plan{Mine: map[netip.Addr]Claim{}, Routed: map[netip.Addr]BGPClaim{}}
	v.update(plan, nil, nil, nil)
	written := v.report(plan, nil)
	written.status.Announcements, written.listed = v.list()
	ip := netip.MustParseAddr("203.0.113.10")
	plan.Routed[ip] = BGPClaim{Services: []string{"default/web"}, Peers: []string{"tor"}, Teller: true}
	v.update(plan, nil, nil, []netip.Addr{ip})
	r := v.report(plan, nil)
	at := time.Unix(1_800_000_000, 0)
	if sameStatus(written, r) || routesHold(&written, at, r, at) != 0 {
		t.Fatalf("a new announcement is not written at once (same %v, held %v)", sameStatus(written, r), routesHold(&written, at, r, at))
	}
	// The same address again without a change is no news.
	r.status.Announcements, r.listed = v.list()
	v.update(plan, nil, nil, []netip.Addr{ip})
	if again := v.report(plan, nil); !sameStatus(r, again) {
		t.Errorf("an unchanged list is written again")
	}
}
