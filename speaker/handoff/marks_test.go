package handoff_test

import (
	"testing"
	"time"
)

// TestForeignMarks: every packet reaching the new node carries every bit of the mark but the
// hand-off's, as a CNI, a mesh and kube-proxy together may set them (Calico's 0x40000 and
// 0x10000, Cilium's identities, Istio's 0x539, kube-proxy's 0x4000 among them): a new connection
// is still the node's own, translated by its proxy, never bound by the hand-off for a bit it
// did not set; and the connections handed off still survive.
func TestForeignMarks(t *testing.T) {
	lb := newLab(t, false)
	conns := lb.dial(t, 5)
	if errs := exchange(conns, 0); len(errs) > 0 {
		t.Fatal(errs)
	}
	nft(t, lb.new.NS, `table ip cni { chain from-pods { type filter hook prerouting priority raw; meta mark set 0xffffdfff; }; }`)
	h := open(t, lb.new.NS)
	in(t, lb.new.NS, func() error { return h.Set(lb.vip, lb.oldAddr(), time.Minute) })
	lb.answer(lb.new)
	for round := 1; round <= 3; round++ {
		if errs := exchange(conns, round); len(errs) > 0 {
			t.Fatalf("round %d: %v", round, errs)
		}
	}
	lb.freshIsNewNodes(t, h.Counts)
	in(t, lb.new.NS, h.Clear)
}
