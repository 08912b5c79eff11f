package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
)

// TestL2StickyPlacement: an address stays with the node that took it over. Its owner's speaker
// restarted (SIGTERM, then started again, as a rolling update does) takes nothing back, so the
// restart moves the address once. And a cluster left imbalanced (every address on one node)
// is balanced one address at a time, each move waiting for the settle window after the last
// (--l2-balance-settle 2s here).
func TestL2StickyPlacement(t *testing.T) {
	inLab(t, func(t *testing.T, e *l2Env) {
		t.Run("a restarted owner takes nothing back", func(t *testing.T) {
			e.t = t
			ip := netip.MustParseAddr("198.51.100.220")
			e.create(scenario{name: "sticky", ip: ip})
			owner, next := ownerAndNext(ip)
			e.expectOwner(ip, owner)
			e.kill(owner, syscall.SIGTERM)
			// Its last status write lists no L2 address: no stale claim is left behind.
			if held := e.l2Listed(owner); len(held) > 0 {
				t.Errorf("%s stopped with SIGTERM still lists %v in its Speaker status", owner, held)
			}
			waitFor(t, "client's entry for "+ip.String()+" moves to "+next, 20*time.Second, func() bool {
				return netlab.Neighbour(e.Client.NS, ip) == e.macOf(next) && slices.Contains(e.announcers(ip), next)
			})
			e.restartAndJoin(owner)
			// The restarted speaker has joined every other and plans at once: for three
			// seconds after, the address stays where it is, answered by next alone.
			e.holds(ip, next, 3*time.Second)
		})

		t.Run("an imbalanced cluster is balanced one address at a time", func(t *testing.T) {
			e.t = t
			e.restartSpeakers([]string{"--l2-balance-settle", "2s"})
			// Six addresses whose hash's choices are two on each node, all taken by node-a
			// while the other speakers are stopped.
			ips := twoPerNode(netip.MustParseAddr("198.51.100.230"), []string{"node-a", "node-b", "node-c"})
			e.kill("node-b", syscall.SIGTERM)
			e.kill("node-c", syscall.SIGTERM)
			for i, ip := range ips {
				e.create(scenario{name: fmt.Sprintf("bal-%d", i), ip: ip})
			}
			for _, ip := range ips {
				e.expectOwner(ip, "node-a")
			}
			e.restartAndJoin("node-b")
			e.restartAndJoin("node-c")
			moves := e.watchBalance(ips, 60*time.Second)
			t.Logf("balance moves, one at a time: %s", strings.Join(moves, "; "))
			if len(moves) != 4 {
				t.Errorf("%d moves, want 4 (node-a from 6 addresses to 2)", len(moves))
			}
			for _, ip := range ips {
				e.settle(ip, hashOwner(ip, "node-a", "node-b", "node-c"))
			}
		})
	})
}

// l2Listed are the addresses node's Speaker status lists over L2.
func (e *l2Env) l2Listed(node string) []string {
	var sp v1alpha1.Speaker
	must(e.t, e.c.Get(context.Background(), clientKey(node), &sp))
	var out []string
	for _, a := range sp.Status.Announcements {
		if a.Protocol == v1alpha1.ProtocolL2 {
			out = append(out, a.IP)
		}
	}
	return out
}

// restartAndJoin starts node's speaker and waits until it and every other running speaker have
// seen each other join: the restarted one plans right after its join.
func (e *l2Env) restartAndJoin(node string) {
	e.t.Helper()
	logged := e.logOffsets()
	e.startSpeaker(node)
	e.waitJoined(node, logged)
}

// logOffsets are the lengths of every node's speaker log now.
func (e *l2Env) logOffsets() map[string]int {
	logged := map[string]int{}
	for _, n := range e.Nodes {
		logged[n.Name] = len(e.speakerLog(n.Name))
	}
	return logged
}

// waitJoined waits until node's speaker, started since logged (logOffsets), and every other
// running speaker have seen each other join.
func (e *l2Env) waitJoined(node string, logged map[string]int) {
	e.t.Helper()
	var others []string
	for name := range e.speakers {
		if name != node {
			others = append(others, name)
		}
	}
	sawJoin := func(log, member string) bool {
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, `"membership changed"`) && strings.Contains(line, fmt.Sprintf(`"member":%q`, member)) && strings.Contains(line, `"alive":true`) {
				return true
			}
		}
		return false
	}
	waitFor(e.t, node+" and every other speaker see each other join", 20*time.Second, func() bool {
		for _, name := range others {
			if !sawJoin(e.speakerLog(name)[logged[name]:], node) || !sawJoin(e.speakerLog(node)[logged[node]:], name) {
				return false
			}
		}
		return true
	})
}

// holds checks, for the given time, that owner alone answers ARP for ip (asked from the client)
// and reports it in its Speaker status.
func (e *l2Env) holds(ip netip.Addr, owner string, d time.Duration) {
	e.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		if macs := e.arpingMACs(ip, 1); !slices.Equal(macs, []string{e.macOf(owner)}) {
			var who []string
			for _, m := range macs {
				who = append(who, e.nodeByMAC(m))
			}
			e.t.Fatalf("ARP answers for %v came from %v, want %s alone: it moved back", ip, who, owner)
		}
		if got := e.announcers(ip); !slices.Equal(got, []string{owner}) {
			e.t.Fatalf("%v is reported by %v, want %s alone", ip, got, owner)
		}
	}
}

// twoPerNode are the first addresses from first on whose hash's choice among nodes is two for
// each node.
func twoPerNode(first netip.Addr, nodes []string) []netip.Addr {
	var out []netip.Addr
	count := map[string]int{}
	for ip := first; len(out) < 2*len(nodes); ip = ip.Next() {
		if h := hashOwner(ip, nodes...); count[h] < 2 {
			count[h]++
			out = append(out, ip)
		}
	}
	return out
}

// watchBalance polls the Speakers until each address is reported by its hash's choice alone,
// and fails when two addresses leave node-a between two polls (100 ms apart; the settle window
// is 2 s) or an address goes anywhere but its hash's choice. It returns the moves seen.
func (e *l2Env) watchBalance(ips []netip.Addr, within time.Duration) []string {
	e.t.Helper()
	all := []string{"node-a", "node-b", "node-c"}
	left := map[netip.Addr]bool{} // addresses no longer reported by node-a alone
	var moves []string
	waitFor(e.t, "every address on its hash's choice", within, func() bool {
		now := map[netip.Addr][]string{}
		for _, ip := range ips {
			now[ip] = e.announcers(ip)
		}
		var leaving []string
		done := true
		for _, ip := range slices.SortedFunc(maps.Keys(now), netip.Addr.Compare) {
			home := hashOwner(ip, all...)
			done = done && slices.Equal(now[ip], []string{home})
			if left[ip] || slices.Equal(now[ip], []string{"node-a"}) {
				continue
			}
			if slices.ContainsFunc(now[ip], func(n string) bool { return n != "node-a" && n != home }) {
				e.t.Fatalf("%v reported by %v: it may only move from node-a to its hash's choice %s", ip, now[ip], home)
			}
			left[ip] = true
			leaving = append(leaving, fmt.Sprintf("%v node-a -> %s", ip, home))
		}
		if len(leaving) > 1 {
			e.t.Fatalf("two addresses left node-a at once: %v", leaving)
		}
		moves = append(moves, leaving...)
		return done
	})
	return moves
}
