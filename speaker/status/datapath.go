package status

import (
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// DataPathFacts is what a speaker found at start about its packet path on the node.
type DataPathFacts struct {
	NetRaw, NetAdmin bool // held in the speaker's effective capabilities
	// Guard and Handoff: switched on (--forward-guard, --l2-handoff-grace above 0), and the
	// error making each one's nftables table, if any.
	Guard, Handoff       bool
	GuardErr, HandoffErr error
}

// The effective capability bits (linux/capability.h) the speaker looks for.
const (
	capNetAdmin = 12
	capNetRaw   = 13
)

// HeldCapabilities reads CAP_NET_RAW and CAP_NET_ADMIN from a /proc/PID/status text's CapEff
// line; both false when there is none.
func HeldCapabilities(procStatus string) (netRaw, netAdmin bool) {
	for line := range strings.Lines(procStatus) {
		hex, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		eff, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return false, false
		}
		return eff&(1<<capNetRaw) != 0, eff&(1<<capNetAdmin) != 0
	}
	return false, false
}

// DataPath is the Speaker's DataPath condition: what the node loses for lack of a capability or
// of nf_tables, the most basic lack first, each with its fix.
func DataPath(f DataPathFacts) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionDataPath}
	var lacks []string
	if !f.NetRaw {
		c.Reason = v1alpha1.ReasonNetRawMissing
		lacks = append(lacks, "no CAP_NET_RAW: this node answers no ARP or NDP for its addresses and runs no self-check or conflict probe "+
			"(grant NET_RAW in the speaker's securityContext)")
	}
	tables := map[string]error{}
	if f.Guard {
		tables["the forwarding guard"] = f.GuardErr
	}
	if f.Handoff {
		tables["the L2 hand-off"] = f.HandoffErr
	}
	switch {
	case len(tables) > 0 && !f.NetAdmin:
		if c.Reason == "" {
			c.Reason = v1alpha1.ReasonNetAdminMissing
		}
		lacks = append(lacks, "no CAP_NET_ADMIN: "+offNote(f.Guard, f.Handoff)+
			" (grant NET_ADMIN, or switch them off: speaker.forwardGuard=false, --l2-handoff-grace=0)")
	case f.GuardErr != nil || f.HandoffErr != nil:
		if c.Reason == "" {
			c.Reason = v1alpha1.ReasonNftablesUnavailable
		}
		var failed []string
		for _, what := range []string{"the forwarding guard", "the L2 hand-off"} {
			if err := tables[what]; err != nil {
				failed = append(failed, fmt.Sprintf("%s's table could not be made (%v)", what, err))
			}
		}
		lacks = append(lacks, "nftables: "+strings.Join(failed, "; ")+": "+
			offNote(f.GuardErr != nil, f.HandoffErr != nil)+" (the kernel needs nf_tables)")
	}
	if len(lacks) > 0 {
		c.Status, c.Message = metav1.ConditionFalse, strings.Join(lacks, "; ")
		return c
	}
	c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonDataPathComplete, "CAP_NET_RAW held"
	if len(tables) > 0 {
		c.Message += "; " + inPlace(f.Guard, f.Handoff) + " in place"
	}
	return c
}

// offNote says what a node without the guard or the hand-off loses.
func offNote(guard, handoff bool) string {
	var off []string
	if guard {
		off = append(off, "no forwarding guard (untranslated packets to announced addresses are routed back out)")
	}
	if handoff {
		off = append(off, "no L2 hand-off (connections through a node that stays up are reset when their address moves)")
	}
	return strings.Join(off, " and ")
}

func inPlace(guard, handoff bool) string {
	switch {
	case guard && handoff:
		return "the forwarding guard and the L2 hand-off"
	case guard:
		return "the forwarding guard"
	}
	return "the L2 hand-off"
}
