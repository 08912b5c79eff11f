package election

import (
	"cmp"
	"net/netip"
	"slices"
	"time"
)

// Placement is one address as Balance sees it: the nodes its owner is elected from (after
// preferences and subnets), the owner Sticky elected among them, and its holders.
type Placement struct {
	IP      netip.Addr
	Nodes   []string
	Owner   string // "" when no node may answer
	Holders []Holder
}

// InFlight reports whether p's address is moving: it has an owner whose only holder is not
// that owner (held by nobody yet, by someone else, or by two nodes), or no owner and a holder
// still answering for it.
func (p *Placement) InFlight() bool {
	if p.Owner == "" {
		return len(p.Holders) > 0
	}
	return len(p.Holders) != 1 || p.Holders[0].Node != p.Owner
}

// Move is the one address Balance moves, from its owner to To.
type Move struct {
	IP       netip.Addr
	From, To string
}

// Overload is how far above the mean a node's count of addresses may grow before Balance moves
// one away: with a little slack, so that the spread a hash gives anyway moves nothing.
const Overload = 1.25

// Balance picks the one address, if any, that moves for balance, from the placements of every
// address announced over L2. Nothing moves while a move is in flight (InFlight: an address
// just handed out or being taken over) or before settle has passed since the latest holder
// took its address (at: when it has, to plan again then; zero otherwise). Once settled, a node
// holding more than Overload × the mean (the addresses over the nodes any of them may be
// elected among) gives up one address: of the most loaded such node first (ties by name), its
// smallest address whose Owner among its nodes (its home) is a node below the mean holding two
// fewer at least, to that node; when no such node has one, the most loaded one's smallest
// address that may go to such a node, to the Owner among those. A move home stays put for good, and every move lowers the
// sum of the squared loads, so balancing ends; the settle window after each move makes it one
// address at a time. The caller also holds it back during a rollout (rules.L2Rollout).
func Balance(ps []Placement, now time.Time, settle time.Duration) (m Move, ok bool, at time.Time) {
	l, latest, inFlight := loadsOf(ps)
	if inFlight || l.owned == 0 {
		return Move{}, false, time.Time{}
	}
	if settledAt := latest.Add(settle); now.Before(settledAt) {
		return Move{}, false, settledAt
	}
	heavy := l.overloaded()
	for _, pick := range []func(string) func(*Placement) string{l.home, l.anyTaker} {
		for _, from := range heavy {
			if m, ok := smallest(ps, from, pick(from)); ok {
				return m, true, time.Time{}
			}
		}
	}
	return Move{}, false, time.Time{}
}

// loads is how many addresses each node holds as owner, every node an address may be elected
// among counting (for the mean) whether it holds any or not, and how many are owned in all.
type loads struct {
	of    map[string]int
	owned int
}

// loadsOf counts the placements' loads; latest is when the newest holder took its address,
// inFlight whether one of them is moving.
func loadsOf(ps []Placement) (l loads, latest time.Time, inFlight bool) {
	l.of = map[string]int{}
	for i := range ps {
		p := &ps[i]
		if p.InFlight() {
			return l, latest, true
		}
		if p.Owner == "" {
			continue
		}
		latest = later(latest, p.Holders[0].Since)
		l.owned++
		l.of[p.Owner]++
		for _, n := range p.Nodes {
			l.of[n] += 0 // every electable node counts for the mean, holding anything or not
		}
	}
	return l, latest, false
}

// overloaded is the nodes holding more than Overload × the mean, the most loaded first (ties by
// name). load > Overload × owned/nodes, in integers: 4·load·nodes > 5·owned.
func (l loads) overloaded() []string {
	var heavy []string
	for n, load := range l.of {
		if 4*load*len(l.of) > 5*l.owned {
			heavy = append(heavy, n)
		}
	}
	slices.SortFunc(heavy, func(a, b string) int { return cmp.Or(cmp.Compare(l.of[b], l.of[a]), cmp.Compare(a, b)) })
	return heavy
}

// takes says whether node n may take an address from node from: below the mean, and two fewer
// at least (a move that only shifts the excess to another node, one address over three nodes,
// is no balance).
func (l loads) takes(n, from string) bool {
	return l.of[n]*len(l.of) < l.owned && l.of[n]+2 <= l.of[from]
}

// home picks, for an address of from, its Owner among its nodes when that node takes it.
func (l loads) home(from string) func(*Placement) string {
	return func(p *Placement) string {
		if h, _ := Owner(p.IP, p.Nodes); h != from && l.takes(h, from) {
			return h
		}
		return ""
	}
}

// anyTaker picks, when no address of from belongs on a node below the mean, the hash's choice
// among the address's nodes that take one.
func (l loads) anyTaker(from string) func(*Placement) string {
	return func(p *Placement) string {
		to, _ := Owner(p.IP, slices.DeleteFunc(slices.Clone(p.Nodes), func(n string) bool { return !l.takes(n, from) }))
		return to
	}
}

// smallest is the move of from's smallest address for which to names a node ("": none).
func smallest(ps []Placement, from string, to func(*Placement) string) (Move, bool) {
	var m Move
	found := false
	for i := range ps {
		p := &ps[i]
		if p.Owner != from || found && p.IP.Compare(m.IP) >= 0 {
			continue
		}
		if n := to(p); n != "" {
			m, found = Move{IP: p.IP, From: from, To: n}, true
		}
	}
	return m, found
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
