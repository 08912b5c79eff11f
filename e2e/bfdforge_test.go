package e2e

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/speaker/bfd"
)

// sendSpoofed sends each packet from namespace ns to to's BFD port with from as the source
// address, as a host on the LAN that impersonates the router can (sendSpoofedUDP).
func sendSpoofed(ns string, from, to netip.Addr, packets ...[]byte) error {
	return sendSpoofedUDP(ns, netip.AddrPortFrom(from, 49999), netip.AddrPortFrom(to, bfd.Port), packets...)
}

// forgedPackets are what a host on the LAN that guessed neither discriminator can send to take
// a session down: a Down and an AdminDown with Your Discriminator 0 (which RFC 5880 lets a
// real peer send), an AdminDown naming a guessed discriminator, and an Up with Your
// Discriminator 0 (which it forbids).
func forgedPackets() [][]byte {
	my, your := rand.Uint32()|1, rand.Uint32()|1
	p := bfd.Packet{DetectMult: 3, MyDiscriminator: my, DesiredMinTx: time.Second, RequiredMinRx: time.Second}
	down, adminDown, guessed, up := p, p, p, p
	down.State, down.Diag = bfd.Down, bfd.DiagNeighborDown
	adminDown.State, adminDown.Diag = bfd.AdminDown, bfd.DiagAdminDown
	guessed.State, guessed.Diag, guessed.YourDiscriminator = bfd.AdminDown, bfd.DiagAdminDown, your
	up.State = bfd.Up
	return [][]byte{down.Marshal(), adminDown.Marshal(), guessed.Marshal(), up.Marshal()}
}

// bfdCounters are one speaker's BFD state changes with a peer, packets dropped (any reason)
// and whether the session is Up, from its metrics.
type bfdCounters struct{ changes, dropped, up float64 }

func (e *l2Env) bfdCounters(t testing.TB, node, peer string) bfdCounters {
	m, err := scrapeMetrics(context.Background(), e.node(node).IPv4.Addr().String()+":7474")
	if err != nil {
		t.Fatal(err)
	}
	return bfdCounters{changes: sum(m, "portico_bfd_state_changes_total", map[string]string{"peer": peer}),
		dropped: sum(m, "portico_bfd_packets_dropped_total", nil),
		up:      sum(m, "portico_bfd_session_up", map[string]string{"peer": peer})}
}

// expectForgeriesIgnored sends rounds of forged packets to node from the client namespace,
// spoofing the router's address, and fails unless the node dropped every one and its session
// with peer neither left Up nor changed state, bird's session stayed Up and route is still
// routed via every node in all.
func (e *l2Env) expectForgeriesIgnored(t testing.TB, b *netlab.Router, node, peer string, rounds int, route netip.Prefix, all []string, forge func() [][]byte) {
	t.Helper()
	router, target := e.Routers[0].IPv4.Addr(), e.node(node).IPv4.Addr()
	before := e.bfdCounters(t, node, peer)
	sent := 0
	for range rounds {
		packets := forge()
		must(t, sendSpoofed(e.Client.NS, router, target, packets...))
		sent += len(packets)
	}
	// The dropped counter is the synchronisation: once it has counted every forged packet, the
	// speaker has decided on all of them.
	var now bfdCounters
	waitFor(t, "the forged packets dropped or acted on", 10*time.Second, func() bool {
		now = e.bfdCounters(t, node, peer)
		return now.dropped >= before.dropped+float64(sent) || now.changes != before.changes
	})
	if now.changes != before.changes || now.up != 1 {
		t.Fatalf("%s's BFD session changed state after %d forged packets: %v state changes (was %v), up=%v",
			node, sent, now.changes, before.changes, now.up)
	}
	if !bfdUp(t, b, target) {
		t.Fatalf("bird's BFD session with %s is not Up after the forged packets", node)
	}
	if got, want := gateways(t, e.Routers[0].NS, route), e.nodeIPs(false, all...); !slices.Equal(got, want) {
		t.Fatalf("after the forged packets %s is routed via %v, want %v", route, got, want)
	}
	t.Logf("%d forged packets to %s: all %v dropped, no state change", sent, node, now.dropped-before.dropped)
}

// TestBFDForgedPackets: a host on the LAN sends node-a BFD packets that claim to come from the
// router (its address, TTL 255, so GTSM passes them) without knowing either discriminator: a
// Down and an AdminDown with Your Discriminator 0, an AdminDown with a guessed one, an Up with
// Your Discriminator 0. node-a drops them all: its session stays Up, bird's too, and the
// Service's route keeps node-a as a next hop. (Before RFC 5880's selection rules were applied
// in full, the Down with Your Discriminator 0 took node-a's session down.)
func TestBFDForgedPackets(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		all := []string{"node-a", "node-b", "node-c"}
		b := e.birdWithBFD(all, calmBFDMillis)
		route := e.advertiseBFDService(e.Routers[0].NS, all)
		waitFor(t, "BFD Up on both sides of node-a's session", 15*time.Second, func() bool {
			return bfdUp(t, b, e.node("node-a").IPv4.Addr()) && e.bfdCounters(t, "node-a", "tor").up == 1
		})
		e.expectForgeriesIgnored(t, b, "node-a", "tor", 5, route, all, forgedPackets)

		// The binding to the router's discriminator must not get in the way of a real restart:
		// bird makes a new BFD session (a new discriminator) for each new BGP session. node-a
		// takes the new one back without BFD resetting its BGP session.
		before := e.bfdCounters(t, "node-a", "tor").changes
		_, err := b.Birdc("restart", "node_a")
		must(t, err)
		waitFor(t, "node-a's BFD session through Down and Up again", 30*time.Second, func() bool {
			c := e.bfdCounters(t, "node-a", "tor")
			return c.changes >= before+2 && c.up == 1 && bfdUp(t, b, e.node("node-a").IPv4.Addr())
		})
		e.waitEstablished("tor", 30*time.Second, "node-a")
		e.expectRoute(e.Routers[0].NS, route, e.nodeIPs(false, all...), 30*time.Second)
		log := e.speakerLog("node-a")
		if strings.Contains(log, "BFD session down: resetting the BGP session") {
			t.Fatal("node-a's BFD reset its BGP session when bird restarted its BFD session")
		}
		for line := range strings.Lines(log) {
			if strings.Contains(line, `"msg":"BFD session state"`) {
				t.Logf("node-a: %s", line)
			}
		}
	})
}

// calmBFDMillis is the BFD interval of the tests that count state changes while forged packets
// arrive (detection 1.5 s, negotiated with bird's 100 ms): they judge what a packet changes, not
// how fast a failure is found, and a machine busy with the rest of make test can stall a
// process past 500 ms.
const calmBFDMillis = 300
