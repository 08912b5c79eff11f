package allocator

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
)

// choose picks addresses for req without changing anything.
func (a *Allocator) choose(req *Request) ([]netip.Addr, string, *Error) {
	if len(req.IPs) > 0 {
		return a.chooseRequested(req)
	}
	return a.chooseAuto(req)
}

func admits(p *poolState, req *Request) bool {
	return !p.HasServiceAllocation || slices.Contains(req.Selected, p.Name)
}

// chooseRequested checks explicitly requested addresses: each must be free or shareable, and
// all must be in one pool that serves the Service (the requested pool, if one is named).
func (a *Allocator) chooseRequested(req *Request) ([]netip.Addr, string, *Error) {
	if req.Pool != "" {
		if _, ok := a.pools[req.Pool]; !ok {
			return nil, "", fail(NoMatchingPool, "the requested pool %s does not exist", req.Pool)
		}
	}
	var common []string // pools serving the Service that hold every address so far
	for i, ip := range req.IPs {
		names := a.PoolsContaining(ip)
		var serving []string
		for _, n := range names {
			if (req.Pool == "" || n == req.Pool) && admits(a.pools[n], req) {
				serving = append(serving, n)
			}
		}
		switch {
		case len(serving) > 0:
		case len(names) == 0:
			return nil, "", fail(RequestedIPNotInAnyPool, "%s is not in any pool", ip)
		case req.Pool != "" && !slices.Contains(names, req.Pool):
			return nil, "", fail(RequestedIPNotInAnyPool, "%s is not in the requested pool %s (it is in %s)", ip, req.Pool, strings.Join(names, ", "))
		default:
			return nil, "", fail(NotAllowedByPool, "%s is in pool %s, whose serviceAllocation (namespaces, namespaceSelectors, serviceSelectors) does not select this Service", ip, strings.Join(names, ", "))
		}
		if i == 0 {
			common = serving
		} else if common = intersect(common, serving); len(common) == 0 {
			return nil, "", fail(RequestedIPNotInAnyPool, "the requested addresses %s are not all in one pool; both families must come from the same pool", commaAddrs(req.IPs))
		}
		if err := a.joinable(ip, req); err != nil {
			return nil, "", err
		}
		if err := a.heldAgainst(ip, req); err != nil {
			return nil, "", err
		}
	}
	return slices.Clone(req.IPs), common[0], nil
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

// chooseAuto picks the lowest free (or shareable) address of each wanted family from the
// first pool, in allocation order, that has them all.
func (a *Allocator) chooseAuto(req *Request) ([]netip.Addr, string, *Error) {
	candidates, err := a.candidates(req)
	if err != nil {
		return nil, "", err
	}
	if held := a.claimedPool(req); held != "" {
		// The addresses kept for this Service come back from their pool, whatever the order.
		if i := slices.IndexFunc(candidates, func(p *poolState) bool { return p.Name == held }); i > 0 {
			candidates = append([]*poolState{candidates[i]}, slices.Delete(slices.Clone(candidates), i, i+1)...)
		}
	}
	want := wantedFamilies(req)
	attempts := [][]Family{want}
	if req.DualStack == PreferDualStack {
		attempts = append(attempts, want[:1], want[1:])
	}
	for _, fams := range attempts {
		for _, p := range candidates {
			if ips, ok := a.pickIn(p, fams, req); ok {
				return ips, p.Name, nil
			}
		}
	}
	err = a.explainNoAddress(candidates, req, want)
	if err.Reason == PoolExhausted && a.keyHeldElsewhere(req, candidates) {
		err = fail(SharingConflict, "%s; sharing key %s is used in another namespace, and addresses are shared across namespaces only in pools with allowSharingAcrossNamespaces", err.Message, req.SharingKey)
	}
	return nil, "", err
}

func (a *Allocator) candidates(req *Request) ([]*poolState, *Error) {
	if req.Pool != "" {
		p, ok := a.pools[req.Pool]
		switch {
		case !ok:
			return nil, fail(NoMatchingPool, "the requested pool %s does not exist", req.Pool)
		case !admits(p, req):
			return nil, fail(NotAllowedByPool, "the requested pool %s has a serviceAllocation (namespaces, namespaceSelectors, serviceSelectors) that does not select this Service", req.Pool)
		}
		return []*poolState{p}, nil
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

// pickIn picks one address per family in pool p.
func (a *Allocator) pickIn(p *poolState, fams []Family, req *Request) ([]netip.Addr, bool) {
	var ips []netip.Addr
	for _, f := range fams {
		ip, ok := a.claimable(req, f, p)
		if !ok {
			ip, ok = a.shared(req, f, p)
		}
		if !ok {
			ip, ok = a.lowestFree(p, f)
		}
		if !ok {
			return nil, false
		}
		ips = append(ips, ip)
	}
	return ips, true
}

func (a *Allocator) lowestFree(p *poolState, f Family) (netip.Addr, bool) {
	for ip := range a.free(p, f) {
		return ip, true
	}
	return netip.Addr{}, false
}

// explainNoAddress tells apart pools that lack a family from pools that are full.
func (a *Allocator) explainNoAddress(candidates []*poolState, req *Request, want []Family) *Error {
	needed := want
	if req.DualStack == PreferDualStack {
		needed = want[:1] // either family would have done; name the primary
	}
	var full []string
	for _, p := range candidates {
		has := true
		for _, f := range needed {
			has = has && p.hasFamily(f)
		}
		if has || req.DualStack == PreferDualStack && (p.hasFamily(want[0]) || p.hasFamily(want[1])) {
			full = append(full, a.describeFull(p, needed))
		}
	}
	if len(full) == 0 {
		names := make([]string, len(candidates))
		for i, p := range candidates {
			names[i] = p.Name
		}
		return fail(FamilyUnavailable, "no pool serving this Service has %s addresses (tried %s)", familyList(needed), strings.Join(names, ", "))
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
				if !slices.Contains(names, n) && (req.Pool == "" || n == req.Pool) {
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
