package netlab

import (
	"net/netip"
	"slices"
	"testing"
)

// TestGateways: a route's next hops, none for a missing route, and an error (never "no route")
// when ip itself fails, so a test waiting for a route to vanish cannot pass because ip could
// not look.
func TestGateways(t *testing.T) {
	Require(t)
	l := New(t)
	h := l.AddHost("gw", "02:00:00:00:00:31", "198.51.100.31/24", "2001:db8::31/64")
	l.MustRun("ip", "-n", h.NS, "route", "add", "203.0.113.7/32", "via", "198.51.100.1")
	gw, err := Gateways(h.NS, netip.MustParsePrefix("203.0.113.7/32"))
	if err != nil || !slices.Equal(gw, []netip.Addr{netip.MustParseAddr("198.51.100.1")}) {
		t.Fatalf("route via 198.51.100.1: got %v, %v", gw, err)
	}
	if gw, err := Gateways(h.NS, netip.MustParsePrefix("203.0.113.8/32")); err != nil || len(gw) != 0 {
		t.Fatalf("no route: got %v, %v", gw, err)
	}
	if gw, err := Gateways(h.NS+"-missing", netip.MustParsePrefix("203.0.113.7/32")); err == nil {
		t.Fatalf("a namespace that does not exist gave next hops %v and no error", gw)
	}
}
