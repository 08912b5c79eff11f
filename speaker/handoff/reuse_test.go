package handoff_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/speaker/handoff"
)

// TestPortReusedAfterTheHandoff: the new node's entry of a flow it picked up and handed off saw
// only the client's side of it, and outlives the connection by minutes (FIN_WAIT, or
// ESTABLISHED for a flow cut short), its hand-off mark with it. Once the hand-off has ended
// (its route gone), a new connection from the same client port must not follow that entry to
// the route that is no more: it connects, as any new connection does.
func TestPortReusedAfterTheHandoff(t *testing.T) {
	lb := newLab(t, false)
	// The client may reuse its port while its side of the first connection is in TIME_WAIT,
	// as clients busy enough to run through their ports do.
	lb.l.MustRun("ip", "netns", "exec", lb.client.NS, "sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1")
	const clientPort = 40001
	first := lb.connection(t, clientPort)
	h := open(t, lb.new.NS)
	in(t, lb.new.NS, func() error { return h.Set(lb.vip, lb.oldAddr(), time.Minute) })
	lb.answer(lb.new)
	if errs := exchange([]net.Conn{first}, 1); len(errs) > 0 {
		t.Fatal(errs)
	}
	first.Close()
	in(t, lb.new.NS, func() error { return h.Remove(lb.vip) })
	t.Cleanup(func() { in(t, lb.new.NS, h.Clear) })

	c := lb.redial(t, clientPort)
	if errs := exchange([]net.Conn{c}, 2); len(errs) > 0 {
		t.Fatal(errs)
	}
}

// TestTakeoverOverAClosedEntry: the node taking an address over may hold a closed entry
// (TIME_WAIT: two minutes) of an earlier connection of its own from a client port that a
// connection the previous owner holds reuses. That connection's packets met the entry here: not
// new, so never picked up; out of its window, invalid and untranslated; they went nowhere and
// the connection stalled for good (on the kubelet cluster, keep-alive connections stalled at a
// move: busy clients run through their ports in minutes, and the address goes back and forth).
// Taking an address over, the node deletes its closed entries of it.
func TestTakeoverOverAClosedEntry(t *testing.T) {
	lb := newLab(t, false)
	lb.l.MustRun("ip", "netns", "exec", lb.client.NS, "sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1")
	const clientPort = 40003
	lb.answer(lb.new)
	first := lb.connection(t, clientPort)
	first.Close()
	lb.waitForState(t, clientPort, tcpTimeWait, "the new node's entry of the first connection closed")

	lb.answer(lb.old) // the address moved to the old node, and a connection from the same port
	c := lb.redial(t, clientPort)
	if errs := exchange([]net.Conn{c}, 0); len(errs) > 0 {
		t.Fatal(errs)
	}
	h := open(t, lb.new.NS)
	t.Cleanup(func() { in(t, lb.new.NS, h.Clear) })
	in(t, lb.new.NS, func() error { return h.Set(lb.vip, lb.oldAddr(), time.Minute) })
	in(t, lb.new.NS, func() error { return h.ForgetClosed(lb.vip) })
	lb.answer(lb.new)
	if errs := exchange([]net.Conn{c}, 1); len(errs) > 0 {
		t.Log(run(lb.new.NS, "conntrack", "-L"))
		t.Fatalf("the connection through the old node, moved to the new one: %v", errs)
	}
}

// redial connects from the client's port again: TIME_WAIT lets the port be reused a second
// after its last connection closed at the earliest (with tcp_tw_reuse); until then the dial
// fails at once (EADDRNOTAVAIL), a dial whose SYNs go nowhere times out.
func (lb *lab) redial(t *testing.T, port int) net.Conn {
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := lb.dialFrom(port, 3*time.Second)
		if err == nil {
			t.Cleanup(func() { c.Close() })
			return c
		}
		if !errors.Is(err, syscall.EADDRNOTAVAIL) || time.Now().After(deadline) {
			t.Log(run(lb.new.NS, "nft", "list", "ruleset"), run(lb.new.NS, "ip", "route", "show", "table", "all"))
			t.Fatalf("a new connection from port %d: %v", port, err)
		}
	}
}

// dialFrom connects from the client's port to the address.
func (lb *lab) dialFrom(port int, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := netlab.In(lb.client.NS, func() (err error) {
		d := net.Dialer{Timeout: timeout, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(lb.client.IPv4.Addr(), uint16(port))),
			Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1) })
				return errors.Join(err, serr)
			}}
		c, err = d.DialContext(context.Background(), "tcp", netip.AddrPortFrom(lb.vip, 7000).String())
		return err
	})
	return c, err
}

// TestPickedUpFlowsCloseSoon: the new node's entry of a flow it picked up sees only the
// client's side, so conntrack never sees the close end; once the client closes, the entry
// must go within handoff.ClosingTimeout rather than the node's timeout for the state it
// stopped in (kube-proxy sets CLOSE_WAIT's to an hour), during which a new connection from the
// same client port would take the old flow's translation and mark.
func TestPickedUpFlowsCloseSoon(t *testing.T) {
	lb := newLab(t, false)
	const clientPort = 40002
	c := lb.movedConnection(t, clientPort, false)
	if errs := exchange([]net.Conn{c}, 1); len(errs) > 0 {
		t.Fatal(errs)
	}
	c.Close()

	limit := uint32(handoff.ClosingTimeout / time.Second)
	var last string
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		entry := lb.entryOf(t, lb.new, clientPort)
		if entry == nil {
			t.Fatal("the new node has no entry of the flow it picked up")
		}
		tcp, _ := entry.ProtoInfo.(*netlink.ProtoInfoTCP)
		last = fmt.Sprintf("state %d, %d s left, mark %#x", tcp.State, entry.TimeOut, entry.Mark)
		if tcp != nil && tcp.State >= tcpFinWait && tcp.State <= tcpClose { // closing
			if entry.TimeOut > limit {
				t.Fatalf("the closed flow's entry on the new node lives on: %s, want at most %d s", last, limit)
			}
			t.Logf("the closed flow's entry on the new node: %s", last)
			return
		}
	}
	t.Fatalf("the flow's entry on the new node never saw the client's close: %s", last)
}

// Conntrack's TCP states FIN_WAIT (4) to CLOSE (8): a flow closing or closed; TIME_WAIT (7).
const (
	tcpFinWait  = 4
	tcpTimeWait = 7
	tcpClose    = 8
)
