package handoff_test

import (
	"bufio"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"
)

// TestHeldBackUntilListed: a connection whose packets reach a node before flow sharing has
// listed it there (opened after the listing, then rehashed by the router) is held back rather
// than reset by the node's service proxy, and goes on once listed: the client's retransmission
// is handed to the node that holds it.
func TestHeldBackUntilListed(t *testing.T) {
	lb := newLab(t, false)
	c, h := lb.connectionAndNewNode(t, 40030)
	in(t, lb.new.NS, func() error { return h.HoldBack([]netip.Addr{lb.vip}, time.Minute) })
	lb.answer(lb.new) // the router's rehash, as the client sees it

	// Not listed yet: no answer, and no reset.
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("0 1\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection, not listed yet on the node it now reaches: %v, want no answer (held back)", err)
	}
	var held uint64
	in(t, lb.new.NS, func() (err error) { held, err = h.HeldBackCount(); return err })
	if held == 0 {
		t.Fatal("the packets held back are not counted")
	}

	lb.listOldNodesFlows(t, h)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // the client's next retransmission
	if line, err := r.ReadString('\n'); err != nil || line != "0 1\n" {
		t.Fatalf("the connection once listed: %q, %v; want the echo of the line held back", line, err)
	}
	if errs := exchange([]net.Conn{c}, 2); len(errs) > 0 {
		t.Fatal(errs)
	}
}
