package plan

import (
	"net/netip"
	"slices"

	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/rules/election"
)

// combineAddress decides ip again from the Services that list it: its owner over L2 (Services
// sharing an address have one owner) and this node's BGP claim. It reports which changed.
func (pl *Planner) combineAddress(ip netip.Addr) (mineChanged, routedChanged bool) {
	ss, routed := pl.sharesOf(ip)
	mine, claim := pl.electL2(ip, ss)
	old, had := pl.plan.Mine[ip]
	mineChanged = had != mine || mine && !sameClaim(old, claim)
	if mine {
		pl.plan.Mine[ip] = claim
	} else {
		delete(pl.plan.Mine, ip)
	}
	oldRouted, hadRouted := pl.plan.Routed[ip]
	isRouted := len(routed.Peers) > 0
	routedChanged = hadRouted != isRouted || isRouted && !sameBGPClaim(oldRouted, routed)
	if isRouted {
		pl.plan.Routed[ip] = routed
	} else {
		delete(pl.plan.Routed, ip)
	}
	if len(pl.byAddr[ip]) == 0 {
		delete(pl.byAddr, ip)
		delete(pl.owners, ip)
		delete(pl.previous, ip)
	}
	return mineChanged, routedChanged
}

// sharesOf are the L2 shares of the Services that list ip, and this node's BGP claim on it
// from all of them.
func (pl *Planner) sharesOf(ip netip.Addr) ([]rules.L2Share, BGPClaim) {
	var ss []rules.L2Share
	var routed BGPClaim
	told := false
	var first, sentEarlier []string
	for _, key := range pl.byAddr[ip] {
		sp := pl.services[key]
		if s, ok := find(sp.l2, func(s *sharerAt) netip.Addr { return s.ip }, ip); ok {
			ss = append(ss, s.L2Share)
		}
		if c, ok := find(sp.routed, func(r *routedAt) netip.Addr { return r.ip }, ip); ok {
			routed.Services = unionSorted(routed.Services, c.Services)
			routed.Peers = unionSorted(routed.Peers, c.Peers)
			told = told || !c.Teller
			first = unionSorted(first, c.FirstTo)
			for _, p := range c.Peers {
				if !slices.Contains(c.FirstTo, p) {
					sentEarlier = insertSorted(sentEarlier, p)
				}
			}
		}
	}
	routed.Teller = !told
	// A peer an earlier node sends the address to for any of its Services hears it from there.
	routed.FirstTo = slices.DeleteFunc(first, func(p string) bool { return slices.Contains(sentEarlier, p) })
	return ss, routed
}

// electL2 elects ip's owner over L2 from the Services' shares ss, records it (and, on a
// starting speaker, whom it takes ip from), and says whether this node answers and its claim.
func (pl *Planner) electL2(ip netip.Addr, ss []rules.L2Share) (bool, Claim) {
	var claim Claim
	mine, problem, owner := false, "", ""
	if len(ss) > 0 {
		e := rules.L2Owner(ip, ss, pl.w.Subnets, pl.w.Holders[ip])
		pl.place(ip, &election.Placement{IP: ip, Nodes: e.Electable, Owner: e.Owner, Holders: pl.w.Holders[ip]})
		owner = e.Owner
		if m := pl.move; m != nil && m.IP == ip && m.From == owner {
			owner = m.To
		}
		problem = e.Conflict
		if mine = owner == pl.me; mine {
			claim = claimOf(ss)
		}
	} else {
		pl.place(ip, nil)
	}
	pl.noteOwner(ip, owner)
	if mine && !pl.started && pl.previous[ip] == "" {
		// A starting speaker (a rolling update, a node joining) takes over from the node that
		// answered while it was away: the owner elected without it.
		pl.previous[ip] = ownerWithout(ip, ss, pl.me, pl.w.Subnets, pl.w.Holders[ip])
	}
	pl.setDerived(ip, problem)
	return mine, claim
}

// ownerWithout is the owner the Services sharing ip would have without node me.
func ownerWithout(ip netip.Addr, ss []rules.L2Share, me string, subnets rules.Subnets, holders []election.Holder) string {
	others := make([]rules.L2Share, len(ss))
	for i, s := range ss {
		s.Eligible = slices.DeleteFunc(slices.Clone(s.Eligible), func(n string) bool { return n == me })
		others[i] = s
	}
	return rules.L2Owner(ip, others, subnets, holders).Owner
}

// combineRoute folds the Services' routes to one peer's prefix (in Service order, so every
// node reports the same conflicts) and reports whether the route changed.
func (pl *Planner) combineRoute(rk routeKey) bool {
	var r Route
	had := false
	var problems []string
	for _, key := range pl.byRoute[rk] {
		theirs, _ := find(pl.services[key].routes, func(r *routeAt) routeKey { return r.routeKey }, rk)
		if problem := mergeRoute(&r, had, rk.peer, theirs.Route); problem != "" {
			problems = append(problems, problem)
		}
		had = true
	}
	pl.setDerived(rk, problems...)
	routes := pl.plan.BGP.Routes[rk.peer]
	old, existed := routes[rk.prefix]
	if !had {
		delete(routes, rk.prefix)
		delete(pl.byRoute, rk)
		return existed
	}
	routes[rk.prefix] = r
	return !existed || !old.Attrs.Equal(r.Attrs) || !slices.Equal(old.Services, r.Services)
}

// setDerived replaces the problems found combining one address or route.
func (pl *Planner) setDerived(at any, problems ...string) {
	problems = slices.DeleteFunc(problems, func(p string) bool { return p == "" })
	pl.count(pl.derived[at], -1)
	if len(problems) == 0 {
		delete(pl.derived, at)
		return
	}
	pl.derived[at] = problems
	pl.count(problems, 1)
}

func (pl *Planner) count(problems []string, delta int) {
	for _, p := range problems {
		if pl.problems[p] += delta; pl.problems[p] == 0 {
			delete(pl.problems, p)
		}
	}
}

// refreshProblems lists the problems again when any source may have changed, and reports
// whether the list did.
func (pl *Planner) refreshProblems(maybe bool) bool {
	if !maybe {
		return false
	}
	var now []string
	for p := range pl.problems {
		now = append(now, p)
	}
	now = sortedStrings(now)
	if slices.Equal(now, pl.plan.Problems) {
		return false
	}
	pl.plan.Problems = now
	return true
}

func sameClaim(a, b Claim) bool {
	return slices.Equal(a.Services, b.Services) && slices.Equal(a.Interfaces, b.Interfaces) && (a.Interfaces == nil) == (b.Interfaces == nil) &&
		a.GratuitousEvery == b.GratuitousEvery
}

func sameBGPClaim(a, b BGPClaim) bool {
	return a.Teller == b.Teller && slices.Equal(a.Services, b.Services) && slices.Equal(a.Peers, b.Peers) && slices.Equal(a.FirstTo, b.FirstTo)
}

func insertSorted(list []string, s string) []string {
	if i, found := slices.BinarySearch(list, s); !found {
		return slices.Insert(list, i, s)
	}
	return list
}

func removeSorted(list []string, s string) []string {
	if i, found := slices.BinarySearch(list, s); found {
		return slices.Delete(list, i, i+1)
	}
	return list
}

func sortedStrings(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

func sortedAddrs(set map[netip.Addr]bool) []netip.Addr {
	out := make([]netip.Addr, 0, len(set))
	for ip := range set {
		out = append(out, ip)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
