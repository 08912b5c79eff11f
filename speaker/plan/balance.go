package plan

import (
	"net/netip"
	"slices"
	"time"

	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/rules/election"
)

// place records ip's placement for the balance, keeping count of the addresses in flight and
// noting whether any placement changed since the balance was last decided.
func (pl *Planner) place(ip netip.Addr, p *election.Placement) {
	old, had := pl.placed[ip]
	if had && old.InFlight() {
		pl.inFlight--
	}
	switch {
	case p == nil:
		delete(pl.placed, ip)
		pl.placedChanged = pl.placedChanged || had
		return
	case p.InFlight():
		pl.inFlight++
	}
	pl.placed[ip] = *p
	pl.placedChanged = pl.placedChanged || !had || old.Owner != p.Owner || !slices.Equal(old.Nodes, p.Nodes) || !slices.Equal(old.Holders, p.Holders)
}

// rebalance decides again, when a placement changed, which address moves for balance
// (election.Balance over every L2 address; none during a rollout, rules.L2Rollout, read at the
// Replan, nor within the settle window after a speaker joined, World.MembersSince), combines again the addresses whose move starts or ends, and returns those whose claim
// changed here. It sets the plan's ReplanAt to the earlier of the drain grace's end and the
// moment the cluster will have settled. While an address is in flight (most changes: a new
// address is held by nobody yet) it costs nothing; once settled, one pass over the addresses.
func (pl *Planner) rebalance() []netip.Addr {
	if !pl.placedChanged {
		return nil
	}
	pl.placedChanged = false
	var next *election.Move
	var at time.Time
	if pl.w.BalanceSettle > 0 && pl.rollout == "" && pl.inFlight == 0 { // zero settle: no balancing
		ps := make([]election.Placement, 0, len(pl.placed))
		for _, p := range pl.placed {
			ps = append(ps, p)
		}
		var m election.Move
		var ok bool
		if joined := pl.w.MembersSince.Add(pl.w.BalanceSettle); pl.w.Now.Before(joined) {
			at = joined
		} else if m, ok, at = election.Balance(ps, pl.w.Now, pl.w.BalanceSettle); ok {
			next = &m
		}
	}
	pl.plan.ReplanAt, pl.plan.ReplanFor = pl.graceAt, "drain-grace"
	if !at.IsZero() && (pl.graceAt.IsZero() || at.Before(pl.graceAt)) {
		pl.plan.ReplanAt, pl.plan.ReplanFor = at, "balance"
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
	pl.placedChanged = false // combining again records the same placements
	return changed
}

// rolloutOf is rules.L2Rollout for the world of a Replan, "" when balancing is off.
func rolloutOf(w *World, alive map[string]bool) string {
	if w.BalanceSettle <= 0 {
		return ""
	}
	return rules.L2Rollout(w.Nodes, w.Speakers, func(n string) bool { return alive[n] })
}

// Rehold takes the holders anew (the Speakers' L2 announcements changed: an address taken
// over, given up, or a node's since) and combines again only the addresses whose holders
// changed, so that each status write of each node costs the addresses it changed, not a whole
// plan on every node.
func (pl *Planner) Rehold(holders rules.Holders) Changes {
	var dirty []netip.Addr
	for ip, hs := range holders {
		if !slices.Equal(hs, pl.w.Holders[ip]) {
			dirty = append(dirty, ip)
		}
	}
	for ip := range pl.w.Holders {
		if _, ok := holders[ip]; !ok {
			dirty = append(dirty, ip)
		}
	}
	pl.w.Holders = holders
	slices.SortFunc(dirty, netip.Addr.Compare)
	var ch Changes
	for _, ip := range dirty {
		if _, listed := pl.byAddr[ip]; !listed {
			continue // no Service lists it (any more): nothing to elect
		}
		if mine, _ := pl.combineAddress(ip); mine {
			ch.Mine = append(ch.Mine, ip)
		}
	}
	if moved := pl.rebalance(); len(moved) > 0 {
		ch.Mine = append(ch.Mine, moved...)
		slices.SortFunc(ch.Mine, netip.Addr.Compare)
		ch.Mine = slices.Compact(ch.Mine)
	}
	ch.Problems = pl.refreshProblems(len(dirty) > 0)
	return ch
}
