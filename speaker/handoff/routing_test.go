package handoff_test

import (
	"slices"
	"testing"

	"github.com/portico-lb/portico/speaker/handoff"
)

// TestPlanRules: the rules the hand-off owns (its priority, its tables) become exactly the
// wanted ones, whatever marks an earlier run used; every other rule stays.
func TestPlanRules(t *testing.T) {
	cfg := handoff.Defaults
	rule := func(prio, table int, mark, mask uint32) handoff.RoutingRule {
		return handoff.RoutingRule{V4: true, Priority: prio, Table: table, FwMark: mark, FwMask: mask}
	}
	cilium := rule(9, 2004, 0x200, 0xf00)
	own := rule(3580, 3580, 0x2000, 0x20ff)
	slot := rule(3580, 3581, 0x2001, 0x20ff)
	before := rule(3580, 3580, 0x2000, 0x2000)     // the rule of an earlier version
	oldSlot := rule(3580, 3583, 0x30000, 0xff0000) // a slot of an earlier mask
	other := rule(3580, 100, 0x1, 0x1)             // someone's at the same priority, another table
	for _, tc := range []struct {
		name             string
		have, want       []handoff.RoutingRule
		wantDel, wantAdd []handoff.RoutingRule
	}{
		{"idle, nothing wanted: nothing of its own stays", []handoff.RoutingRule{cilium, before, oldSlot, other}, nil,
			[]handoff.RoutingRule{before, oldSlot}, nil},
		{"wanted ones added", []handoff.RoutingRule{cilium}, []handoff.RoutingRule{own, slot}, nil, []handoff.RoutingRule{own, slot}},
		{"kept once, a copy removed", []handoff.RoutingRule{own, own, slot}, []handoff.RoutingRule{own, slot},
			[]handoff.RoutingRule{own}, nil},
		{"an earlier version's replaced", []handoff.RoutingRule{before, cilium}, []handoff.RoutingRule{own},
			[]handoff.RoutingRule{before}, []handoff.RoutingRule{own}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			del, add := cfg.PlanRules(tc.have, tc.want)
			if !slices.Equal(del, tc.wantDel) || !slices.Equal(add, tc.wantAdd) {
				t.Errorf("PlanRules: delete %v, add %v; want delete %v, add %v", del, add, tc.wantDel, tc.wantAdd)
			}
		})
	}
}
