package membership

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/portico-lb/portico/internal/netlab"
)

// slowMemberlist leaves dead members to the fast path: memberlist would take seconds.
var slowMemberlist = Detection{ProbeInterval: 5 * time.Second, ProbeTimeout: time.Second, SuspicionMult: 4, Heartbeat: 50 * time.Millisecond}

// startPair starts members a and b, joined and hearing each other's heartbeats; adjust, when
// given, changes a's configuration first.
func startPair(t *testing.T, adjust ...func(*Config)) (a, b *Group) {
	t.Helper()
	for _, name := range []string{"a", "b"} {
		cfg := Config{Name: name, BindAddr: "127.0.0.1", Keys: Keys{Primary: []byte("0123456789abcdef")}, Detection: slowMemberlist}
		if name == "a" {
			for _, f := range adjust {
				f(&cfg)
			}
		}
		g, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Leave(100 * time.Millisecond) })
		if a == nil {
			a = g
		} else {
			b = g
		}
	}
	if err := b.Join([]string{HostPort("127.0.0.1", a.Port())}); err != nil {
		t.Fatal(err)
	}
	waitAlive(t, a, []string{"a", "b"})
	netlab.WaitFor(t, "a heartbeat from b", 5*time.Second, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return !a.members["b"].heard.IsZero()
	})
	return a, b
}

// lastChange is the last change queued for the member.
func lastChange(t *testing.T, g *Group, name string) Change {
	t.Helper()
	var last *Change
	for {
		select {
		case ch := <-g.Changes():
			if ch.Name == name {
				last = &ch
			}
		default:
			if last == nil {
				t.Fatalf("no change queued for %s", name)
			}
			return *last
		}
	}
}

func listed(g *Group, name string) bool {
	return slices.ContainsFunc(g.ml.Members(), func(n *memberlist.Node) bool { return n.Name == name })
}

// TestFastPathFindsAStoppedMember: a member whose gossip port is closed (its process gone, its
// kernel up) is found dead by the fast path while memberlist still counts it alive; a heartbeat
// from that life brings it back.
func TestFastPathFindsAStoppedMember(t *testing.T) {
	a, b := startPair(t)
	// b's process dies as under SIGKILL: no goodbye, no leave, its sockets closed.
	b.leave.Do(func() {
		b.stopWatching()
		b.left = b.ml.Shutdown()
	})
	waitAlive(t, a, []string{"a"})
	if !listed(a, "b") {
		t.Fatal("memberlist already dropped b: the test did not isolate the fast path")
	}
	if ch := lastChange(t, a, "b"); ch.Joined || !strings.Contains(ch.How, "refused a connection") {
		t.Fatalf("b's loss was told as %+v, want the refused connection", ch)
	}
	packet, err := b.seal.seal(heartbeatBody(1<<40, string(a.life), "b", b.life))
	must(t, err)
	a.heardDirect(packet, time.Now())
	if !a.IsAlive("b") {
		t.Fatal("a heartbeat from b's life did not bring it back")
	}
}

// TestFastPathSparesASilentMember: a member that stops sending heartbeats but whose process
// still holds its gossip port (starved, say) is checked again and again and stays alive.
func TestFastPathSparesASilentMember(t *testing.T) {
	a, b := startPair(t)
	b.stopWatching()
	netlab.WaitFor(t, "five checks of the silent member", 10*time.Second, func() bool { return a.checks.Load() >= 5 })
	if !a.IsAlive("b") {
		t.Fatal("a silent member with an open gossip port was declared dead")
	}
}

// TestHeartbeatsOutliveMemberlist: a member memberlist dropped (a partition it judged before it
// healed) stays alive while its heartbeats arrive, and heartbeats keep going to it; when they
// stop, it is gone.
func TestHeartbeatsOutliveMemberlist(t *testing.T) {
	a, b := startPair(t)
	dropped := time.Now()
	events{a}.NotifyLeave(&memberlist.Node{Name: "b"})
	events{b}.NotifyLeave(&memberlist.Node{Name: "a"})
	for _, g := range []*Group{a, b} {
		netlab.WaitFor(t, "heartbeats after memberlist dropped the other", 5*time.Second, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			for name, m := range g.members {
				if name != g.ml.LocalNode().Name && m.heard.After(dropped.Add(3*slowMemberlist.Heartbeat)) {
					return true
				}
			}
			return false
		})
	}
	if !a.IsAlive("b") || !b.IsAlive("a") {
		t.Fatal("a member whose heartbeats arrive was counted dead")
	}
	b.stopWatching()
	waitAlive(t, a, []string{"a"})
	if ch := lastChange(t, a, "b"); ch.Joined || !strings.Contains(ch.How, "heartbeats stopped") {
		t.Fatalf("b's loss was told as %+v, want its heartbeats stopping", ch)
	}
}

// TestCheckRefusesNoHeartbeatInFlight: a heartbeat that arrived at a's socket while a's check of
// b's kernel was under way, and that a reads only after the check found b alive, is taken, not
// refused as older than the check (the flood test under load lost one so).
func TestCheckRefusesNoHeartbeatInFlight(t *testing.T) {
	a, b := startPair(t)
	a.stopWatching() // a reads, sends and checks only as this test says
	b.stopWatching()
	a.mu.Lock()
	life, gossip := a.members["b"].life, a.members["b"].gossip
	a.mu.Unlock()
	seq := seqOf(a, "b")

	arrived := time.Now()
	a.check("b", life, gossip)
	if !a.IsAlive("b") {
		t.Fatal("b's kernel did not accept a's check")
	}
	packet, err := b.seal.seal(heartbeatBody(seq+1, string(a.life), "b", b.life))
	must(t, err)
	a.heardDirect(packet, arrived)
	if got, refused := seqOf(a, "b"), a.HeartbeatsRefused(); got != seq+1 {
		t.Fatalf("a did not take b's heartbeat that arrived during the check (refused: %v)", refused)
	}
}
