package speaker

import (
	"context"
	"net/netip"
	"slices"
	"time"

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
	cause, _ := s.inbox.cause.Swap("config").(string)
	lostAt := s.inbox.lostAt.Swap(0)
	ch, err := s.replan(ctx)
	if err != nil {
		s.Log.Error(err, "reading the cache")
		return
	}
	in := plan.Pass{Changes: ch, Now: start, Joined: s.inbox.joined.Swap(false), ShareFlows: s.Handoff != nil && s.ShareFlows}
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
	s.reads.cordons.wakeAt(acts.WakeAt, func() { s.replanAll(acts.WakeFor) })
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
		s.flows.latest = round
	}
	s.advertiser.apply(ctx, p, acts, cause)
	if len(acts.Share) > 0 {
		go s.shareFlowsAfterChange(ctx, acts.Share)
	}
	s.health.planned.Store(true)     // after startedAt, which RoutesUp reads once it sees this
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
	if s.gossip.keyProblem != "" {
		problems = append(problems, s.gossip.keyProblem)
	}
	slices.Sort(problems)
	s.reporter.report(reconciled{plan: p, problems: problems, answered: s.answerer.ifaces, interfaces: s.Announce.Interfaces(),
		subnets: s.subnetStrings(), mine: mine, routed: acts.Routed, prefixes: ch.Prefixes(), all: ch.All, sessions: s.BGP.States(),
		takeovers: s.takeovers.status(), flowShare: s.flows.latest})
}

// replan brings the plan up to date: the addresses whose holders changed and the changed
// Services, or everything.
func (s *Speaker) replan(ctx context.Context) (plan.Changes, error) {
	keys, reheld, all := s.inbox.pending.take()
	if all || s.planner == nil {
		w, err := s.world(ctx)
		if err != nil {
			s.inbox.pending.everything()
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
			s.inbox.pending.reheld()
			return plan.Changes{}, err
		}
		held = s.planner.Rehold(rules.HoldersOf(speakers.Items))
	}
	if len(keys) == 0 {
		return held, nil
	}
	svcs, eps, err := s.changedServices(ctx, keys)
	if err != nil {
		s.inbox.pending.everything() // the holders' changes are in the planner, not yet applied
		return plan.Changes{}, err
	}
	ch := s.planner.Update(svcs, eps, keys)
	ch.Mine = append(ch.Mine, held.Mine...)
	slices.SortFunc(ch.Mine, netip.Addr.Compare)
	ch.Mine = slices.Compact(ch.Mine)
	ch.Problems = ch.Problems || held.Problems
	return ch, nil
}
