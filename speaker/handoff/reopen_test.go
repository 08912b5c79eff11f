package handoff_test

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/speaker/handoff"
)

// TestForgetClosedSparesAReopenedEntry: ForgetClosed reads the table, then deletes the closed
// entries; a client that reopens one in between (its SYN from the same port ends the entry and
// opens a new one, which the kernel may give the same ID) must keep its new connection. The
// delete took it: the connection's answer found no translation (seen on the kubelet cluster at
// a takeover). Only a reopened entry that took its closed one's ID tells the two apart (the
// kernel refuses a delete of another ID), so the test reopens until one does.
func TestForgetClosedSparesAReopenedEntry(t *testing.T) {
	lb := newLab(t, false)
	lb.answer(lb.new)
	h := open(t, lb.new.NS)
	const clientPort, attempts = 40005, 50
	for attempt := 1; attempt <= attempts; attempt++ {
		first := lb.connection(t, clientPort)
		closeWithReset(t, first)
		lb.waitForState(t, clientPort, tcpClose, "the new node's entry of the reset connection closed")
		closedID := lb.entryID(t, clientPort)

		// ForgetClosed has read the table; before it deletes, the client reopens the entry.
		reached, proceed := make(chan struct{}), make(chan struct{})
		var once sync.Once
		handoff.SetBeforeRereading(t, func() {
			once.Do(func() { close(reached); <-proceed })
		})
		done := make(chan error, 1)
		go func() { done <- netlab.In(lb.new.NS, func() error { return h.ForgetClosed(lb.vip) }) }()
		select {
		case <-reached:
		case err := <-done:
			t.Fatalf("ForgetClosed found no closed entry to delete (err %v)", err)
		}
		reopened := lb.connection(t, clientPort)
		reopenedID := lb.entryID(t, clientPort)
		close(proceed)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// The delete's loss shows in the answers only when one is on its way (the next packet
		// opens a fresh entry, to a pod of the proxy's choosing): the entry itself tells.
		if id, err := lb.entryIDErr(clientPort); err != nil || id != reopenedID {
			t.Fatalf("attempt %d: the reopened connection's entry (ID %d, the closed one's %d) after ForgetClosed: ID %d, %v",
				attempt, reopenedID, closedID, id, err)
		}
		if errs := exchange([]net.Conn{reopened}, 1); len(errs) > 0 {
			t.Fatalf("attempt %d: the reopened connection (entry ID %d, the closed one's %d) after ForgetClosed: %v",
				attempt, reopenedID, closedID, errs)
		}
		if reopenedID == closedID {
			t.Logf("attempt %d: the reopened entry took its closed one's ID %d and was spared", attempt, closedID)
			return
		}
		closeWithReset(t, reopened)
	}
	t.Fatalf("no reopened entry took its closed one's ID in %d attempts: the race this test sets up needs one", attempts)
}

// connection opens a connection from the client's port and exchanges a line on it.
func (lb *lab) connection(t *testing.T, clientPort int) net.Conn {
	t.Helper()
	c, err := lb.dialFrom(clientPort, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if errs := exchange([]net.Conn{c}, 0); len(errs) > 0 {
		t.Fatal(errs)
	}
	return c
}

// waitForState waits for the new node's entry of the flow from the client's port to reach the
// conntrack TCP state.
func (lb *lab) waitForState(t *testing.T, clientPort int, state uint8, what string) {
	netlab.WaitFor(t, what, 5*time.Second, func() bool {
		e := lb.entryOf(t, lb.new, clientPort)
		if e == nil {
			return false
		}
		tcp, _ := e.ProtoInfo.(*netlink.ProtoInfoTCP)
		return tcp != nil && tcp.State == state
	})
}

// closeWithReset ends c with a reset, which leaves the client's port free at once (no
// TIME_WAIT) and the nodes' entries in CLOSE.
func closeWithReset(t *testing.T, c net.Conn) {
	if err := c.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// entryID is the ID of the new node's entry of the flow from the client's port to the address.
func (lb *lab) entryID(t *testing.T, clientPort int) uint32 {
	id, err := lb.entryIDErr(clientPort)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (lb *lab) entryIDErr(clientPort int) (id uint32, err error) {
	err = netlab.In(lb.new.NS, func() error {
		c, err := conntrack.Dial(nil)
		if err != nil {
			return err
		}
		defer c.Close()
		f, err := c.Get(conntrack.Flow{TupleOrig: conntrack.Tuple{
			IP:    conntrack.IPTuple{SourceAddress: lb.client.IPv4.Addr(), DestinationAddress: lb.vip},
			Proto: conntrack.ProtoTuple{Protocol: unix.IPPROTO_TCP, SourcePort: uint16(clientPort), DestinationPort: port},
		}})
		id = f.ID
		return err
	})
	return id, err
}
