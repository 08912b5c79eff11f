package allocator

import (
	"fmt"
	"maps"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portico-lb/portico/rules"
)

// The property test and the fuzz target drive random sequences of pool edits, requests,
// restores and releases over small, overlapping pools, and check the invariants after every
// step against a brute-force recount.

var propertyPools = [][]Pool{
	{
		{Name: "a", Ranges: mustRanges("198.51.100.0-198.51.100.5"), AutoAssign: true, SharingAcrossNamespaces: true, HoldFor: time.Minute},
		{Name: "b", Ranges: mustRanges("198.51.100.4/30", "2001:db8::/125"), AutoAssign: true, AvoidBuggyIPs: true, HoldFor: time.Minute},
		{Name: "c", Ranges: mustRanges("203.0.113.254-203.0.114.1", "2001:db8::6-2001:db8::9"), AvoidBuggyIPs: true, HasServiceAllocation: true, Priority: 1},
	},
	{
		{Name: "a", Ranges: mustRanges("198.51.100.2-198.51.100.3"), AutoAssign: true},
		{Name: "c", Ranges: mustRanges("203.0.113.255-203.0.114.0", "2001:db8::/126"), AutoAssign: true, HasServiceAllocation: true, SharingAcrossNamespaces: true, HoldFor: time.Minute},
	},
	{},
}

func mustRanges(entries ...string) []rules.Range {
	rs, errs := rules.ParsePool(entries)
	if len(errs) > 0 {
		panic(fmt.Sprint(errs))
	}
	return rs
}

// step applies one operation chosen by the next bytes of next().
func step(a *Allocator, next func() byte) string {
	n := next() % 12
	svc := fmt.Sprintf("ns%d/s%d", n%3, n)
	req := Request{Service: svc}
	switch next() % 3 {
	case 1:
		req.Families, req.DualStack = []Family{IPv6}, SingleStack
	case 2:
		req.Families, req.DualStack = []Family{IPv4, IPv6}, DualStack(1+next()%2)
	}
	if k := next() % 4; k > 0 {
		req.SharingKey = fmt.Sprintf("k%d", k%2)
		req.Ports = []Port{{Protocol: "TCP", Port: int32(next() % 3)}}
		req.Local = next()%4 == 0
		req.Selector = fmt.Sprintf("app=%d", next()%2)
	}
	if next()%3 == 0 {
		req.Selected = []string{"c"}
	}
	switch next() % 8 {
	case 0:
		req.Pools = []string{string(rune('a' + next()%4))}
	case 1:
		req.IPs = []netip.Addr{netip.AddrFrom4([4]byte{198, 51, 100, next() % 8})}
	}
	switch op := next() % 12; {
	case op < 5:
		_, err := a.Allocate(req)
		return fmt.Sprintf("allocate %+v: %v", req, err)
	case op < 6:
		a.Release(svc)
		return "release " + svc
	case op < 7:
		a.HoldReleased(svc, propertyNow, 3)
		return "delete (hold) " + svc
	case op == 10:
		a.Expire(propertyNow.Add(time.Duration(next()%3) * time.Minute))
		return "expire"
	case op == 11:
		// A hold read back after a restart, for one of the Services, on one of the addresses.
		x := Hold{IP: netip.AddrFrom4([4]byte{198, 51, 100, next() % 8}), Service: svc, Pool: string(rune('a' + next()%3)), Until: propertyNow.Add(time.Minute)}
		return fmt.Sprintf("restore hold %+v: %t", x, a.RestoreHold(x))
	case op < 8:
		ip := netip.AddrFrom4([4]byte{198, 51, 100, next() % 8})
		_, err := a.Restore(req, []netip.Addr{ip})
		return fmt.Sprintf("restore %+v %s: %v", req, ip, err)
	default:
		a.SetPools(propertyPools[next()%byte(len(propertyPools))])
		return "set pools"
	}
}

var propertyNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// checkedStep runs one step and checks the invariants after it, and that an allocation joined
// Services of different namespaces on an address only where its pools allow it (Restore and
// pool edits keep such sharing, so only a new pair made by Allocate is checked).
func checkedStep(t *testing.T, a *Allocator, next func() byte) string {
	t.Helper()
	before := crossNamespacePairs(a)
	heldBefore := maps.Clone(a.holds.byIP)
	what := step(a, next)
	checkInvariants(t, a)
	if strings.HasPrefix(what, "allocate") {
		// A held address goes only to its namespace: to the Service it is kept for, to its
		// sharing key, or by explicit request.
		for ip, x := range heldBefore {
			for svc := range a.ips[ip].usersOrNil() {
				if !sameNamespace(svc, x.Service) {
					t.Errorf("%s, held for %s, went to %s", ip, x.Service, svc)
				}
			}
		}
		for pair, ip := range crossNamespacePairs(a) {
			if _, old := before[pair]; !old && !a.sharesAcrossNamespaces(ip) {
				t.Errorf("%s: a new cross-namespace share of %s, whose pools keep sharing inside a namespace", pair, ip)
			}
		}
	}
	return what
}

func crossNamespacePairs(a *Allocator) map[string]netip.Addr {
	pairs := map[string]netip.Addr{}
	for ip, h := range a.ips {
		for x := range h.users {
			for y := range h.users {
				if x < y && !sameNamespace(x, y) {
					pairs[ip.String()+" "+x+" "+y] = ip
				}
			}
		}
	}
	return pairs
}

func checkInvariants(t *testing.T, a *Allocator) {
	t.Helper()
	held := map[netip.Addr][]*assignment{}
	for svc, asg := range a.services {
		if asg.req.Service != svc {
			t.Fatalf("assignment of %s records request of %s", svc, asg.req.Service)
		}
		for _, ip := range asg.ips {
			held[ip] = append(held[ip], asg)
		}
		if want := a.poolsHolding(asg.ips, asg.pools, asg.req.Pools); !slices.Equal(want, asg.pools) {
			t.Fatalf("%s holds %v in pools %q, but the pools holding them are %q", svc, asg.ips, asg.pools, want)
		}
		for i, ip := range asg.ips {
			if p := a.pools[asg.pools[i]]; asg.pools[i] != "" && (p == nil || !p.contains(ip)) {
				t.Fatalf("%s holds %s in pool %q, which does not contain it", svc, ip, asg.pools[i])
			}
		}
	}
	if len(held) != len(a.ips) {
		t.Fatalf("%d addresses held by Services, %d recorded", len(held), len(a.ips))
	}
	for ip, users := range held {
		h := a.ips[ip]
		if h == nil || len(h.users) != len(users) {
			t.Fatalf("%s: users %d, recorded %v", ip, len(users), h)
		}
		for i, x := range users {
			if x.req.SharingKey != h.key {
				t.Fatalf("%s held under key %q by %s with key %q", ip, h.key, x.req.Service, x.req.SharingKey)
			}
			for _, y := range users[i+1:] {
				if x.req.SharingKey == "" || portClash(x.req.Ports, y.req.Ports) != nil ||
					(x.req.Local || y.req.Local) && !(x.req.Local && y.req.Local && x.req.Selector == y.req.Selector) {
					t.Fatalf("%s held by %s and %s, which may not share it", ip, x.req.Service, y.req.Service)
				}
			}
		}
		for _, s := range []*runs{a.taken, a.takenBug} {
			if _, ok := s.containing(ip); !ok {
				t.Fatalf("%s is held but free in the runs", ip)
			}
		}
	}
	kept := map[netip.Addr]bool{}
	for ip, x := range a.holds.byIP {
		kept[ip] = true
		p := a.pools[x.Pool]
		switch {
		case x.IP != ip:
			t.Fatalf("hold of %s indexed under %s", x.IP, ip)
		case a.ips[ip] != nil:
			t.Fatalf("%s is held for %s and assigned to a Service", ip, x.Service)
		case a.services[x.Service] != nil:
			t.Fatalf("%s is held for %s, which holds addresses", ip, x.Service)
		case p == nil || p.HoldFor <= 0 || !p.contains(ip):
			t.Fatalf("%s is held in pool %s, which does not hold it", ip, x.Pool)
		}
		if _, ok := a.taken.containing(ip); !ok {
			t.Fatalf("%s is held but free in the runs", ip)
		}
	}
	// every run holds only taken addresses (and, in takenBug, fillers) and is maximal
	a.taken.tree.Ascend(func(r run) bool {
		for x := r.first; x.Compare(r.last) <= 0; x = x.Next() {
			if a.ips[x] == nil && !kept[x] {
				t.Fatalf("run %v-%v covers free %s", r.first, r.last, x)
			}
		}
		if a.ips[r.last.Next()] != nil || kept[r.last.Next()] {
			t.Fatalf("run %v-%v is not maximal", r.first, r.last)
		}
		return true
	})
	var prev *run
	a.takenBug.tree.Ascend(func(r run) bool {
		for x := r.first; x.Compare(r.last) <= 0; x = x.Next() {
			if a.ips[x] == nil && !kept[x] && !a.takenBug.filler(x) {
				t.Fatalf("buggy-aware run %v-%v covers free %s", r.first, r.last, x)
			}
		}
		if a.takenBug.filler(r.first) || a.takenBug.filler(r.last) {
			t.Fatalf("buggy-aware run %v-%v starts or ends with a filler", r.first, r.last)
		}
		if prev != nil && prev.last.BitLen() == r.first.BitLen() && a.takenBug.joinable(prev.last, r.first) {
			t.Fatalf("buggy-aware runs %v-%v and %v-%v should be one", prev.first, prev.last, r.first, r.last)
		}
		prev = &r
		return true
	})
	for _, p := range a.order {
		var assigned [2]int64
		var assignedBuggy int64
		for ip := range held {
			if p.contains(ip) {
				assigned[famIndex(FamilyOf(ip))]++
				if p.AvoidBuggyIPs && isBuggy(ip) {
					assignedBuggy++
				}
			}
		}
		if assigned != p.assigned || assignedBuggy != p.assignedBuggy {
			t.Fatalf("pool %s counts %v/%d, recount %v/%d", p.Name, p.assigned, p.assignedBuggy, assigned, assignedBuggy)
		}
		var heldHere [2]int64
		var heldBuggy int64
		holds := 0
		for ip, x := range a.holds.byIP {
			if p.contains(ip) {
				heldHere[famIndex(FamilyOf(ip))]++
				if p.AvoidBuggyIPs && isBuggy(ip) {
					heldBuggy++
				}
			}
			if x.Pool == p.Name {
				holds++
			}
		}
		if heldHere != p.held || heldBuggy != p.heldBuggy || holds != p.holds {
			t.Fatalf("pool %s counts held %v/%d, %d holds; recount %v/%d, %d", p.Name, p.held, p.heldBuggy, p.holds, heldHere, heldBuggy, holds)
		}
		var buggy int64
		for _, r := range p.Ranges {
			for x := r.First; x.IsValid() && x.Compare(r.Last) <= 0; x = x.Next() {
				if p.AvoidBuggyIPs && isBuggy(x) {
					buggy++
				}
			}
		}
		if buggy != p.buggy {
			t.Fatalf("pool %s counts %d buggy addresses, recount %d", p.Name, p.buggy, buggy)
		}
		s, _ := a.Stats(p.Name)
		want := new(big.Int).Sub(p.size[0], big.NewInt(assigned[0]+heldHere[0]+buggy-assignedBuggy-heldBuggy))
		if s.Available[0].Cmp(want) != 0 {
			t.Fatalf("pool %s: %s IPv4 available, recount %s", p.Name, s.Available[0], want)
		}
	}
}

// checkLowestFree: what an exclusive Service gets automatically is the lowest usable address.
func checkLowestFree(t *testing.T, a *Allocator, asg Assignment) {
	t.Helper()
	for i, got := range asg.IPs {
		p := a.pools[asg.Pools[i]]
		for _, r := range p.Ranges {
			for x := r.First; x.IsValid() && x.Compare(r.Last) <= 0 && x.Less(got); x = x.Next() {
				if FamilyOf(x) == FamilyOf(got) && a.ips[x] == nil && !(p.AvoidBuggyIPs && isBuggy(x)) {
					t.Fatalf("got %s from pool %s, but %s is free", got, p.Name, x)
				}
			}
		}
	}
}

func TestRandomSequencesKeepInvariants(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		a := New()
		a.SetPools(propertyPools[0])
		for i := range 200 {
			what := checkedStep(t, a, func() byte { return byte(rng.Uint32()) })
			if t.Failed() {
				t.Fatalf("seed %d step %d: %s", seed, i, what)
			}
		}
	}
}

func TestLowestFreeFirst(t *testing.T) {
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 11))
		a := New()
		a.SetPools(propertyPools[0])
		for range 100 {
			svc := fmt.Sprintf("ns/s%d", rng.IntN(20))
			if rng.IntN(3) == 0 {
				a.Release(svc)
				continue
			}
			a.Release(svc)
			req := Request{Service: svc, Selected: []string{"c"}}
			if rng.IntN(2) == 0 {
				req.Families = []Family{IPv6}
			}
			if asg, err := a.Allocate(req); err == nil {
				checkLowestFree(t, a, asg)
			}
		}
	}
}

func FuzzAllocator(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
	f.Add([]byte{0, 0, 0, 3, 1, 0, 0, 0, 1, 5, 9, 9, 9, 9, 9, 9, 9, 9, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		a := New()
		a.SetPools(propertyPools[0])
		i := 0
		next := func() byte {
			if i >= len(data) {
				return 0
			}
			i++
			return data[i-1]
		}
		for i < len(data) {
			what := checkedStep(t, a, next)
			if t.Failed() {
				t.Fatalf("after %s", what)
			}
		}
	})
}

func (h *holding) usersOrNil() map[string]*assignment {
	if h == nil {
		return nil
	}
	return h.users
}
