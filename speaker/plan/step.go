package plan

import (
	"net/netip"
	"slices"
	"time"

	"github.com/portico-lb/portico/rules"
)

// One pass of the speaker's loop is raft's shape: it reads what changed, brings the Planner up
// to date, asks Step what to do, and the sides (the guard, the hand-off, the answerer, flow
// sharing, the advertiser) carry the Actions out in their order; none of them decides.

// Applied is what the sides hold from the passes before: what this node answers for and
// advertises, and how the latest apply went.
type Applied struct {
	Mine map[netip.Addr]Claim // answered over L2 (the answerer's)
	// Answering: the announcer has been handed this node's L2 addresses at least once.
	Answering bool
	Routed    map[netip.Addr]BGPClaim // advertised over BGP (the advertiser's)
	Standing  rules.BGPStanding       // as last applied; UnknownStanding before the first pass
	// BGPFailed: the latest BGP apply reported a problem, so the next one applies every route.
	BGPFailed bool
	Takeovers map[netip.Addr]Takeover // the hand-off's takeovers held
	Slots     map[int]netip.Addr      // the hand-off's slots (by flow), as it holds them
}

// Pass is what one pass knows besides the plan and what was applied.
type Pass struct {
	Changes Changes   // what the latest Replan or Update changed
	Now     time.Time // the pass's time
	// Joined: a member joined since the latest pass (a partition healed, a node came).
	Joined bool
	// Subnets are this node's own, from its links (nil: not followed).
	Subnets []netip.Prefix
	// Handoff are the hand-off's times; nil: the node has no hand-off.
	Handoff *TakeoverTimes
	// ShareFlows: the members share their flows around a change of this node's place in its
	// BGP addresses' ECMP sets (it needs the hand-off).
	ShareFlows bool
}

// Actions is one pass's work for the sides, in the order they carry it out.
type Actions struct {
	// GiveBack are the hand-off's slots of node addresses no Node has any more (a full plan
	// only): they go back so that they do not run out as nodes come and go.
	GiveBack []netip.Addr
	// GuardAdd are the addresses the forwarding guard takes before the first answer or route.
	GuardAdd []netip.Addr
	// Takeovers are the hand-off's steps, before the first answer, so that the first packets
	// find their way.
	Takeovers TakeoverSteps
	// L2 are the addresses whose L2 claim may start or stop; Answer: the announcer is handed
	// the plan's L2 addresses; Reannounce: it announces every address again; Gained are those
	// this node starts answering for.
	L2         []netip.Addr
	Answer     bool
	Reannounce bool
	Gained     []netip.Addr
	// Share are the addresses whose flows the members share before this node's place in
	// their ECMP sets changes, and twice after (nil: none).
	Share []netip.Addr
	// BGP is what the router is handed (nil: nothing changed); Routed the addresses whose
	// BGP claim may start or stop; Standing what to remember as applied.
	BGP      *BGP
	Routed   []netip.Addr
	Standing rules.BGPStanding
	// GuardRemove are the addresses the guard lets go once they are withdrawn.
	GuardRemove []netip.Addr
	// Stop is what a stop of the speaker would do now (a full plan only: it reads this Node).
	Stop *Stop
	// WakeAt is when the plan changes with nothing else changing (a drain grace ends, the
	// cluster will have settled for balance; WakeFor says which): plan everything again then.
	WakeAt  time.Time
	WakeFor string
}

// Step decides one pass on the Planner's current plan (Decide), with what needs the
// Planner's owners and Nodes: the hand-off's takeovers, and on a full plan the slots to give
// back and what a stop would do.
func (pl *Planner) Step(in Pass, a Applied) Actions {
	acts := Decide(pl.plan, in, a)
	if in.Handoff != nil {
		acts.Takeovers = pl.Takeovers(a.Takeovers, acts.L2, in.Subnets, in.Now, *in.Handoff)
	}
	if in.Changes.All {
		acts.GiveBack = StaleSlots(a.Slots, pl.w.Nodes)
		stop := StopOf(findNode(pl.w.Nodes, pl.me), pl.w.IgnoreExcludeLabel)
		acts.Stop = &stop
	}
	return acts
}

// Decide is what one pass does with plan p, given what changed and what the sides hold.
func Decide(p Plan, in Pass, a Applied) Actions {
	ch := in.Changes
	acts := Actions{L2: slices.Clone(ch.Mine), Routed: slices.Clone(ch.Routed), Standing: p.Standing,
		Reannounce: in.Joined, WakeAt: p.ReplanAt, WakeFor: p.ReplanFor}
	if ch.All {
		acts.L2, acts.Routed = addrsOf(p.Mine, a.Mine), addrsOf(p.Routed, a.Routed)
	}
	touched := slices.Concat(acts.L2, acts.Routed)
	acts.GuardAdd, acts.GuardRemove = guarded(touched, p, true), guarded(touched, p, false)
	acts.Answer = len(acts.L2) > 0 || !a.Answering
	for _, ip := range acts.L2 {
		_, had := a.Mine[ip]
		if _, now := p.Mine[ip]; now && !had {
			acts.Gained = append(acts.Gained, ip)
		}
	}
	if in.ShareFlows {
		acts.Share = FlowsToShare(a.Standing, p.Standing, a.Routed, p.Routed)
	}
	if ch.All || len(ch.Routes) > 0 || a.BGPFailed {
		d := p.BGP
		if !ch.All && !a.BGPFailed {
			d.Changed = ch.Routes // the routes compared; after a problem, every route
		}
		acts.BGP = &d
	}
	return acts
}

// guarded are those of addrs the plan announces (announced) or no longer announces
// (!announced), over L2 or BGP.
func guarded(addrs []netip.Addr, p Plan, announced bool) []netip.Addr {
	var out []netip.Addr
	for _, ip := range addrs {
		_, l2 := p.Mine[ip]
		_, routed := p.Routed[ip]
		if (l2 || routed) == announced {
			out = append(out, ip)
		}
	}
	return out
}
