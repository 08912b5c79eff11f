package speaker

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/portico-lb/portico/speaker/l2"
	"github.com/portico-lb/portico/speaker/plan"
)

// replan brings the plan up to date: the changed Services, or everything.
func (s *Speaker) replan(ctx context.Context) (plan.Changes, error) {
	keys, all := s.pending.take()
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
	if len(keys) == 0 {
		return plan.Changes{}, nil
	}
	svcs, eps, err := s.changedServices(ctx, keys)
	if err != nil {
		for _, k := range keys {
			s.pending.service(k)
		}
		return plan.Changes{}, err
	}
	return s.planner.Update(svcs, eps, keys), nil
}

// appliedPlan is what the latest applications of the plan reported.
type appliedPlan struct {
	l2, bgp []error
}

// applyL2 hands the L2 addresses to the announcer when they changed, and returns the addresses
// whose claim or interfaces changed.
func (s *Speaker) applyL2(ch plan.Changes) []netip.Addr {
	p := s.planner.Plan()
	changed := ch.Mine
	if ch.All {
		changed = keysOf(p.Mine, s.owned)
	}
	joined := s.joined.Swap(false)
	if len(changed) > 0 || s.ifaces == nil {
		want := make(l2.Want, len(p.Mine))
		for ip, c := range p.Mine {
			want[ip] = c.Interfaces
		}
		var answered map[netip.Addr][]string
		answered, s.applied.l2 = s.Announce.Set(want)
		// Interfaces come and go: an address that kept its claim may now answer elsewhere.
		for ip, on := range answered {
			if !slices.Equal(on, s.ifaces[ip]) {
				changed = append(changed, ip)
			}
		}
		s.ifaces = answered
		slices.SortFunc(changed, netip.Addr.Compare)
		changed = slices.Compact(changed)
	}
	if joined {
		// A partition healed (or a node came): another node may have answered for what this
		// one kept, and clients keep that node's MAC while it still forwards their traffic.
		s.Announce.Reannounce()
	}
	return changed
}

func (s *Speaker) gained(changed []netip.Addr) int {
	n := 0
	for _, ip := range changed {
		_, had := s.owned[ip]
		if _, now := s.planner.Plan().Mine[ip]; now && !had {
			n++
		}
	}
	return n
}

// ownersChanged logs, counts and tells each address this node starts or stops answering for,
// and remembers the claims.
func (s *Speaker) ownersChanged(ctx context.Context, changed []netip.Addr, cause string) {
	for _, ip := range changed {
		c, now := s.planner.Plan().Mine[ip]
		_, had := s.owned[ip]
		switch {
		case now && !had:
			s.Metrics.ownerChanges.WithLabelValues(cause, "gained").Inc()
			s.Log.Info("answering", "ip", ip, "services", c.Services, "interfaces", s.ifaces[ip], "cause", cause)
			where := strings.Join(s.ifaces[ip], ",")
			if where == "" {
				where = "no interface"
			}
			s.event(ctx, c.Services, "announcing %s from node %s on %s", ip, s.Node, where)
		case had && !now:
			s.Metrics.ownerChanges.WithLabelValues(cause, "lost").Inc()
			s.Log.Info("stopped answering", "ip", ip, "cause", cause)
		}
		if now {
			s.owned[ip] = c
		} else {
			delete(s.owned, ip)
		}
	}
}

// keysOf is every address of either map, sorted.
func keysOf[A, B any](a map[netip.Addr]A, b map[netip.Addr]B) []netip.Addr {
	set := make(map[netip.Addr]bool, len(a)+len(b))
	for ip := range a {
		set[ip] = true
	}
	for ip := range b {
		set[ip] = true
	}
	return slices.SortedFunc(maps.Keys(set), netip.Addr.Compare)
}
