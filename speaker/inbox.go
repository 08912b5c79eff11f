package speaker

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// inbox is what the next pass plans, and why: the informers' handlers, the gossip group's
// changes and the timers fill it (trigger, replanAll); the loop takes it.
type inbox struct {
	kick     chan struct{}
	cause    atomic.Value // string: why the next reconcile runs
	lostAt   atomic.Int64 // unix nanos of the latest member loss not yet acted upon
	joined   atomic.Bool  // a member joined since the latest reconcile
	joinedAt atomic.Int64 // unix nanos of the latest member's join, or this speaker's start (plan.World.MembersSince)
	pending  pendingReplan
}

// pendingReplan is what the next reconcile plans again, collected between two reconciles: the
// Services that changed (a Service or one of its EndpointSlices), or everything (any other
// object, the members, the BGP passwords). The informers' handlers fill it; the loop takes it.
type pendingReplan struct {
	mu      sync.Mutex
	all     bool
	holders bool // the Speakers' L2 announcements changed (Planner.Rehold)
	keys    map[string]bool
	slices  map[string]map[string]bool // EndpointSlice names by Service key: a Service's slices without listing all
}

func (p *pendingReplan) everything() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.all = true
}

// take returns the Services changed since the last take, sorted, whether the holders changed,
// or all: plan everything.
func (p *pendingReplan) take() (keys []string, holders, all bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys = slices.Sorted(maps.Keys(p.keys))
	all, holders, p.all, p.holders, p.keys = p.all, p.holders, false, false, nil
	return keys, holders, all
}

// reheld notes that the Speakers' L2 announcements changed.
func (p *pendingReplan) reheld() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holders = true
}

func (p *pendingReplan) service(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.keys == nil {
		p.keys = map[string]bool{}
	}
	p.keys[key] = true
}

// slice notes an EndpointSlice added, changed or (gone) deleted: its Service changed.
func (p *pendingReplan) slice(es *discoveryv1.EndpointSlice, gone bool) {
	svc := es.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return
	}
	key := es.Namespace + "/" + svc
	p.mu.Lock()
	if p.slices == nil {
		p.slices = map[string]map[string]bool{}
	}
	if gone {
		delete(p.slices[key], es.Name)
		if len(p.slices[key]) == 0 {
			delete(p.slices, key)
		}
	} else {
		if p.slices[key] == nil {
			p.slices[key] = map[string]bool{}
		}
		p.slices[key][es.Name] = true
	}
	p.mu.Unlock()
	p.service(key)
}

// slicesOf are the names of the Service's EndpointSlices, sorted.
func (p *pendingReplan) slicesOf(key string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.slices[key]))
}

// trigger wakes the loop for a pass; cause says why (causeStatus: only the status changes).
func (s *Speaker) trigger(cause string) {
	s.reporter.stir()
	if cause == causeStatus {
		cause = "" // only the status changes: whatever cause is pending stays
	}
	// member-lost wins over a config cause queued before it, so failovers are counted as such.
	if prev, _ := s.inbox.cause.Load().(string); cause != "" && (prev != "member-lost" || cause == "member-lost") {
		s.inbox.cause.Store(cause)
	}
	select {
	case s.inbox.kick <- struct{}{}:
	default:
	}
}

// replanAll has the next reconcile plan every Service.
func (s *Speaker) replanAll(cause string) {
	s.inbox.pending.everything()
	s.trigger(cause)
}

// alarm calls a function at a time, one at a time: each setting replaces the one before.
type alarm struct {
	mu    sync.Mutex
	timer *time.Timer
}

// at has fire called at t, replacing the call set before; a zero t sets none.
func (a *alarm) at(t time.Time, fire func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	if !t.IsZero() {
		a.timer = time.AfterFunc(time.Until(t), fire)
	}
}
