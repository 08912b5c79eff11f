package bgp

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	api "github.com/osrg/gobgp/v4/api"

	"github.com/portico-lb/portico/speaker/plan"
)

// TestSessionRIBHoldsUnicastOnly: a session's GoBGP server keeps RIB tables for IPv4 and IPv6
// unicast, the families the speaker advertises, and for no other family: GoBGP's tables cost
// memory per family and per session whether a route is in them or not. The session's router is
// a loopback port nobody listens on; only the server's own tables are read.
func TestSessionRIBHoldsUnicastOnly(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	p := plan.Peer{Name: "tor", Address: lo, Port: 1, MyASN: 64513, PeerASN: 64512, RouterID: lo,
		HoldTime: 90 * time.Second, KeepaliveTime: 30 * time.Second, ConnectTime: time.Second}
	routes := map[netip.Prefix]plan.Route{}
	for _, pfx := range []string{"203.0.113.10/32", "2001:db8:ff::10/128"} {
		routes[netip.MustParsePrefix(pfx)] = plan.Route{Prefix: netip.MustParsePrefix(pfx)}
	}
	s := &Sessions{Log: logr.Discard()}
	if errs := s.Apply(context.Background(), plan.BGP{Peers: map[string]plan.Peer{"tor": p}, Routes: map[string]map[netip.Prefix]plan.Route{"tor": routes}}); len(errs) > 0 {
		t.Fatal(errs)
	}
	defer s.Close()
	s.mu.Lock()
	srv := s.running["tor"].srv
	s.mu.Unlock()
	for _, fam := range []bgp.Family{bgp.RF_IPv4_UC, bgp.RF_IPv6_UC} {
		n := 0
		if err := srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: fam},
			func(bgp.NLRI, []*apiutil.Path) { n++ }); err != nil || n != 1 {
			t.Errorf("%s: %d routes in the global RIB (%v), want the one advertised", fam, n, err)
		}
	}
	for _, fam := range []bgp.Family{bgp.RF_IPv4_VPN, bgp.RF_EVPN, bgp.RF_FS_IPv4_UC, bgp.RF_IPv4_MPLS} {
		if err := srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: fam},
			func(bgp.NLRI, []*apiutil.Path) {}); err == nil {
			t.Errorf("%s: the global RIB has a table for it", fam)
		}
	}
}
