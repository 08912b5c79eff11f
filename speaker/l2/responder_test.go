package l2

import (
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/portico-lb/portico/internal/netlab"
)

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	netlab.WaitFor(t, what, within, cond)
}

func openIn(t *testing.T, ns string) *Announcer {
	t.Helper()
	var a *Announcer
	if err := netlab.In(ns, func() error { a = NewAnnouncer(logr.Discard(), nil); return nil }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// setIn calls Set on the namespace's thread: opening a responder's sockets happens there.
func setIn(t *testing.T, ns string, a *Announcer, want Want) map[netip.Addr][]string {
	t.Helper()
	var answered map[netip.Addr][]string
	var problems []error
	if err := netlab.In(ns, func() error { answered, problems = a.Set(want); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("problem: %v", p)
	}
	return answered
}

// TestResponderInNamespaces: two nodes and a client on one bridge. Only the owner answers,
// a takeover flips the client's existing entry through gratuitous ARP / unsolicited NA, and
// garbage frames do not stop the responder.
func TestResponderInNamespaces(t *testing.T) {
	netlab.Require(t)
	lab := netlab.New(t)
	client := lab.AddHost("client", "02:00:00:00:00:01", "198.51.100.1/24", "2001:db8:1::1/64")
	nodeA := lab.AddHost("a", "02:00:00:00:00:0a", "198.51.100.11/24", "2001:db8:1::11/64")
	nodeB := lab.AddHost("b", "02:00:00:00:00:0b", "198.51.100.12/24", "2001:db8:1::12/64")
	a, b := openIn(t, nodeA.NS), openIn(t, nodeB.NS)

	for _, vip := range []netip.Addr{vip4, vip6} {
		t.Run(vip.String(), func(t *testing.T) {
			got := setIn(t, nodeA.NS, a, Want{vip: {"eth0"}})
			if len(got[vip]) != 1 || got[vip][0] != "eth0" {
				t.Fatalf("answered on %v, want [eth0]", got[vip])
			}
			setIn(t, nodeB.NS, b, Want{})
			waitFor(t, "client resolves the VIP to node A", 5*time.Second, func() bool {
				return netlab.Resolve(client.NS, vip) == nodeA.MAC.String()
			})

			// Takeover: A forgets, B claims. The client's existing entry must move to B by B's
			// announcement alone (no resolution from the client).
			setIn(t, nodeA.NS, a, Want{})
			setIn(t, nodeB.NS, b, Want{vip: {"eth0"}})
			waitFor(t, "client's entry moves to node B", 2*time.Second, func() bool {
				return netlab.Neighbour(client.NS, vip) == nodeB.MAC.String()
			})
			setIn(t, nodeB.NS, b, Want{})
		})
	}

	t.Run("garbage frames", func(t *testing.T) {
		setIn(t, nodeA.NS, a, Want{vip4: {"eth0"}})
		if err := netlab.SendGarbage(client.NS, 300); err != nil {
			t.Fatal(err)
		}
		lab.MustRun("ip", "-n", client.NS, "neigh", "flush", "all")
		waitFor(t, "node A still answers after garbage", 5*time.Second, func() bool {
			return netlab.Resolve(client.NS, vip4) == nodeA.MAC.String()
		})
	})

	// Last: a silenced announcer stays silent. Silence answers nothing more at once, its
	// sockets still open (a leaving speaker closes them after its goodbye).
	t.Run("silenced", func(t *testing.T) {
		setIn(t, nodeA.NS, a, Want{vip4: {"eth0"}})
		lab.MustRun("ip", "-n", client.NS, "neigh", "flush", "all")
		waitFor(t, "node A answers", 5*time.Second, func() bool {
			return netlab.Resolve(client.NS, vip4) == nodeA.MAC.String()
		})
		a.Silence()
		lab.MustRun("ip", "-n", client.NS, "neigh", "flush", "all")
		if mac := netlab.Resolve(client.NS, vip4); mac != "" {
			t.Fatalf("a silenced announcer answered with %s", mac)
		}
		var problems []error
		if err := netlab.In(nodeA.NS, func() error { _, problems = a.Set(Want{vip4: {"eth0"}}); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(problems) == 0 {
			t.Error("a silenced announcer took an address again")
		}
	})
}
