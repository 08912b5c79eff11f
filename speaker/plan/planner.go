package plan

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/rules/election"
)

// Planner keeps one node's plan between changes. Replan plans every Service again (what a
// change to nodes, pools, advertisements, peers or the members needs); Update plans only the
// Services it is given and combines again only the addresses and routes they list, so a
// change to one Service costs that Service, not every Service in the cluster.
type Planner struct {
	me, lbClass string
	w           World           // the cluster-wide objects of the latest Replan (its Services are not kept)
	alive       map[string]bool // the members at the latest Replan, by node name
	pools       []rules.Pool
	mine        *bgpNode              // this node's sessions (nil: none)
	earlier     []*bgpNode            // the live nodes before me by name: the teller rule asks what they advertise
	earlierWith map[string][]*bgpNode // of those, the ones holding each BGPPeer, by name
	global      []string              // problems of the cluster-wide objects

	scratch  map[*bgpNode]*Plan // one node's routes for one Service, cleared for each
	services map[string]*servicePlan
	byAddr   map[netip.Addr][]string           // the Services listing each address, sorted
	byRoute  map[routeKey][]string             // the Services routed to each peer's prefix, sorted
	derived  map[any][]string                  // problems found combining an address (netip.Addr) or a route (routeKey)
	placed   map[netip.Addr]election.Placement // every L2 address: its electable nodes, owner and holders
	inFlight int                               // of those, how many are moving (election.Placement.InFlight)
	// placedChanged: a placement changed since the balance was last decided; rollout is
	// rules.L2Rollout at the latest Replan.
	placedChanged bool
	rollout       string
	move          *election.Move // the address moving for balance, if any
	graceAt       time.Time      // when the earliest drain grace ends (zero: none)
	problems      map[string]int // every problem, with how many sources report it
	plan          Plan
	// owners is the L2 owner of each address (elected, whichever node), previous the owner it
	// had before its latest change of owner: kept across Replans, so that the node taking an
	// address over knows whose flows it takes (package handoff).
	owners, previous map[netip.Addr]string
	started          bool // the first Replan is done
	// Planned counts the Services planned since the Planner was made (the tests read it).
	Planned int
}

// servicePlan is one Service's share of the plan. A Service lists an address or two, so its
// shares are short lists, not maps.
type servicePlan struct {
	addrs    []netip.Addr // its addresses that are in a pool
	l2       []sharerAt   // per address an L2Advertisement covers
	routes   []routeAt    // its routes from this node, its advertisements merged
	routed   []routedAt   // per address this node advertises: its peers; Teller: no earlier node advertises it
	problems []string
}

type sharerAt struct {
	ip netip.Addr
	rules.L2Share
}

type routeAt struct {
	routeKey
	Route
}

type routedAt struct {
	ip netip.Addr
	BGPClaim
}

// find returns the entry of list whose key is k.
func find[T any, K comparable](list []T, key func(*T) K, k K) (*T, bool) {
	for i := range list {
		if key(&list[i]) == k {
			return &list[i], true
		}
	}
	return nil, false
}

type routeKey struct {
	peer   string
	prefix netip.Prefix
}

// Changes says what a Replan or an Update changed in the plan, so that applying and reporting
// it can cost the change.
type Changes struct {
	All      bool                      // anything may have changed
	Mine     []netip.Addr              // addresses whose L2 claim changed (gained, lost or edited)
	Routed   []netip.Addr              // addresses whose BGP claim changed
	Routes   map[string][]netip.Prefix // the routes that changed, by BGPPeer name (nil with All)
	Problems bool                      // the list of problems changed
}

// Prefixes are the prefixes of the routes that changed, to any peer.
func (ch Changes) Prefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, ps := range ch.Routes {
		out = append(out, ps...)
	}
	return out
}

// NewPlanner is node me's Planner, empty until its first Replan.
func NewPlanner(me, lbClass string) *Planner {
	return &Planner{me: me, lbClass: lbClass, owners: map[netip.Addr]string{}, previous: map[netip.Addr]string{}}
}

// Owner is the node that answers for ip over L2 in the current plan ("": none).
func (pl *Planner) Owner(ip netip.Addr) string { return pl.owners[ip] }

// PreviousOwner is the node that answered for ip over L2 before its latest change of owner, as
// this Planner saw it; for an address this node owns from the first plan on, the owner elected
// without it, which answered while this node's speaker was away ("": none).
func (pl *Planner) PreviousOwner(ip netip.Addr) string { return pl.previous[ip] }

// noteOwner records ip's owner now, keeping the one it replaces.
func (pl *Planner) noteOwner(ip netip.Addr, owner string) {
	was := pl.owners[ip]
	if owner == was {
		return
	}
	if was != "" {
		pl.previous[ip] = was
	}
	if owner == "" {
		delete(pl.owners, ip)
	} else {
		pl.owners[ip] = owner
	}
}

// Plan is the current plan. Its maps belong to the Planner and change with the next Replan or
// Update.
func (pl *Planner) Plan() Plan { return pl.plan }

// Replan plans every Service in w with the members alive says are alive.
func (pl *Planner) Replan(w World, alive func(node string) bool) Changes {
	services, eps := w.Services, w.EndpointSlices
	w.Services, w.EndpointSlices = nil, nil
	w.selectors, w.routerIDs = rules.Selectors{}, nil
	pl.w = w
	pl.alive = map[string]bool{}
	for i := range w.Nodes {
		pl.alive[w.Nodes[i].Name] = alive(w.Nodes[i].Name)
	}
	pl.services, pl.byAddr, pl.byRoute = map[string]*servicePlan{}, map[netip.Addr][]string{}, map[routeKey][]string{}
	pl.derived, pl.problems, pl.scratch = map[any][]string{}, map[string]int{}, map[*bgpNode]*Plan{}
	pl.placed, pl.move, pl.inFlight, pl.placedChanged = map[netip.Addr]election.Placement{}, nil, 0, true
	pl.rollout = rolloutOf(&pl.w, pl.alive)
	pl.global = nil
	pl.pools, pl.global = rules.ParsePools(w.Pools)
	fitNodes := pl.w.selectors.BGPFitNodes(w.Nodes, w.BGPPeers, func(n string) bool { return pl.alive[n] }, w.IgnoreExcludeLabel)
	pl.mine = bgpNodeOf(&pl.w, pl.me, fitNodes, &pl.global)
	replanAt := pl.mine.graceEnds(&pl.w)
	pl.earlier, pl.earlierWith = nil, map[string][]*bgpNode{}
	names := make([]string, 0, len(w.Nodes))
	for i := range w.Nodes {
		names = append(names, w.Nodes[i].Name)
	}
	for _, n := range sortedStrings(names) {
		if n < pl.me && pl.alive[n] {
			var ignored []string // their problems are theirs to report
			bn := bgpNodeOf(&pl.w, n, fitNodes, &ignored)
			pl.earlier = append(pl.earlier, bn)
			if t := bn.graceEnds(&pl.w); !t.IsZero() && (replanAt.IsZero() || t.Before(replanAt)) {
				replanAt = t // the teller may change then
			}
			if bn != nil {
				for peer := range bn.peers {
					pl.earlierWith[peer] = append(pl.earlierWith[peer], bn)
				}
			}
		}
	}
	pl.count(pl.global, 1)
	pl.graceAt = replanAt
	pl.plan = Plan{Mine: map[netip.Addr]Claim{}, BGP: pl.mine.desired(), Routed: map[netip.Addr]BGPClaim{}}
	if pl.mine != nil {
		pl.plan.Standing, pl.plan.BFDProblems = pl.mine.rule.Standing, pl.mine.bfdProblems
	}
	pl.update(services, eps, nil)
	for ip := range pl.owners { // addresses no Service lists any more
		if _, listed := pl.byAddr[ip]; !listed {
			delete(pl.owners, ip)
			delete(pl.previous, ip)
		}
	}
	pl.started = true
	pl.refreshProblems(true)
	return Changes{All: true, Problems: true}
}

// Update plans again the Services named by keys (namespace/name) as svcs now holds them, with
// slices holding their EndpointSlices; a key with no Service in svcs was deleted. Everything
// else is taken from the latest Replan.
func (pl *Planner) Update(svcs []corev1.Service, eps []discoveryv1.EndpointSlice, keys []string) Changes {
	return pl.update(svcs, eps, keys)
}

func (pl *Planner) update(svcs []corev1.Service, eps []discoveryv1.EndpointSlice, gone []string) Changes {
	local := rules.LocalEndpointsOf(svcs, eps)
	dirtyAddrs := map[netip.Addr]bool{}
	dirtyRoutes := map[routeKey]bool{}
	before := len(pl.plan.Problems)
	problemsChanged := false
	replace := func(key string, now *servicePlan) {
		if old := pl.services[key]; old != nil {
			pl.unlist(key, old, dirtyAddrs, dirtyRoutes)
			problemsChanged = problemsChanged || len(old.problems) > 0
		}
		delete(pl.services, key)
		if now != nil {
			pl.services[key] = now
			pl.list(key, now, dirtyAddrs, dirtyRoutes)
			problemsChanged = problemsChanged || len(now.problems) > 0
		}
	}
	planned := map[string]bool{}
	for i := range svcs {
		svc := &svcs[i]
		key := svc.Namespace + "/" + svc.Name
		planned[key] = true
		replace(key, pl.planService(svc, key, local[key]))
	}
	for _, key := range gone {
		if !planned[key] {
			replace(key, nil)
		}
	}
	ch := Changes{}
	for _, ip := range sortedAddrs(dirtyAddrs) {
		mine, routed := pl.combineAddress(ip)
		if mine {
			ch.Mine = append(ch.Mine, ip)
		}
		if routed {
			ch.Routed = append(ch.Routed, ip)
		}
	}
	if moved := pl.rebalance(); len(moved) > 0 {
		ch.Mine = append(ch.Mine, moved...)
		slices.SortFunc(ch.Mine, netip.Addr.Compare)
		ch.Mine = slices.Compact(ch.Mine)
	}
	for rk := range dirtyRoutes {
		if pl.combineRoute(rk) {
			if ch.Routes == nil {
				ch.Routes = map[string][]netip.Prefix{}
			}
			ch.Routes[rk.peer] = append(ch.Routes[rk.peer], rk.prefix)
		}
	}
	ch.Problems = pl.refreshProblems(problemsChanged || len(dirtyAddrs) > 0 || len(dirtyRoutes) > 0) || before != len(pl.plan.Problems)
	return ch
}

// planService is svc's share of the plan, nil when Portico does not handle it.
func (pl *Planner) planService(svc *corev1.Service, key string, local rules.LocalEndpoints) *servicePlan {
	if !rules.Handles(svc, pl.lbClass, !pl.w.IgnoreClassless) {
		return nil
	}
	pl.Planned++
	w := &pl.w
	sp := &servicePlan{}
	own := pl.scratchFor(pl.mine) // this Service's routes from this node
	alive := func(n string) bool { return pl.alive[n] }
	cluster := w.Cluster()
	for _, ip := range v1alpha1.IngressAddrs(svc) {
		pool, ok := rules.PoolOf(svc, ip, pl.pools)
		if !ok {
			sp.problems = append(sp.problems, fmt.Sprintf("%s: address %s is in no IPAddressPool", key, ip))
			continue
		}
		sp.addrs = append(sp.addrs, ip)
		if ads := w.selectors.L2AdvertisementsFor(w.Advertisements, pool, svc); len(ads) > 0 {
			sp.l2 = append(sp.l2, sharerAt{ip, w.selectors.L2ShareOf(&cluster, ads, svc, local, pl.me, alive)})
		}
		if pl.mine == nil {
			continue
		}
		bgpAds := w.selectors.BGPAdvertisementsFor(w.BGPAds, pool, svc)
		isLocal := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
		pl.mine.advertiseAddress(w, own, key, ip, bgpAds, isLocal, local.Ready)
		if c, ok := own.Routed[ip]; ok {
			c.Teller, c.FirstTo = pl.sentEarlier(key, ip, bgpAds, isLocal, local.Ready, c.Peers)
			sp.routed = append(sp.routed, routedAt{ip, c})
		}
	}
	sp.problems = append(sp.problems, own.Problems...)
	for peer, routes := range own.BGP.Routes {
		for prefix, r := range routes {
			sp.routes = append(sp.routes, routeAt{routeKey{peer, prefix}, r})
		}
	}
	return sp
}

// scratchFor is node n's scratch plan, emptied: its sessions, no route.
func (pl *Planner) scratchFor(n *bgpNode) *Plan {
	p, ok := pl.scratch[n]
	if !ok {
		p = &Plan{BGP: n.desired(), Routed: map[netip.Addr]BGPClaim{}}
		pl.scratch[n] = p
	}
	for _, routes := range p.BGP.Routes {
		clear(routes)
	}
	clear(p.Routed)
	p.Problems = p.Problems[:0]
	return p
}

// list adds a Service's share to the indexes, marking what it touches.
func (pl *Planner) list(key string, sp *servicePlan, addrs map[netip.Addr]bool, routes map[routeKey]bool) {
	pl.index(key, sp, addrs, routes, insertSorted, 1)
}

// unlist removes a Service's share from the indexes, marking what it touched.
func (pl *Planner) unlist(key string, sp *servicePlan, addrs map[netip.Addr]bool, routes map[routeKey]bool) {
	pl.index(key, sp, addrs, routes, removeSorted, -1)
}

// index applies edit (insertSorted or removeSorted) to the index entries of a Service's share,
// and counts its problems in (+1) or out (-1).
func (pl *Planner) index(key string, sp *servicePlan, addrs map[netip.Addr]bool, routes map[routeKey]bool, edit func([]string, string) []string, sign int) {
	for _, ip := range sp.addrs {
		pl.byAddr[ip] = edit(pl.byAddr[ip], key)
		addrs[ip] = true
	}
	for _, r := range sp.routes {
		pl.byRoute[r.routeKey] = edit(pl.byRoute[r.routeKey], key)
		routes[r.routeKey] = true
	}
	pl.count(sp.problems, sign)
}
