package allocator

import (
	"fmt"
	"iter"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// SetInUse replaces the set of addresses a foreign host was found answering for (a speaker's
// probe of a pool's next addresses), each with the MAC that answered. Automatic allocation
// skips them while they are listed; an explicit request for one is still honoured (its owner
// asked for it), and a Service that already holds one keeps it: the finding is reported, never
// acted on. It returns whether an address left the set, so that Services waiting for one can
// be retried.
func (a *Allocator) SetInUse(found map[netip.Addr]string) (released bool) {
	for ip := range a.inUse {
		if _, ok := found[ip]; !ok {
			released = true
		}
	}
	a.inUse = maps.Clone(found)
	return released
}

// Found is what SetInUse was given last: each address a foreign host answers for, and its MAC.
func (a *Allocator) Found() map[netip.Addr]string { return maps.Clone(a.inUse) }

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

// inUseFree counts the pool's addresses that automatic allocation could hand out but for a
// foreign host answering for them (no Service holds them, no hold keeps them, not a filler of
// an avoidBuggyIPs pool), and names the MACs that answer for them, sorted.
func (a *Allocator) inUseFree(p *poolState) (n int, macs []string) {
	for ip, mac := range a.inUse {
		_, held := a.holds.byIP[ip]
		if p.contains(ip) && a.ips[ip] == nil && !held && !(p.AvoidBuggyIPs && isBuggy(ip)) {
			n++
			macs = append(macs, mac)
		}
	}
	slices.Sort(macs)
	return n, slices.Compact(macs)
}

// DisableProbingHint is what to do when answers hold addresses back that no host uses: a host
// answering from a new MAC for every few addresses is never taken for a proxy answerer, so
// the probes cannot tell its answers from real hosts'.
const DisableProbingHint = "probing cannot tell false answers from real hosts: " +
	"if no host holds these addresses, set the pool's spec.conflictProbing: Disabled"

// maxNamedMACs is how many MACs a message names before it counts the rest.
const maxNamedMACs = 8

// NamedMACs names the MACs, the first maxNamedMACs of them, and counts the rest:
// "2 MACs: a, b", "10 MACs: a, ..., h and 2 more".
func NamedMACs(macs []string) string {
	noun := "MACs"
	if len(macs) == 1 {
		noun = "MAC"
	}
	s := fmt.Sprintf("%d %s: %s", len(macs), noun, strings.Join(macs[:min(len(macs), maxNamedMACs)], ", "))
	if len(macs) > maxNamedMACs {
		s += fmt.Sprintf(" and %d more", len(macs)-maxNamedMACs)
	}
	return s
}
