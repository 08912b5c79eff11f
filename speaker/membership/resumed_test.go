package membership

import (
	"net/netip"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
)

// TestResumedAfterSilence: a member's heartbeat after a silence longer than two heartbeats (a
// healed partition, here made by moving back when a last heard from b) calls Config.Resumed
// with the member's gossip address, so the speaker can ask for its link-layer address at once.
func TestResumedAfterSilence(t *testing.T) {
	resumed := make(chan netip.Addr, 100)
	a, _ := startPair(t, func(cfg *Config) { cfg.Resumed = func(addr netip.Addr) { resumed <- addr } })
	for len(resumed) > 0 { // a silence while the two were joining, if any
		<-resumed
	}

	var got netip.Addr
	netlab.WaitFor(t, "Resumed for b", 5*time.Second, func() bool {
		select {
		case got = <-resumed:
			return true
		default:
		}
		// Again on every poll: a's watcher forgives every silence after a tick it missed itself
		// (a starved test process), which would hide this one.
		a.mu.Lock()
		a.members["b"].heard = time.Now().Add(-time.Second)
		a.mu.Unlock()
		return false
	})
	if want := netip.MustParseAddr("127.0.0.1"); got != want {
		t.Fatalf("Resumed(%s), want b's gossip address %s", got, want)
	}
}
