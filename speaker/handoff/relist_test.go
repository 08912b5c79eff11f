package handoff_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/portico-lb/portico/speaker/handoff"
)

// TestFlowListedAgain: a flow listed again goes to the node it is listed for now, with a new
// grace. A client that reuses its ports opens a connection another node holds on the same four
// ports as one listed before; adding the element with another verdict failed the whole listing
// (EEXIST), every other flow in it with it.
func TestFlowListedAgain(t *testing.T) {
	lb := newLab(t, false)
	h := open(t, lb.new.NS)
	t.Cleanup(func() { in(t, lb.new.NS, h.Clear) })
	reused := handoff.Flow{Client: netip.AddrPortFrom(lb.client.IPv4.Addr(), 40020), Service: netip.AddrPortFrom(lb.vip, port)}
	other := handoff.Flow{Client: netip.AddrPortFrom(lb.client.IPv4.Addr(), 40021), Service: netip.AddrPortFrom(lb.vip, port)}
	in(t, lb.new.NS, func() error { _, err := h.SetFlows(lb.oldAddr(), []handoff.Flow{reused}, time.Second); return err })
	// Listed again, for another node (the client's address stands in for it), with another flow.
	var listed int
	in(t, lb.new.NS, func() (err error) {
		listed, err = h.SetFlows(lb.client.IPv4.Addr(), []handoff.Flow{reused, other}, time.Minute)
		return err
	})
	if listed != 2 {
		t.Fatalf("listed %d flows, want 2", listed)
	}
	elements := run(lb.new.NS, "nft", "list", "map", "inet", "portico-handoff", "flows4")
	for _, want := range []string{"40020 . 10.0.0.200 . 7000 timeout 1m", "40021 . 10.0.0.200 . 7000 timeout 1m"} {
		if !strings.Contains(elements, want) {
			t.Errorf("the flows map has no %q:\n%s", want, elements)
		}
	}
	if strings.Contains(elements, "jump slot1") {
		t.Errorf("a flow still goes to the first node's slot:\n%s", elements)
	}
}
