package speaker

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/portico-lb/portico/speaker/bgp"
	"github.com/portico-lb/portico/speaker/plan"
)

// TestProbes: not ready until the main loop runs, alive while starting and while the loop
// turns, not alive once it has stalled.
func TestProbes(t *testing.T) {
	var s Speaker
	if err := s.Ready(nil); err == nil {
		t.Error("ready before the main loop started")
	}
	if err := s.Alive(nil); err != nil {
		t.Errorf("not alive while starting: %v", err)
	}
	s.turned()
	if err := s.Ready(nil); err != nil {
		t.Errorf("not ready with the main loop running: %v", err)
	}
	if err := s.Alive(nil); err != nil {
		t.Errorf("not alive with the main loop turning: %v", err)
	}
	s.health.loopAt.Store(time.Now().Add(-LoopStall - time.Second).UnixNano())
	if err := s.Alive(nil); err == nil {
		t.Errorf("alive with the main loop stalled for over %s", LoopStall)
	}
}

// TestRoutesUp: readiness waits for a session that carries this node's routes while it is not
// established (a real GoBGP session to a loopback port nobody listens on), does not wait for a
// session that carries none, and stops waiting once RoutesUpWait has passed since the start.
func TestRoutesUp(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	peer := func(name string) plan.Peer {
		return plan.Peer{Name: name, Address: lo, Port: 1, MyASN: 64513, PeerASN: 64512, RouterID: lo,
			HoldTime: 90 * time.Second, KeepaliveTime: 30 * time.Second, ConnectTime: time.Second}
	}
	sessions := &bgp.Sessions{Log: logr.Discard()}
	defer sessions.Close()
	s := New(Options{BGP: sessions, RoutesUpWait: time.Hour})
	s.health.startedAt = time.Now()
	if err := s.RoutesUp(nil); err == nil {
		t.Error("ready before the first plan")
	}
	s.health.planned.Store(true)
	pfx := netip.MustParsePrefix("203.0.113.10/32")
	if errs := sessions.Apply(context.Background(), plan.BGP{Peers: map[string]plan.Peer{"idle": peer("idle")}}); len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := s.RoutesUp(nil); err != nil {
		t.Errorf("not ready for a session that carries no route: %v", err)
	}
	if errs := sessions.Apply(context.Background(), plan.BGP{Peers: map[string]plan.Peer{"idle": peer("idle"), "tor": peer("tor")},
		Routes: map[string]map[netip.Prefix]plan.Route{"tor": {pfx: {Prefix: pfx}}}}); len(errs) > 0 {
		t.Fatal(errs)
	}
	err := s.RoutesUp(nil)
	if err == nil || !strings.Contains(err.Error(), "tor at 127.0.0.1") || strings.Contains(err.Error(), "idle") {
		t.Errorf("with tor down and carrying a route: %v, want it named alone", err)
	}
	s.health.startedAt = time.Now().Add(-time.Hour)
	if err := s.RoutesUp(nil); err != nil {
		t.Errorf("still waiting after RoutesUpWait: %v", err)
	}
}
