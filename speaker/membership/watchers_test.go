package membership

import (
	"strings"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
)

// startGroup starts members with these names (sorted), joined, each alive to all.
func startGroup(t *testing.T, names ...string) map[string]*Group {
	t.Helper()
	gs := map[string]*Group{}
	var first *Group
	for _, name := range names {
		g, err := Start(Config{Name: name, BindAddr: "127.0.0.1", Keys: Keys{Primary: []byte("0123456789abcdef")}, Detection: slowMemberlist})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Leave(100 * time.Millisecond) })
		if first == nil {
			first = g
		} else if err := g.Join([]string{HostPort("127.0.0.1", first.Port())}); err != nil {
			t.Fatal(err)
		}
		gs[name] = g
	}
	for _, g := range gs {
		waitAlive(t, g, names)
	}
	return gs
}

// heard reports whether g has heard a heartbeat from name.
func heard(g *Group, name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.members[name]
	return m != nil && !m.heard.IsZero()
}

// TestHeartbeatsGoToWatchersOnly: of four members, each sends its heartbeats to the two after
// it in name order, not to every other member.
func TestHeartbeatsGoToWatchersOnly(t *testing.T) {
	gs := startGroup(t, "a", "b", "c", "d")
	netlab.WaitFor(t, "b and c hear a's heartbeats", 5*time.Second, func() bool { return heard(gs["b"], "a") && heard(gs["c"], "a") })
	// Twenty heartbeats later, d has heard none from a: a sends to b and c.
	deadline := time.Now().Add(20 * slowMemberlist.Heartbeat)
	netlab.WaitFor(t, "twenty heartbeats", 5*time.Second, func() bool { return time.Now().After(deadline) })
	if heard(gs["d"], "a") {
		t.Fatal("d heard a's heartbeats; only a's watchers b and c should")
	}
}

// TestWatchersTellTheOthers: when a member's process dies, its watchers find it dead and tell
// the others, which count it dead at once while memberlist still lists it.
func TestWatchersTellTheOthers(t *testing.T) {
	gs := startGroup(t, "a", "b", "c", "d")
	netlab.WaitFor(t, "a and b hear d's heartbeats", 5*time.Second, func() bool { return heard(gs["a"], "d") && heard(gs["b"], "d") })
	d := gs["d"]
	d.leave.Do(func() { // d's process dies as under SIGKILL: no goodbye, no leave
		d.stopWatching()
		d.left = d.ml.Shutdown()
	})
	c := gs["c"]
	waitAlive(t, c, []string{"a", "b", "c"})
	if !listed(c, "d") {
		t.Fatal("memberlist already dropped d: the test did not isolate the fast path")
	}
	if ch := lastChange(t, c, "d"); ch.Joined || !strings.Contains(ch.How, "a watcher found it dead") {
		t.Fatalf("d's loss was told to c as %+v, want a watcher's notice", ch)
	}
}
