package plan

import (
	"net/netip"
	"slices"
	"time"

	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/rules/election"
)

// rebalance decides again which address moves for balance (rules.L2Balance over every L2
// address), combines again the addresses whose move starts or ends, and returns those whose
// claim changed here. It sets the plan's ReplanAt to the earlier of the drain grace's end and
// the moment the cluster will have settled.
func (pl *Planner) rebalance() []netip.Addr {
	ps := make([]election.Placement, 0, len(pl.placed))
	for _, p := range pl.placed {
		ps = append(ps, p)
	}
	cluster := pl.w.Cluster()
	var m election.Move
	var ok bool
	var at time.Time
	if pl.w.BalanceSettle > 0 { // zero: no balancing (a World made without it)
		m, ok, at = rules.L2Balance(&cluster, func(n string) bool { return pl.alive[n] }, ps, pl.w.Now, pl.w.BalanceSettle)
	}
	pl.plan.ReplanAt, pl.plan.ReplanFor = pl.graceAt, "drain-grace"
	if !at.IsZero() && (pl.graceAt.IsZero() || at.Before(pl.graceAt)) {
		pl.plan.ReplanAt, pl.plan.ReplanFor = at, "balance"
	}
	var next *election.Move
	if ok {
		next = &m
	}
	if pl.move == next || pl.move != nil && next != nil && *pl.move == *next {
		return nil
	}
	var touched []netip.Addr
	if pl.move != nil {
		touched = append(touched, pl.move.IP)
	}
	if next != nil {
		touched = append(touched, next.IP)
	}
	pl.move = next
	var changed []netip.Addr
	for _, ip := range slices.Compact(touched) {
		if mine, _ := pl.combineAddress(ip); mine {
			changed = append(changed, ip)
		}
	}
	return changed
}
