package speaker

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/portico-lb/portico/speaker/plan"
)

// repeater is the side that announces this node's L2 addresses again every L2Advertisement
// gratuitousInterval: the plan says how often (Claim.GratuitousEvery) and plan.Gratuitous
// when; the repeater only sleeps until then and sends what is due.
type repeater struct {
	announce func([]netip.Addr) []error
	log      logr.Logger

	mu       sync.Mutex
	schedule plan.Gratuitous
	changed  chan struct{} // the schedule changed: sleep again
}

func newRepeater(announce func([]netip.Addr) []error, log logr.Logger) *repeater {
	return &repeater{announce: announce, log: log, changed: make(chan struct{}, 1)}
}

// set hands the repeater the plan's L2 claims, once the announcer has them.
func (r *repeater) set(mine map[netip.Addr]plan.Claim) {
	r.mu.Lock()
	r.schedule.Set(plan.GratuitousOf(mine), time.Now())
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// run announces what is due until ctx ends.
func (r *repeater) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		next := r.schedule.Next()
		r.mu.Unlock()
		wake := timer.C
		if next.IsZero() {
			wake = nil // nothing to announce again until set
		} else {
			timer.Reset(time.Until(next))
		}
		select {
		case <-ctx.Done():
			return
		case <-r.changed:
			continue
		case <-wake:
		}
		r.mu.Lock()
		due := r.schedule.Due(time.Now())
		r.mu.Unlock()
		for _, err := range r.announce(due) {
			r.log.V(1).Info("announcing again", "error", err.Error())
		}
	}
}
