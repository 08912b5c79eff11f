package allocator

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// Allocator hands out addresses from pools to Services. It is not safe for concurrent use:
// the caller serialises calls.
type Allocator struct {
	pools    map[string]*poolState
	order    []*poolState // allocation order: pools with serviceAllocation by priority, then the rest, by name
	taken    *runs        // every address in use
	takenBug *runs        // the same, joined across .0/.255 gaps, searched by avoidBuggyIPs pools
	ips      map[netip.Addr]*holding
	byKey    map[string]map[netip.Addr]struct{} // sharing key → addresses used under it
	services map[string]*assignment
	inUse    map[netip.Addr]string // answered for by a foreign host (its MAC): skipped by automatic allocation
	holds    holds                 // addresses kept for deleted Services, in the taken runs too
}

// assignment is what one Service holds and the request it was made for.
type assignment struct {
	req   Request
	ips   []netip.Addr
	pools []string // per address: the pool it belongs to, "" if none
}

// New returns an allocator with no pools and no assignments.
func New() *Allocator {
	a := &Allocator{
		pools:    map[string]*poolState{},
		taken:    newRuns(nil),
		ips:      map[netip.Addr]*holding{},
		byKey:    map[string]map[netip.Addr]struct{}{},
		services: map[string]*assignment{},
	}
	a.holds.init()
	// A buggy address given out by explicit request (or held since) is taken, not filler.
	a.takenBug = newRuns(func(x netip.Addr) bool {
		_, held := a.holds.byIP[x]
		return isBuggy(x) && a.ips[x] == nil && !held
	})
	return a
}

// Assignment returns what service holds.
func (a *Allocator) Assignment(service string) (Assignment, bool) {
	asg, ok := a.services[service]
	if !ok {
		return Assignment{}, false
	}
	return Assignment{IPs: slices.Clone(asg.ips), Pools: slices.Clone(asg.pools), SharingKey: asg.req.SharingKey}, true
}

// Held returns the request a Service's addresses were given or restored for.
func (a *Allocator) Held(service string) (Request, bool) {
	asg, ok := a.services[service]
	if !ok {
		return Request{}, false
	}
	return asg.req, true
}

func (a *Allocator) current(service string) Assignment {
	asg, _ := a.Assignment(service)
	return asg
}

// Allocate gives req's Service addresses, or returns why it cannot. A Service that holds
// addresses keeps them unless its request changed so that they no longer fit; if the new
// request cannot be met, it keeps what it has and the error says so. A Service given
// addresses has no hold any more: it got its held addresses back, or asked for others.
func (a *Allocator) Allocate(req Request) (Assignment, error) {
	if cur, ok := a.services[req.Service]; ok {
		if a.canKeep(cur, &req) {
			a.rekey(cur, req)
			a.dropHoldsFor(req.Service)
			return a.current(req.Service), nil
		}
	}
	ips, pools, err := a.choose(&req)
	if err != nil {
		if cur, ok := a.services[req.Service]; ok {
			if why := a.follow(cur, req); why != nil {
				// Keeping it would put two sharing keys, or one port twice, on one address.
				a.Release(req.Service)
				err.Message += fmt.Sprintf("; released %s: %s", commaAddrs(cur.ips), why.Message)
			} else {
				err.Message += fmt.Sprintf("; keeping %s until the request can be met", commaAddrs(cur.ips))
			}
		}
		return Assignment{}, err
	}
	a.Release(req.Service)
	a.assign(&assignment{req: req, ips: ips, pools: pools})
	a.dropHoldsFor(req.Service)
	return a.current(req.Service), nil
}

// Restore records addresses a Service already holds (read back from its status after a
// restart), in or out of any pool. It fails only when another Service holds one of them and
// may not share it.
func (a *Allocator) Restore(req Request, ips []netip.Addr) (Assignment, error) {
	for _, ip := range ips {
		if err := a.usable(ip, &req); err != nil {
			return Assignment{}, err
		}
	}
	a.Release(req.Service)
	a.assign(&assignment{req: req, ips: slices.Clone(ips), pools: a.poolsHolding(ips, nil, req.Pools)})
	a.dropHoldsFor(req.Service)
	return a.current(req.Service), nil
}

// Satisfies reports whether addresses read back from a Service's status meet its request as
// it is now. One that does not was edited after its status was written (a new pool, a new
// address), so on a restart it yields a contested address to a Service that does.
func (a *Allocator) Satisfies(req Request, ips []netip.Addr) bool {
	return matchesRequest(&assignment{req: req, ips: ips, pools: a.poolsHolding(ips, nil, req.Pools)}, &req)
}

// Release frees what service holds and returns the addresses no Service uses any more.
func (a *Allocator) Release(service string) []netip.Addr {
	asg, ok := a.services[service]
	if !ok {
		return nil
	}
	delete(a.services, service)
	var freed []netip.Addr
	for _, ip := range asg.ips {
		h := a.ips[ip]
		delete(h.users, service)
		if len(h.users) > 0 {
			a.rekeyToStale(ip, h)
			continue
		}
		delete(a.ips, ip)
		a.unindexKey(h.key, ip)
		a.taken.remove(ip)
		a.takenBug.remove(ip)
		for _, p := range a.order {
			p.count(ip, -1)
		}
		freed = append(freed, ip)
	}
	return freed
}

// rekeyToStale gives an address held by stale holds alone the key of one of them: it sat beside
// Services of another key, which have left, so only the stale hold's key may join it now.
func (a *Allocator) rekeyToStale(ip netip.Addr, h *holding) {
	key := ""
	for _, name := range slices.Sorted(maps.Keys(h.users)) {
		u := h.users[name]
		if !u.req.Stale {
			return
		}
		if key == "" {
			key = u.req.SharingKey
		}
	}
	if h.key != key {
		a.unindexKey(h.key, ip)
		h.key = key
		a.indexKey(h.key, ip)
	}
}

func (a *Allocator) assign(asg *assignment) {
	a.services[asg.req.Service] = asg
	for _, ip := range asg.ips {
		h := a.ips[ip]
		if h == nil {
			a.endHold(ip) // taken by a Service now: by the one it was kept for, or by request
			h = &holding{key: asg.req.SharingKey, users: map[string]*assignment{}}
			a.ips[ip] = h
			a.indexKey(h.key, ip)
			a.taken.add(ip)
			a.takenBug.add(ip)
			for _, p := range a.order {
				p.count(ip, 1)
			}
		}
		h.users[asg.req.Service] = asg
	}
}

// rekey stores an updated request for an assignment that still fits it. An address the
// Service holds alone follows a change of its sharing key.
func (a *Allocator) rekey(asg *assignment, req Request) {
	asg.req = req
	for _, ip := range asg.ips {
		h := a.ips[ip]
		h.users[req.Service] = asg
		if h.key != req.SharingKey {
			a.unindexKey(h.key, ip)
			h.key = req.SharingKey
			a.indexKey(h.key, ip)
		}
	}
}

func (a *Allocator) indexKey(key string, ip netip.Addr) {
	if key == "" {
		return
	}
	if a.byKey[key] == nil {
		a.byKey[key] = map[netip.Addr]struct{}{}
	}
	a.byKey[key][ip] = struct{}{}
}

func (a *Allocator) unindexKey(key string, ip netip.Addr) {
	delete(a.byKey[key], ip)
	if len(a.byKey[key]) == 0 {
		delete(a.byKey, key)
	}
}

// canKeep reports whether what a Service holds still meets its request, sharing included.
func (a *Allocator) canKeep(cur *assignment, req *Request) bool {
	return matchesRequest(cur, req) && a.sharingBroken(cur, req) == nil
}

// sharedWithOthers: a Service other than service holds h (stale holds do not count).
func (a *Allocator) sharedWithOthers(h *holding, service string) bool {
	for name, u := range h.users {
		if name != service && !u.req.Stale {
			return true
		}
	}
	return false
}

// Follow keeps what req's Service holds, without moving it, for req as the Service asks now:
// its sharing key, ports and traffic policy then decide who may share the addresses. It
// returns why they can no longer be shared under req (nothing changed then), or nil.
func (a *Allocator) Follow(req Request) error {
	cur, ok := a.services[req.Service]
	if !ok {
		return nil
	}
	if err := a.follow(cur, req); err != nil {
		return err // not a nil *Error in an error
	}
	return nil
}

func (a *Allocator) follow(cur *assignment, req Request) *Error {
	if err := a.sharingBroken(cur, &req); err != nil {
		return err
	}
	a.rekey(cur, req)
	return nil
}

// sharingBroken says why req may no longer share an address its Service holds with the other
// Services holding it (its sharing key, ports or traffic policy changed), or nil.
func (a *Allocator) sharingBroken(cur *assignment, req *Request) *Error {
	for _, ip := range cur.ips {
		h := a.ips[ip]
		if !a.sharedWithOthers(h, req.Service) {
			continue
		}
		// Another Service holds ip, so usable judges the key too.
		if err := a.usable(ip, req); err != nil {
			return err
		}
	}
	return nil
}

// matchesRequest: the addresses are the requested ones, from the requested pools, of the
// requested families (sharing aside). An orphaned address is in no pool, and stays.
func matchesRequest(cur *assignment, req *Request) bool {
	if len(req.IPs) > 0 && !sameAddrs(cur.ips, req.IPs) {
		return false
	}
	for _, p := range cur.pools {
		if len(req.Pools) > 0 && p != "" && !slices.Contains(req.Pools, p) {
			return false
		}
	}
	return len(req.IPs) > 0 || familiesFit(cur.ips, req)
}

// familiesFit: the held families are what the request's ipFamilyPolicy asks for. A
// PreferDualStack Service that got one family keeps it.
func familiesFit(ips []netip.Addr, req *Request) bool {
	held := map[Family]bool{}
	for _, ip := range ips {
		held[FamilyOf(ip)] = true
	}
	want := wantedFamilies(req)
	switch req.DualStack {
	case RequireDualStack:
		return len(held) == 2
	case PreferDualStack:
		return held[want[0]] || held[want[len(want)-1]]
	default:
		return len(held) == 1 && held[want[0]]
	}
}

func wantedFamilies(req *Request) []Family {
	fams := req.Families
	if len(fams) == 0 {
		fams = []Family{IPv4}
	}
	if req.DualStack == SingleStack {
		return fams[:1]
	}
	if len(fams) == 1 {
		other := IPv6
		if fams[0] == IPv6 {
			other = IPv4
		}
		fams = []Family{fams[0], other}
	}
	return fams
}

func sameAddrs(a, b []netip.Addr) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.SortFunc(x, netip.Addr.Compare)
	slices.SortFunc(y, netip.Addr.Compare)
	return slices.Equal(x, y)
}

// commaAddrs lists addresses for a message: "10.0.0.200,2001:db8::1".
func commaAddrs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ",")
}
