package handoff

import (
	"errors"
	"fmt"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The policy-routing rules are there only while something is handed off: the rule by address
// of a family while its routing table holds a route of that family, a slot's rule while the slot
// is. A node with nothing handed off holds none, and so no rule of the hand-off's that a packet
// could meet; an earlier run's rules (another mark, another mask, a slot given back) are
// pruned by the next Open.

// RoutingRule is one policy-routing rule as the hand-off reads and writes it.
type RoutingRule struct {
	V4              bool
	Priority, Table int
	FwMark, FwMask  uint32
}

func (r RoutingRule) String() string {
	family := "ipv6"
	if r.V4 {
		family = "ipv4"
	}
	return fmt.Sprintf("%s pref %d fwmark %#x/%#x lookup %d", family, r.Priority, r.FwMark, r.FwMask, r.Table)
}

// owns reports whether a rule is one the hand-off of cfg makes, whatever its marks: at its
// priority, to one of its routing tables (RouteTable and the slots' 255 after it).
func (c Config) owns(r RoutingRule) bool {
	return r.Priority == c.RulePriority && r.Table >= c.RouteTable && r.Table <= c.RouteTable+255
}

// addressRule is the rule of the flows handed off by address: MARK and no slot.
func (c Config) addressRule(v4 bool) RoutingRule {
	return RoutingRule{V4: v4, Priority: c.RulePriority, Table: c.RouteTable, FwMark: c.Mark, FwMask: c.Mark | c.SlotMask}
}

// slotRule is the rule of the flows handed off by slot n: MARK and the slot.
func (c Config) slotRule(n int, v4 bool) RoutingRule {
	return RoutingRule{V4: v4, Priority: c.RulePriority, Table: c.slotTable(n), FwMark: c.slotMark(n), FwMask: c.Mark | c.SlotMask}
}

// PlanRules is what to delete and add so that the rules the hand-off of cfg owns among have are
// exactly want: each wanted rule once, nothing else of its own (rules it does not own stay).
func (c Config) PlanRules(have, want []RoutingRule) (del, add []RoutingRule) {
	kept := map[RoutingRule]bool{}
	for _, r := range have {
		if !c.owns(r) {
			continue
		}
		if slices.Contains(want, r) && !kept[r] {
			kept[r] = true
			continue
		}
		del = append(del, r) // another mark or table, or a second copy
	}
	for _, r := range want {
		if !kept[r] && !slices.Contains(add, r) {
			add = append(add, r)
		}
	}
	return del, add
}

// wantedRules are the rules for the routes and slots the hand-off holds now.
func (h *Handoff) wantedRules(routes []Entry) []RoutingRule {
	var want []RoutingRule
	for _, v4 := range []bool{true, false} {
		if slices.ContainsFunc(routes, func(e Entry) bool { return e.Addr.Is4() == v4 }) {
			want = append(want, h.cfg.addressRule(v4))
		}
	}
	for _, s := range h.slots {
		want = append(want, h.cfg.slotRule(s.n, s.via.Is4()))
	}
	return want
}

// syncRules brings the kernel's rules of the hand-off to want.
func (h *Handoff) syncRules(want []RoutingRule) error {
	have, err := listRules()
	if err != nil {
		return err
	}
	del, add := h.cfg.PlanRules(have, want)
	var errs []error
	for _, r := range del {
		if err := netlink.RuleDel(toNetlink(r)); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("removing the routing rule %s: %w", r, err))
		}
	}
	for _, r := range add {
		if err := netlink.RuleAdd(toNetlink(r)); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("adding the hand-off's routing rule %s: %w", r, err))
		}
	}
	return errors.Join(errs...)
}

// listRules reads the node's policy-routing rules of both families.
func listRules() ([]RoutingRule, error) {
	var out []RoutingRule
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RuleList(family)
		if err != nil {
			return nil, fmt.Errorf("listing the routing rules: %w", err)
		}
		for _, r := range rs {
			rr := RoutingRule{V4: family == netlink.FAMILY_V4, Priority: r.Priority, Table: r.Table, FwMark: r.Mark}
			if r.Mask != nil {
				rr.FwMask = *r.Mask
			}
			out = append(out, rr)
		}
	}
	return out, nil
}

func toNetlink(r RoutingRule) *netlink.Rule {
	nr := netlink.NewRule()
	nr.Family = netlink.FAMILY_V6
	if r.V4 {
		nr.Family = netlink.FAMILY_V4
	}
	nr.Priority, nr.Table, nr.Mark = r.Priority, r.Table, r.FwMark
	mask := r.FwMask
	nr.Mask = &mask
	return nr
}
