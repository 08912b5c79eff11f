package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/speaker/bfd"
)

// TestBFDReplayedPackets: bird2 and the speakers run BFD with Keyed SHA1 (the key from a
// Secret), and the BFD packets bird sends node-a are recorded from the start. Then bird stops
// (the router is gone) and node-a's session goes Down. A host waits until node-a has forgotten
// bird's sequence number (twice its detection time, RFC 5880 §6.8.1) and sends bird's recorded
// packets to node-a from the router's address, in order, once a second for three seconds. Each
// round reaches node-a (its received count says so) and changes nothing: no state change, the
// session stays Down. (Before, the first round took node-a's session to Init and then Up, with
// no router there.) bird started again brings the session Up.
func TestBFDReplayedPackets(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		router, target := e.Routers[0], e.node("node-a").IPv4.Addr()
		rec := recordPackets(t, e.node("node-a").NS, udpTo(router.IPv4.Addr(), bfd.Port))
		const key = "0123456789abcdefghij"
		b := startBird(t, router.NS, birdBFDAuthConfig(router.IPv4.Addr(), e.Nodes, "keyed sha1", key))
		e.createBFDAuthProfile("signed", v1alpha1.BFDKeyedSHA1, key)
		peer := bgpPeer("tor", router.IPv4.Addr(), clusterASN, routerASN)
		peer.Spec.BFDProfile = "signed"
		e.createObject(peer)
		e.waitEstablished("tor", 30*time.Second, "node-a")
		waitFor(t, "node-a's authenticated BFD session Up on both sides", 15*time.Second, func() bool {
			return bfdUp(t, b, target) && e.bfdCounters(t, "node-a", "tor").up == 1
		})

		b.Stop()
		waitFor(t, "node-a's session Down once bird is gone", 15*time.Second, func() bool {
			return e.bfdCounters(t, "node-a", "tor").up == 0
		})
		rec.stop()
		recorded := rec.packets()
		if len(recorded) < 5 {
			t.Fatalf("recorded %d of bird's BFD packets to node-a", len(recorded))
		}
		payloads := make([][]byte, len(recorded))
		for i, r := range recorded {
			payloads[i] = r.payload
		}
		// The host waits until node-a has forgotten bird's sequence number: twice node-a's
		// detection time after bird's last packet, bird's multiplier (5) times node-a's receive
		// interval once the session is Down. (A replay before then within Keyed SHA1's window
		// is accepted, and keeps the sequence number known: auth-keyed.)
		last := recorded[len(recorded)-1].at
		forgotten := last.Add(2*5*calmBFDMillis*time.Millisecond + 500*time.Millisecond)
		<-time.After(time.Until(forgotten)) // the attack's timing, not a wait for the system
		before := e.bfdCounters(t, "node-a", "tor")
		pace := time.NewTicker(time.Second) // the replay's pace: the stimulus, not a wait for anything
		defer pace.Stop()
		rounds := 0
		for ; time.Now().Before(forgotten.Add(3 * time.Second)); <-pace.C {
			rounds++
			e.replayInOrder(t, router, target, payloads)
			if now := e.bfdCounters(t, "node-a", "tor"); now.changes != before.changes || now.up != 0 {
				t.Fatalf("round %d of %d replayed packets (%v after bird's last one) changed node-a's session: %v state changes (was %v), up=%v",
					rounds, len(payloads), time.Since(last).Round(time.Millisecond), now.changes, before.changes, now.up)
			}
		}
		t.Logf("%d rounds of %d recorded packets replayed to node-a, the last %v after bird's last packet: no state change",
			rounds, len(payloads), time.Since(last).Round(time.Millisecond))

		b.Start()
		waitFor(t, "node-a's session Up again with bird back", 30*time.Second, func() bool {
			return bfdUp(t, b, target) && e.bfdCounters(t, "node-a", "tor").up == 1
		})
	})
}

// replayInOrder sends the recorded payloads to node-a from the router's address, one at a time,
// each once node-a's session has taken the one before: a burst would overrun the session's
// receive queue (16 packets) whenever its goroutine is slow to run, and an overrun packet never
// reaches the session, so it would test nothing. (Seen under load: a 10 s wait for a whole
// burst to be counted timed out.)
func (e *l2Env) replayInOrder(t *testing.T, router netlab.Host, target netip.Addr, payloads [][]byte) {
	t.Helper()
	for i, p := range payloads {
		received := e.bfdReceived(t, "node-a", "tor")
		must(t, sendSpoofed(router.NS, router.IPv4.Addr(), target, p))
		waitFor(t, fmt.Sprintf("node-a's session took replayed packet %d of %d", i+1, len(payloads)), 10*time.Second, func() bool {
			return e.bfdReceived(t, "node-a", "tor") > received
		})
	}
}

// bfdReceived is the count of BFD packets node's speaker received from peer.
func (e *l2Env) bfdReceived(t testing.TB, node, peer string) float64 {
	m, err := scrapeMetrics(context.Background(), e.node(node).IPv4.Addr().String()+":7474")
	if err != nil {
		t.Fatal(err)
	}
	return sum(m, "portico_bfd_packets_received_total", map[string]string{"peer": peer})
}
