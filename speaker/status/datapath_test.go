package status

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

func TestHeldCapabilities(t *testing.T) {
	for _, tc := range []struct {
		status           string
		netRaw, netAdmin bool
	}{
		{"Name:\tportico-speaker\nCapInh:\t0000000000000000\nCapEff:\t0000000000003000\n", true, true},
		{"CapPrm:\t0000000000003000\nCapEff:\t0000000000001000\n", false, true},
		{"CapEff:\t0000000000002000\n", true, false},
		{"CapEff:\t000001ffffffffff\n", true, true},
		{"CapEff:\tzz\n", false, false},
		{"Name:\tno caps line\n", false, false},
	} {
		raw, admin := HeldCapabilities(tc.status)
		if raw != tc.netRaw || admin != tc.netAdmin {
			t.Errorf("HeldCapabilities(%q) = %v, %v; want %v, %v", tc.status, raw, admin, tc.netRaw, tc.netAdmin)
		}
	}
}

// TestDataPath: each lack has its reason, the most basic first, and a message that says what
// the node loses and the fix; with nothing lacking the condition is True.
func TestDataPath(t *testing.T) {
	refused := errors.New("creating nftables table inet portico: operation not permitted")
	for _, tc := range []struct {
		name   string
		f      DataPathFacts
		status metav1.ConditionStatus
		reason string
		msg    string
	}{
		{"everything", DataPathFacts{NetRaw: true, NetAdmin: true, Guard: true, Handoff: true}, metav1.ConditionTrue, v1alpha1.ReasonDataPathComplete,
			"CAP_NET_RAW held; the forwarding guard and the L2 hand-off in place"},
		{"guard and hand-off off, NET_RAW alone", DataPathFacts{NetRaw: true}, metav1.ConditionTrue, v1alpha1.ReasonDataPathComplete, "CAP_NET_RAW held"},
		{"no NET_RAW", DataPathFacts{NetAdmin: true, Guard: true}, metav1.ConditionFalse, v1alpha1.ReasonNetRawMissing,
			"no CAP_NET_RAW: this node answers no ARP or NDP for its addresses and runs no self-check or conflict probe (grant NET_RAW in the speaker's securityContext)"},
		{"no NET_ADMIN", DataPathFacts{NetRaw: true, Guard: true, Handoff: true, GuardErr: refused, HandoffErr: refused}, metav1.ConditionFalse, v1alpha1.ReasonNetAdminMissing,
			"no CAP_NET_ADMIN: no forwarding guard (untranslated packets to announced addresses are routed back out) and no L2 hand-off (connections through a node that stays up are reset when their address moves) (grant NET_ADMIN, or switch them off: speaker.forwardGuard=false, --l2-handoff-grace=0)"},
		{"neither", DataPathFacts{Handoff: true, HandoffErr: refused}, metav1.ConditionFalse, v1alpha1.ReasonNetRawMissing,
			"no CAP_NET_RAW: this node answers no ARP or NDP for its addresses and runs no self-check or conflict probe (grant NET_RAW in the speaker's securityContext); no CAP_NET_ADMIN: no L2 hand-off (connections through a node that stays up are reset when their address moves) (grant NET_ADMIN, or switch them off: speaker.forwardGuard=false, --l2-handoff-grace=0)"},
		{"the guard's table refused", DataPathFacts{NetRaw: true, NetAdmin: true, Guard: true, Handoff: true, GuardErr: refused}, metav1.ConditionFalse, v1alpha1.ReasonNftablesUnavailable,
			"nftables: the forwarding guard's table could not be made (creating nftables table inet portico: operation not permitted): no forwarding guard (untranslated packets to announced addresses are routed back out) (the kernel needs nf_tables)"},
	} {
		c := DataPath(tc.f)
		if c.Type != v1alpha1.ConditionDataPath || c.Status != tc.status || c.Reason != tc.reason || c.Message != tc.msg {
			t.Errorf("%s: DataPath = %s %s %q\nwant %s %s %q", tc.name, c.Status, c.Reason, c.Message, tc.status, tc.reason, tc.msg)
		}
	}
}
