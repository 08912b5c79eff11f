package speaker

import (
	"context"
	"net/netip"
	"slices"
	"strings"

	"github.com/go-logr/logr"

	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/plan"
)

// advertiser is the speaker's BGP side: it hands the plan's BGP half (plan.BGP: the sessions
// and their routes) to the Router, and keeps what this node advertises, to tell what changed
// (a log line, an Announced event from the teller) and what a session's change means.
type advertiser struct {
	router   Router
	node     string
	log      logr.Logger
	tell     *reporter
	trigger  func(cause string) // the loop's: a session's change refreshes the Speaker status
	routed   map[netip.Addr]plan.BGPClaim
	standing rules.BGPStanding // this node's, as last applied (plan.FlowsToShare)
	problems []error           // what the latest Apply reported; a change after a problem applies every route
}

// apply hands the router the sessions and routes the plan's Step says (nil: nothing changed),
// and then tells what changed of the addresses Step names.
func (a *advertiser) apply(ctx context.Context, p plan.Plan, acts plan.Actions, cause string) {
	if acts.BGP != nil {
		a.problems = a.router.Apply(ctx, *acts.BGP)
	}
	a.routesChanged(ctx, p.Routed, acts.Routed, cause)
	a.standing = acts.Standing
}

// routesChanged runs after the BGP routes were applied: for each address whose claim changed
// it logs whether this node starts or stops advertising it, tells its Service by an event when
// it starts (if it is the teller), and remembers the claim.
func (a *advertiser) routesChanged(ctx context.Context, now map[netip.Addr]plan.BGPClaim, changed []netip.Addr, cause string) {
	for _, ip := range changed {
		c, routed := now[ip]
		old, had := a.routed[ip]
		if !routed {
			if had {
				a.log.Info("withdrawn from BGP", "ip", ip, "services", old.Services, "cause", cause)
				delete(a.routed, ip)
			}
			continue
		}
		if !had || !slices.Equal(old.Peers, c.Peers) {
			a.log.Info("advertising over BGP", "ip", ip, "services", c.Services, "peers", c.Peers, "cause", cause)
		}
		// Only the teller tells, so one event stands for every advertising node.
		if c.Teller && (!had || !old.Teller || !slices.Equal(old.Peers, c.Peers)) {
			a.tell.services(ctx, c.Services, "advertising %s to BGP peers %s (told by node %s for every node that advertises it)", ip, strings.Join(c.Peers, ","), a.node)
		}
		a.routed[ip] = c
	}
}

// sessionChanged runs when a BGP session changes state: it logs, tells the BGPPeer by an event
// when the session goes up or down, and refreshes the Speaker status.
func (a *advertiser) sessionChanged(ctx context.Context, before, after plan.SessionState) {
	a.log.Info("BGP session state", "peer", after.Peer, "address", after.Address, "from", before.State, "to", after.State)
	if up := after.Established(); up != before.Established() {
		a.tell.session(ctx, after, up)
	}
	a.trigger("bgp-session")
}
