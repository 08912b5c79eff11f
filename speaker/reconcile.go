package speaker

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/plan"
)

// reconcile is one pass of the loop, raft's shape: it reads what changed and brings the plan up
// to date (replan), has the plan decide what to do (Planner.Step), and the sides carry it out
// (apply).
func (s *Speaker) reconcile(ctx context.Context) {
	start := time.Now()
	defer func() { s.Metrics.reconcile.Observe(time.Since(start).Seconds()) }()
	cause, _ := s.cause.Swap("config").(string)
	lostAt := s.lostAt.Swap(0)
	ch, err := s.replan(ctx)
	if err != nil {
		s.Log.Error(err, "reading the cache")
		return
	}
	in := plan.Pass{Changes: ch, Now: start, Joined: s.joined.Swap(false), ShareFlows: s.Handoff != nil && s.ShareFlows}
	in.Subnets, _ = s.ownSubnets()
	if s.takeovers != nil {
		in.Handoff = &s.takeovers.times
	}
	acts := s.planner.Step(in, s.applied(ch.All))
	s.apply(ctx, ch, acts, cause, lostAt)
}

// applied is what the sides hold, for the plan's Step; all: the hand-off's slots too.
func (s *Speaker) applied(all bool) plan.Applied {
	a := plan.Applied{Mine: s.answerer.owned, Answering: s.answerer.ifaces != nil, Routed: s.advertiser.routed,
		Standing: s.advertiser.standing, BGPFailed: len(s.advertiser.problems) > 0}
	if s.takeovers != nil {
		a.Takeovers = s.takeovers.held
	}
	if all && s.Handoff != nil {
		a.Slots = s.Handoff.Slots()
	}
	return a
}

// apply has the sides carry out one pass's actions in their order: the hand-off's slots given
// back, the forwarding guard first, the hand-off's takeovers, the L2 answers, the flow sharing
// and the BGP routes, the guard again for what was withdrawn, and the Speaker status last.
func (s *Speaker) apply(ctx context.Context, ch plan.Changes, acts plan.Actions, cause string, lostAt int64) {
	p := s.planner.Plan()
	s.giveBackSlots(acts.GiveBack)
	if acts.Stop != nil {
		s.Metrics.bgpStopping(*acts.Stop)
	}
	s.cordons.wakeAt(acts.WakeAt, func() { s.replanAll(acts.WakeFor) })
	s.guard(acts.GuardAdd, true) // before the first answer or route
	if s.takeovers != nil {      // before the first answer: the first packets find their way
		s.takeovers.apply(acts.Takeovers, func() { s.replanAll("handoff-linger") })
	}
	mine := s.answerer.apply(p, acts)
	if lostAt != 0 && len(acts.Gained) > 0 {
		// Set has sent the first gratuitous frames when it returns.
		s.Metrics.failover.Observe(time.Since(time.Unix(0, lostAt)).Seconds())
	}
	s.answerer.ownersChanged(ctx, p, mine, cause)
	s.Metrics.announced.Set(float64(len(p.Mine)))
	// Before this node's place in its addresses' ECMP sets changes, and twice after it (the
	// flows opened meanwhile, and those opened before the router applied it), the members
	// share their flows (flowshare.go).
	if round := s.shareFlows(ctx, acts.Share, "bgp-standing"); round != nil {
		s.flowShare = round
	}
	s.advertiser.apply(ctx, p, acts, cause)
	if len(acts.Share) > 0 {
		go s.shareFlowsAfterChange(ctx, acts.Share)
	}
	s.planned.Store(true)            // after startedAt, which RoutesUp reads once it sees this
	s.guard(acts.GuardRemove, false) // once withdrawn
	s.report(p, ch, acts, mine)
}

// report hands the reporter the Speaker status of a pass.
func (s *Speaker) report(p plan.Plan, ch plan.Changes, acts plan.Actions, mine []netip.Addr) {
	problems := slices.Clone(p.Problems)
	for _, err := range append(slices.Clone(s.answerer.problems), s.advertiser.problems...) {
		problems = append(problems, err.Error())
	}
	problems = append(problems, s.refusalProblems()...)
	if s.keyProblem != "" {
		problems = append(problems, s.keyProblem)
	}
	slices.Sort(problems)
	s.reporter.report(reconciled{plan: p, problems: problems, answered: s.answerer.ifaces, interfaces: s.Announce.Interfaces(),
		subnets: s.subnetStrings(), mine: mine, routed: acts.Routed, prefixes: ch.Prefixes(), all: ch.All, sessions: s.BGP.States(),
		takeovers: s.takeovers.status(), flowShare: s.flowShare})
}

// replan brings the plan up to date: the addresses whose holders changed and the changed
// Services, or everything.
func (s *Speaker) replan(ctx context.Context) (plan.Changes, error) {
	keys, reheld, all := s.pending.take()
	if all || s.planner == nil {
		w, err := s.world(ctx)
		if err != nil {
			s.pending.everything()
			return plan.Changes{}, err
		}
		if s.planner == nil {
			s.planner = plan.NewPlanner(s.Node, s.LBClass)
		}
		return s.planner.Replan(w, s.Group.IsAlive), nil
	}
	var held plan.Changes
	if reheld {
		var speakers v1alpha1.SpeakerList
		if err := s.Cache.List(ctx, &speakers); err != nil {
			s.pending.reheld()
			return plan.Changes{}, err
		}
		held = s.planner.Rehold(rules.HoldersOf(speakers.Items))
	}
	if len(keys) == 0 {
		return held, nil
	}
	svcs, eps, err := s.changedServices(ctx, keys)
	if err != nil {
		s.pending.everything() // the holders' changes are in the planner, not yet applied
		return plan.Changes{}, err
	}
	ch := s.planner.Update(svcs, eps, keys)
	ch.Mine = append(ch.Mine, held.Mine...)
	slices.SortFunc(ch.Mine, netip.Addr.Compare)
	ch.Mine = slices.Compact(ch.Mine)
	ch.Problems = ch.Problems || held.Problems
	return ch, nil
}

// world lists everything the plan reads from the cache, and the BGPPeers' password Secrets.
func (s *Speaker) world(ctx context.Context) (plan.World, error) {
	var w plan.World
	var svcs corev1.ServiceList
	var eps discoveryv1.EndpointSliceList
	var nodes corev1.NodeList
	var ads v1alpha1.L2AdvertisementList
	var pools v1alpha1.IPAddressPoolList
	var peers v1alpha1.BGPPeerList
	var bgpAds v1alpha1.BGPAdvertisementList
	var bfdProfiles v1alpha1.BFDProfileList
	now := time.Now()
	var speakers v1alpha1.SpeakerList
	for _, l := range []runtime.Object{&svcs, &eps, &nodes, &ads, &pools, &peers, &bgpAds, &bfdProfiles, &speakers} {
		// The plan only reads the objects: no deep copy of every Service on every change.
		if err := s.Cache.List(ctx, l); err != nil {
			return w, err
		}
	}
	// This node's subnets too come from its status, as the others read them (speakersHandler).
	subnets := rules.SubnetsOf(speakers.Items)
	names := make([]string, 0, len(speakers.Items))
	for i := range speakers.Items {
		names = append(names, speakers.Items[i].Name)
	}
	return plan.World{Subnets: subnets, Holders: rules.HoldersOf(speakers.Items), Speakers: names, BalanceSettle: s.L2BalanceSettle, MembersSince: time.Unix(0, s.joinedAt.Load()), Services: svcs.Items, EndpointSlices: eps.Items, Nodes: nodes.Items, Advertisements: ads.Items, Pools: pools.Items,
		BGPPeers: peers.Items, BGPAds: bgpAds.Items, BFDProfiles: bfdProfiles.Items, Secrets: s.secrets.read(ctx, s.Client, s.Log, secretRefs(peers.Items, bfdProfiles.Items)), IgnoreExcludeLabel: s.IgnoreExcludeLabel, IgnoreClassless: s.IgnoreClassless,
		VRFs: s.vrfs(peers.Items), Now: now, CordonedSince: s.cordons.observe(nodes.Items, now), DrainGrace: s.DrainGrace}, nil
}

// changedServices reads the Services named by keys and their EndpointSlices from the cache (a
// key it does not find was deleted).
func (s *Speaker) changedServices(ctx context.Context, keys []string) ([]corev1.Service, []discoveryv1.EndpointSlice, error) {
	svcs := make([]corev1.Service, 0, len(keys))
	var eps []discoveryv1.EndpointSlice
	for _, key := range keys {
		ns, name, _ := strings.Cut(key, "/")
		var svc corev1.Service
		if err := s.Cache.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &svc); err != nil {
			if !apierrors.IsNotFound(err) {
				return nil, nil, err
			}
			continue
		}
		svcs = append(svcs, svc)
		if svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
			continue // only Local Services read their endpoints
		}
		for _, sliceName := range s.pending.slicesOf(key) {
			var es discoveryv1.EndpointSlice
			if err := s.Cache.Get(ctx, types.NamespacedName{Namespace: ns, Name: sliceName}, &es); err != nil && !apierrors.IsNotFound(err) {
				return nil, nil, err
			} else if err == nil {
				eps = append(eps, es)
			}
		}
	}
	return svcs, eps, nil
}
