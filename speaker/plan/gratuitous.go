package plan

import (
	"maps"
	"net/netip"
	"slices"
	"time"
)

// Gratuitous is when each address this node answers for is announced again (gratuitous ARP or
// an unsolicited NA) for a switch whose forwarding table would forget the node's MAC: every
// Claim.GratuitousEvery, counted from the address's latest announcement (its takeover's, then
// its own). Time is an input, so the schedule is pinned by transcripts
// (testdata/gratuitous); the speaker's side keeps one, sleeps until Next and announces what
// Due returns.
type Gratuitous struct {
	every map[netip.Addr]time.Duration
	next  map[netip.Addr]time.Time
}

// GratuitousOf is every address of the plan's L2 claims that is announced again, and how often.
func GratuitousOf(mine map[netip.Addr]Claim) map[netip.Addr]time.Duration {
	out := map[netip.Addr]time.Duration{}
	for ip, c := range mine {
		if c.GratuitousEvery > 0 {
			out[ip] = c.GratuitousEvery
		}
	}
	return out
}

// Set replaces the addresses announced again, at now. An address new to the schedule was just
// announced by its takeover: its first repeat is a whole interval away. One that stays keeps
// its time, brought forward when its interval shortens.
func (g *Gratuitous) Set(every map[netip.Addr]time.Duration, now time.Time) {
	if g.next == nil {
		g.next = map[netip.Addr]time.Time{}
	}
	for ip := range g.next {
		if every[ip] <= 0 {
			delete(g.next, ip)
		}
	}
	for ip, d := range every {
		if d <= 0 {
			continue
		}
		if at, ok := g.next[ip]; !ok || now.Add(d).Before(at) {
			g.next[ip] = now.Add(d)
		}
	}
	g.every = maps.Clone(every)
}

// Due returns the addresses to announce at now, sorted, and counts their next interval from now.
func (g *Gratuitous) Due(now time.Time) []netip.Addr {
	var due []netip.Addr
	for ip, at := range g.next {
		if !at.After(now) {
			due = append(due, ip)
			g.next[ip] = now.Add(g.every[ip])
		}
	}
	slices.SortFunc(due, netip.Addr.Compare)
	return due
}

// Next is when the next address is due (zero: none is announced again).
func (g *Gratuitous) Next() time.Time {
	var first time.Time
	for _, at := range g.next {
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first
}
