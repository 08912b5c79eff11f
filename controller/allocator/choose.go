package allocator

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
)

// choose picks addresses for req without changing anything, and the pool of each.
func (a *Allocator) choose(req *Request) ([]netip.Addr, []string, *Error) {
	if len(req.IPs) > 0 {
		return a.chooseRequested(req)
	}
	return a.chooseAuto(req)
}

func admits(p *poolState, req *Request) bool {
	return !p.HasServiceAllocation || slices.Contains(req.Selected, p.Name)
}

// chooseRequested checks explicitly requested addresses: each must be free or shareable, in a
// pool that serves the Service (one of the requested pools, if any are named). A dual-stack
// Service's two addresses may be in two pools.
func (a *Allocator) chooseRequested(req *Request) ([]netip.Addr, []string, *Error) {
	if err := a.requestedPoolsExist(req, false); err != nil { // whether they select it: per address, below
		return nil, nil, err
	}
	pools := make([]string, len(req.IPs))
	for i, ip := range req.IPs {
		names := a.PoolsContaining(ip)
		var serving []string
		for _, n := range names {
			if (len(req.Pools) == 0 || slices.Contains(req.Pools, n)) && admits(a.pools[n], req) {
				serving = append(serving, n)
			}
		}
		switch {
		case len(serving) > 0:
		case len(names) == 0:
			return nil, nil, fail(RequestedIPNotInAnyPool, "%s is not in any pool", ip)
		case len(req.Pools) > 0 && len(intersect(names, req.Pools)) == 0:
			return nil, nil, fail(RequestedIPNotInAnyPool, "%s is not in the requested pool %s (it is in %s)", ip, strings.Join(req.Pools, " or "), strings.Join(names, ", "))
		default:
			return nil, nil, fail(NotAllowedByPool, "%s is in pool %s, whose serviceAllocation (namespaces, namespaceSelectors, serviceSelectors) does not select this Service", ip, strings.Join(names, ", "))
		}
		if err := a.joinable(ip, req); err != nil {
			return nil, nil, err
		}
		if err := a.heldAgainst(ip, req); err != nil {
			return nil, nil, err
		}
		pools[i] = serving[0]
	}
	return slices.Clone(req.IPs), pools, nil
}

func intersect(a, b []string) []string {
	var both []string
	for _, x := range a {
		if slices.Contains(b, x) {
			both = append(both, x)
		}
	}
	return both
}

// chooseAuto picks, for each wanted family, the lowest free (or shareable, or held for it)
// address of the first pool in allocation order that has one: a dual-stack Service may take
// its families from two pools.
func (a *Allocator) chooseAuto(req *Request) ([]netip.Addr, []string, *Error) {
	candidates, err := a.candidates(req)
	if err != nil {
		return nil, nil, err
	}
	if held := a.claimedPool(req); held != "" {
		// The addresses kept for this Service come back from their pool, whatever the order.
		if i := slices.IndexFunc(candidates, func(p *poolState) bool { return p.Name == held }); i > 0 {
			candidates = append([]*poolState{candidates[i]}, slices.Delete(slices.Clone(candidates), i, i+1)...)
		}
	}
	var ips []netip.Addr
	var pools []string
	var missing []Family
	for _, f := range wantedFamilies(req) {
		if ip, pool, ok := a.pickFamily(candidates, f, req); ok {
			ips, pools = append(ips, ip), append(pools, pool)
		} else {
			missing = append(missing, f)
		}
	}
	if len(missing) == 0 || req.DualStack == PreferDualStack && len(ips) > 0 {
		return ips, pools, nil
	}
	err = a.explainNoAddress(candidates, missing)
	if err.Reason == PoolExhausted && a.keyHeldElsewhere(req, candidates) {
		err = fail(SharingConflict, "%s; sharing key %s is used in another namespace, and addresses are shared across namespaces only in pools with allowSharingAcrossNamespaces", err.Message, req.SharingKey)
	}
	return nil, nil, err
}

// requestedPoolsExist checks the pools a Service names: each exists (and, if selecting, selects
// it), and no two hold one family (each family comes from one of them).
func (a *Allocator) requestedPoolsExist(req *Request, selecting bool) *Error {
	for _, name := range req.Pools {
		p, ok := a.pools[name]
		switch {
		case !ok:
			return fail(NoMatchingPool, "the requested pool %s does not exist", name)
		case selecting && !admits(p, req):
			return fail(NotAllowedByPool, "the requested pool %s has a serviceAllocation (namespaces, namespaceSelectors, serviceSelectors) that does not select this Service", name)
		}
	}
	if len(req.Pools) < 2 {
		return nil
	}
	for _, f := range []Family{IPv4, IPv6} {
		var of []string
		for _, name := range req.Pools {
			if a.pools[name].hasFamily(f) {
				of = append(of, name)
			}
		}
		if len(of) > 1 {
			return fail(PoolsOfOneFamily, "the requested pools %s both have %s addresses: name one pool per family (an IPv4 pool and an IPv6 pool), or one pool", strings.Join(of, " and "), f)
		}
	}
	return nil
}

func (a *Allocator) candidates(req *Request) ([]*poolState, *Error) {
	if len(req.Pools) > 0 {
		if err := a.requestedPoolsExist(req, true); err != nil {
			return nil, err
		}
		var c []*poolState
		for _, p := range a.order { // allocation order, whatever order they are named in
			if slices.Contains(req.Pools, p.Name) {
				c = append(c, p)
			}
		}
		return c, nil
	}
	var c []*poolState
	for _, p := range a.order {
		if p.AutoAssign && admits(p, req) {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		if len(a.order) == 0 {
			return nil, fail(NoMatchingPool, "no IPAddressPool exists")
		}
		return nil, fail(NoMatchingPool, "no pool serves this Service automatically: each of the %d pools has autoAssign false or a serviceAllocation that does not select it", len(a.order))
	}
	return c, nil
}

// pickFamily picks one address of family f for req: the one held for it (addressHold) in any
// of the pools, else in the first pool that has one, one it may share or the lowest free.
func (a *Allocator) pickFamily(pools []*poolState, f Family, req *Request) (netip.Addr, string, bool) {
	for _, p := range pools { // each family's hold may be in another pool
		if ip, ok := a.claimable(req, f, p); ok {
			return ip, p.Name, true
		}
	}
	for _, p := range pools {
		ip, ok := a.shared(req, f, p)
		if !ok {
			ip, ok = a.lowestFree(p, f)
		}
		if ok {
			return ip, p.Name, true
		}
	}
	return netip.Addr{}, "", false
}

func (a *Allocator) lowestFree(p *poolState, f Family) (netip.Addr, bool) {
	for ip := range a.free(p, f) {
		return ip, true
	}
	return netip.Addr{}, false
}

// explainNoAddress tells apart pools that lack a family from pools that are full, for the
// families that could not be had: each pool serving the Service that has one of them is full
// of it.
func (a *Allocator) explainNoAddress(candidates []*poolState, missing []Family) *Error {
	var full []string
	for _, p := range candidates {
		var fams []Family
		for _, f := range missing {
			if p.hasFamily(f) {
				fams = append(fams, f)
			}
		}
		if len(fams) > 0 {
			full = append(full, a.describeFull(p, fams))
		}
	}
	if len(full) == 0 {
		names := make([]string, len(candidates))
		for i, p := range candidates {
			names[i] = p.Name
		}
		return fail(FamilyUnavailable, "no pool serving this Service has %s addresses (tried %s)", familyList(missing), strings.Join(names, ", "))
	}
	return fail(PoolExhausted, "%s", strings.Join(full, "; "))
}

func (a *Allocator) describeFull(p *poolState, fams []Family) string {
	usable := new(big.Int)
	for _, f := range fams {
		if p.hasFamily(f) {
			usable.Add(usable, p.size[famIndex(f)])
			if f == IPv4 {
				usable.Sub(usable, big.NewInt(p.buggy))
			}
		}
	}
	msg := fmt.Sprintf("pool %s is exhausted: all %s usable %s addresses are assigned", p.Name, usable, familyList(fams))
	var also []string
	if n, macs := a.inUseFree(p); n > 0 {
		also = append(also, fmt.Sprintf("in use by foreign hosts (%d, answering from %s; listed in the pool's status.inUse; %s)", n, NamedMACs(macs), DisableProbingHint))
	}
	if n := p.held[0] + p.held[1]; n > 0 {
		also = append(also, fmt.Sprintf("held for deleted Services (%d, listed in the pool's status.holds until they end; addressHold keeps them)", n))
	}
	if len(also) > 0 {
		msg = fmt.Sprintf("pool %s is exhausted: of its %s usable %s addresses, those no Service holds are %s", p.Name, usable, familyList(fams), strings.Join(also, " or "))
	}
	return msg
}

func familyList(fams []Family) string {
	s := make([]string, len(fams))
	for i, f := range fams {
		s[i] = f.String()
	}
	return strings.Join(s, "+")
}

// PoolsFor names the pools a request could be served from, for telling pools how many
// Services wait on them.
func (a *Allocator) PoolsFor(req Request) []string {
	if len(req.IPs) > 0 {
		var names []string
		for _, ip := range req.IPs {
			for _, n := range a.PoolsContaining(ip) {
				if !slices.Contains(names, n) && (len(req.Pools) == 0 || slices.Contains(req.Pools, n)) {
					names = append(names, n)
				}
			}
		}
		return names
	}
	candidates, err := a.candidates(&req)
	if err != nil {
		return nil
	}
	names := make([]string, len(candidates))
	for i, p := range candidates {
		names[i] = p.Name
	}
	return names
}
