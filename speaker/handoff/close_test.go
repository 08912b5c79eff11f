package handoff_test

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/speaker/handoff"
)

// TestClosedAfterTheMove: a connection the client closes after the address moved must close at
// the node that holds it, so that the backend learns of it and that node's entry ends, whatever
// packet the new node sees of it first. A FIN or a reset opens no conntrack entry (they are
// invalid as a flow's first packet), and a reset ends at once an entry that saw no answer (the
// new node's entry of a picked-up flow never does): unpicked, such packets went nowhere, the
// old node's entry stayed ESTABLISHED, translated to the backend, and a new connection from the
// same client port that reached that node later followed it (on the kubelet cluster, to pods
// long deleted: new connections that never connected). Both hand-offs: of an address (L2) and of
// listed flows (BGP's flow sharing).
func TestClosedAfterTheMove(t *testing.T) {
	t.Run("by address", func(t *testing.T) { testClosedAfterTheMove(t, false) })
	t.Run("by flow", func(t *testing.T) { testClosedAfterTheMove(t, true) })
}

func testClosedAfterTheMove(t *testing.T, byFlow bool) {
	for _, tc := range []struct {
		name      string
		exchanges bool // a request on the connection after the move, before the close
		reset     bool // the client resets rather than closes (SO_LINGER 0)
	}{
		{"a FIN, the first packet after the move", false, false},
		{"a reset, the first packet after the move", false, true},
		{"a reset of a flow picked up", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lb := newLab(t, false)
			const clientPort = 40011
			c := lb.movedConnection(t, clientPort, byFlow)
			if tc.exchanges {
				if errs := exchange([]net.Conn{c}, 1); len(errs) > 0 {
					t.Fatal(errs)
				}
			}
			if tc.reset {
				_ = c.(*net.TCPConn).SetLinger(0)
			}
			c.Close()

			var last string
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("the old node's entry: %s; the new node's ruleset:\n%s", last, run(lb.new.NS, "nft", "list", "ruleset"))
				}
			})
			netlab.WaitFor(t, "the client's close to reach the old node, which holds the flow", 5*time.Second, func() bool {
				entry := lb.entryOf(t, lb.old, clientPort)
				if entry == nil {
					return true // ended
				}
				tcp, _ := entry.ProtoInfo.(*netlink.ProtoInfoTCP)
				if tcp == nil {
					t.Fatalf("the old node's entry of the flow has no TCP state: %v", entry)
				}
				last = fmt.Sprintf("state %d, %d s left", tcp.State, entry.TimeOut)
				return tcp.State >= tcpFinWait && tcp.State <= tcpClose
			})
		})
	}
}

// movedConnection opens a connection from the client's port through the old node, exchanges a
// line on it, and moves the address to the new node, which hands the connection off by address
// or, byFlow, as a listed flow (the old node's HeldFlows).
func (lb *lab) movedConnection(t *testing.T, clientPort int, byFlow bool) net.Conn {
	c, h := lb.connectionAndNewNode(t, clientPort)
	if byFlow {
		lb.listOldNodesFlows(t, h)
	} else {
		in(t, lb.new.NS, func() error { return h.Set(lb.vip, lb.oldAddr(), time.Minute) })
	}
	lb.answer(lb.new)
	return c
}

// connectionAndNewNode opens a connection from the client's port through the old node and
// exchanges a line on it, and opens the hand-off on the new node.
func (lb *lab) connectionAndNewNode(t *testing.T, clientPort int) (net.Conn, *handoff.Handoff) {
	c := lb.connection(t, clientPort)
	h := open(t, lb.new.NS)
	t.Cleanup(func() { in(t, lb.new.NS, h.Clear) })
	return c, h
}

// listOldNodesFlows lists at the new node's hand-off h the flows the old node holds (flow
// sharing's round, in short).
func (lb *lab) listOldNodesFlows(t *testing.T, h *handoff.Handoff) {
	var held map[netip.Addr][]handoff.Flow
	old := open(t, lb.old.NS)
	in(t, lb.old.NS, func() (err error) { held, err = old.HeldFlows([]netip.Addr{lb.vip}, 10); return err })
	in(t, lb.new.NS, func() error { _, err := h.SetFlows(lb.oldAddr(), held[lb.vip], time.Minute); return err })
}

// entryOf is node n's conntrack entry of the IPv4 flow from the client's port to the address,
// nil if it has none.
func (lb *lab) entryOf(t *testing.T, n netlab.Host, clientPort int) *netlink.ConntrackFlow {
	var entry *netlink.ConntrackFlow
	in(t, n.NS, func() error {
		flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
		for _, f := range flows {
			if int(f.Forward.SrcPort) == clientPort && f.Forward.DstIP.Equal(lb.vip.AsSlice()) {
				entry = f
			}
		}
		return err
	})
	return entry
}
