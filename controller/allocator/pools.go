package allocator

import (
	"cmp"
	"maps"
	"math/big"
	"net/netip"
	"slices"
	"time"

	"github.com/portico-lb/portico/rules"
)

// Pool is an address pool as the allocator sees it.
type Pool struct {
	Name   string
	Ranges []rules.Range
	// AutoAssign lets the pool serve Services that asked for no pool and no address.
	AutoAssign bool
	// AvoidBuggyIPs keeps IPv4 addresses ending in .0 and .255 from automatic allocation.
	AvoidBuggyIPs bool
	// HasServiceAllocation: the pool serves only the Services whose Request.Selected names it,
	// and is tried before pools without one, by Priority (lower first).
	HasServiceAllocation bool
	Priority             int32
	// SharingAcrossNamespaces lets Services of different namespaces share an address of
	// the pool under one sharing key; otherwise a key only joins Services of one namespace.
	SharingAcrossNamespaces bool
	// HoldFor keeps an address a deleted Service let go for it that long (Hold); 0: never.
	HoldFor time.Duration
}

// poolState is a pool with its counts.
type poolState struct {
	Pool
	size     [2]*big.Int // addresses per family (index famIndex)
	buggy    int64       // IPv4 buggy addresses, counted only with AvoidBuggyIPs
	assigned [2]int64    // addresses in use, per family
	// assignedBuggy counts buggy addresses in use (given by explicit request), so they are not
	// subtracted twice from what is available.
	assignedBuggy int64
	held          [2]int64 // addresses held for deleted Services, whichever pool holds them
	heldBuggy     int64
	holds         int // holds this pool made (at most the caller's maxHolds)
}

func famIndex(f Family) int {
	if f == IPv4 {
		return 0
	}
	return 1
}

func newPoolState(p Pool) *poolState {
	ps := &poolState{Pool: p, size: [2]*big.Int{new(big.Int), new(big.Int)}}
	ps.Ranges = slices.Clone(p.Ranges)
	slices.SortFunc(ps.Ranges, func(a, b rules.Range) int { return a.First.Compare(b.First) })
	for _, r := range ps.Ranges {
		ps.size[famIndex(FamilyOf(r.First))].Add(ps.size[famIndex(FamilyOf(r.First))], r.Size())
		if p.AvoidBuggyIPs {
			ps.buggy += buggyIn(r)
		}
	}
	return ps
}

func (p *poolState) contains(ip netip.Addr) bool {
	for _, r := range p.Ranges {
		if r.Contains(ip) {
			return true
		}
	}
	return false
}

func (p *poolState) hasFamily(f Family) bool { return p.size[famIndex(f)].Sign() > 0 }

// count adds delta to the pool's count of assigned addresses for ip, when ip is in the pool.
func (p *poolState) count(ip netip.Addr, delta int64) {
	p.countIn(&p.assigned, &p.assignedBuggy, ip, delta)
}

// countHeld does the same for addresses held for deleted Services.
func (p *poolState) countHeld(ip netip.Addr, delta int64) {
	p.countIn(&p.held, &p.heldBuggy, ip, delta)
}

func (p *poolState) countIn(perFamily *[2]int64, buggy *int64, ip netip.Addr, delta int64) {
	if !p.contains(ip) {
		return
	}
	perFamily[famIndex(FamilyOf(ip))] += delta
	if p.AvoidBuggyIPs && isBuggy(ip) {
		*buggy += delta
	}
}

// Stats are a pool's counts.
type Stats struct {
	Size      [2]*big.Int // per family: [0] IPv4, [1] IPv6
	Assigned  [2]int64
	Held      [2]int64 // held for deleted Services: neither assigned nor available
	Available [2]*big.Int
	// InUse counts the available addresses a foreign host answers for (SetInUse), which
	// automatic allocation skips; InUseMACs names those hosts' MACs, sorted.
	InUse     int64
	InUseMACs []string
}

// Stats returns the named pool's counts.
func (a *Allocator) Stats(pool string) (Stats, bool) {
	p, ok := a.pools[pool]
	if !ok {
		return Stats{}, false
	}
	s := Stats{Size: p.size, Assigned: p.assigned, Held: p.held}
	for i := range 2 {
		avail := new(big.Int).Sub(p.size[i], big.NewInt(p.assigned[i]+p.held[i]))
		if i == 0 {
			avail.Sub(avail, big.NewInt(p.buggy-p.assignedBuggy-p.heldBuggy))
		}
		s.Available[i] = avail
	}
	n, macs := a.inUseFree(p)
	s.InUse, s.InUseMACs = int64(n), macs
	return s, true
}

// SetPools replaces the pool configuration. Assignments are kept whatever the pools now say:
// an address left outside every pool stays assigned and is reported as orphaned. Holds are
// not: one whose pool is gone, no longer holds released addresses or no longer contains the
// address ends. It returns the Services whose pool changed (to another pool, or to none).
func (a *Allocator) SetPools(pools []Pool) (moved []string) {
	a.pools = make(map[string]*poolState, len(pools))
	a.order = a.order[:0]
	for _, p := range pools {
		ps := newPoolState(p)
		a.pools[p.Name] = ps
		a.order = append(a.order, ps)
	}
	slices.SortFunc(a.order, func(x, y *poolState) int {
		if x.HasServiceAllocation != y.HasServiceAllocation {
			if x.HasServiceAllocation {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(x.Priority, y.Priority), cmp.Compare(x.Name, y.Name))
	})
	for ip := range a.ips {
		for _, p := range a.order {
			p.count(ip, 1)
		}
	}
	for ip, x := range maps.Clone(a.holds.byIP) {
		if p := a.pools[x.Pool]; p == nil || p.HoldFor <= 0 || !p.contains(ip) {
			a.forgetHold(ip) // the new pools have not counted it
			continue
		}
		a.pools[x.Pool].holds++
		for _, p := range a.order {
			p.countHeld(ip, 1)
		}
	}
	for svc, asg := range a.services {
		if p := a.poolsHolding(asg.ips, asg.pools, asg.req.Pools); !slices.Equal(p, asg.pools) {
			asg.pools = p
			moved = append(moved, svc)
		}
	}
	slices.Sort(moved)
	return moved
}

// poolsHolding names, for each of ips, the pool that holds it: its current pool (current[i],
// if given) if it still does, else the first requested pool that does, else the first in
// allocation order, else "" (orphaned).
func (a *Allocator) poolsHolding(ips []netip.Addr, current, requested []string) []string {
	pools := make([]string, len(ips))
	for i, ip := range ips {
		names := requested
		if i < len(current) {
			names = append([]string{current[i]}, requested...)
		}
		pools[i] = a.firstHolding(ip, names)
	}
	return pools
}

func (a *Allocator) firstHolding(ip netip.Addr, names []string) string {
	for _, name := range names {
		if p, ok := a.pools[name]; ok && p.contains(ip) {
			return name
		}
	}
	for _, p := range a.order {
		if p.contains(ip) {
			return p.Name
		}
	}
	return ""
}

// PoolsContaining names the pools holding ip, in allocation order.
func (a *Allocator) PoolsContaining(ip netip.Addr) []string {
	var names []string
	for _, p := range a.order {
		if p.contains(ip) {
			names = append(names, p.Name)
		}
	}
	return names
}
