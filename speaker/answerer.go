package speaker

import (
	"context"
	"net/netip"
	"slices"
	"strings"

	"github.com/go-logr/logr"

	"github.com/portico-lb/portico/speaker/l2"
	"github.com/portico-lb/portico/speaker/plan"
)

// answerer is the speaker's L2 side: it hands the plan's L2 addresses to the Announcer, which
// answers ARP/NDP for them, and keeps what this node answers for and where, to tell what
// changed (a log line, the owner-change count, an Announced event).
type answerer struct {
	announce Announcer
	node     string
	metrics  *Metrics
	log      logr.Logger
	tell     *reporter
	owned    map[netip.Addr]plan.Claim
	ifaces   map[netip.Addr][]string // the interfaces each address is answered on, as the Announcer said
	problems []error                 // what the latest Set reported
	repeat   *repeater               // announces the addresses again (gratuitousInterval)
}

// apply hands the L2 addresses to the announcer when the plan's Step says so (they changed, or
// were never handed), and returns the addresses whose claim or interfaces changed; it has every
// address announced again when Step says so (a member joined).
func (a *answerer) apply(p plan.Plan, acts plan.Actions) []netip.Addr {
	changed := slices.Clone(acts.L2)
	if acts.Answer {
		want := make(l2.Want, len(p.Mine))
		for ip, c := range p.Mine {
			want[ip] = c.Interfaces
		}
		var answered map[netip.Addr][]string
		answered, a.problems = a.announce.Set(want)
		// Interfaces come and go: an address that kept its claim may now answer elsewhere.
		for ip, on := range answered {
			if !slices.Equal(on, a.ifaces[ip]) {
				changed = append(changed, ip)
			}
		}
		a.ifaces = answered
		a.repeat.set(p.Mine)
		slices.SortFunc(changed, netip.Addr.Compare)
		changed = slices.Compact(changed)
	}
	if acts.Reannounce {
		// A partition healed (or a node came): another node may have answered for what this
		// one kept, and clients keep that node's MAC while it still forwards their traffic.
		a.announce.Reannounce()
	}
	return changed
}

// ownersChanged logs, counts and tells each address this node starts or stops answering for,
// and remembers the claims.
func (a *answerer) ownersChanged(ctx context.Context, p plan.Plan, changed []netip.Addr, cause string) {
	for _, ip := range changed {
		c, now := p.Mine[ip]
		_, had := a.owned[ip]
		switch {
		case now && !had:
			a.metrics.ownerChanges.WithLabelValues(cause, "gained").Inc()
			a.log.Info("answering", "ip", ip, "services", c.Services, "interfaces", a.ifaces[ip], "cause", cause)
			where := strings.Join(a.ifaces[ip], ",")
			if where == "" {
				where = "no interface"
			}
			a.tell.services(ctx, c.Services, "announcing %s from node %s on %s", ip, a.node, where)
		case had && !now:
			a.metrics.ownerChanges.WithLabelValues(cause, "lost").Inc()
			a.log.Info("stopped answering", "ip", ip, "cause", cause)
		}
		if now {
			a.owned[ip] = c
		} else {
			delete(a.owned, ip)
		}
	}
}
