package allocator

import (
	"iter"
	"maps"
	"net/netip"
	"slices"
)

// SetInUse replaces the set of addresses a foreign host was found answering for (a speaker's
// probe of a pool's next addresses). Automatic allocation skips them while they are listed;
// an explicit request for one is still honoured (its owner asked for it), and a Service that
// already holds one keeps it: the finding is reported, never acted on. It returns whether an
// address left the set, so that Services waiting for one can be retried.
func (a *Allocator) SetInUse(ips []netip.Addr) (released bool) {
	next := make(map[netip.Addr]struct{}, len(ips))
	for _, ip := range ips {
		next[ip] = struct{}{}
	}
	for ip := range a.inUse {
		if _, ok := next[ip]; !ok {
			released = true
		}
	}
	a.inUse = next
	return released
}

// InUse lists the addresses set by SetInUse, sorted.
func (a *Allocator) InUse() []netip.Addr {
	return slices.SortedFunc(maps.Keys(a.inUse), netip.Addr.Compare)
}

// NextAddresses returns the addresses automatic allocation would hand out next from the named
// pool, lowest first, at most n per family: what the speakers probe before a Service gets one.
func (a *Allocator) NextAddresses(pool string, n int) []netip.Addr {
	p, ok := a.pools[pool]
	if !ok {
		return nil
	}
	var out []netip.Addr
	for _, f := range []Family{IPv4, IPv6} {
		count := 0
		for ip := range a.free(p, f) {
			if count == n {
				break
			}
			out = append(out, ip)
			count++
		}
	}
	return out
}

// free yields, lowest first, the addresses of family f in pool p that automatic allocation may
// hand out: held by no Service, not a filler of an avoidBuggyIPs pool, not in use by a
// foreign host. Each step is a search of the taken runs, whatever the size of the pool.
func (a *Allocator) free(p *poolState, f Family) iter.Seq[netip.Addr] {
	taken := a.taken
	if p.AvoidBuggyIPs {
		taken = a.takenBug
	}
	return func(yield func(netip.Addr) bool) {
		for _, r := range p.Ranges {
			if FamilyOf(r.First) != f {
				continue
			}
			for {
				ip, ok := taken.firstFree(r)
				if !ok {
					break
				}
				if _, foreign := a.inUse[ip]; !foreign && !yield(ip) {
					return
				}
				if ip == r.Last {
					break
				}
				r.First = ip.Next()
			}
		}
	}
}

// inUseFree counts the pool's addresses that no Service holds but a foreign host uses.
func (a *Allocator) inUseFree(p *poolState) int {
	n := 0
	for ip := range a.inUse {
		if _, held := a.holds.byIP[ip]; p.contains(ip) && a.ips[ip] == nil && !held {
			n++
		}
	}
	return n
}
