package speaker

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-lb/portico/speaker/plan"
)

// DefaultDrainGrace is how long a cordoned node advertises its routes with GRACEFUL_SHUTDOWN
// before it withdraws them (plan.World.DrainGrace): long enough for every router to receive
// the update and move new flows, short next to a drain's pod evictions (docs/speaker-bgp.md).
const DefaultDrainGrace = 30 * time.Second

// cordons remembers when this speaker first saw each node cordoned (plan.World.CordonedSince):
// the Node object does not say when spec.unschedulable was set. A speaker that starts on a
// cordoned node starts its grace again.
type cordons struct {
	mu    sync.Mutex // the loop, the self-check and the conflict prober all read the world
	since map[string]time.Time
	wake  alarm // plans everything again when the next grace ends
}

// observe stamps the nodes cordoned as plan.CordonedSince says and returns the stamps (the
// plan only reads them).
func (c *cordons) observe(nodes []corev1.Node, now time.Time) map[string]time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.since = plan.CordonedSince(c.since, nodes, now)
	return c.since
}

// wakeAt has fire called at t (the plan's ReplanAt), replacing the wake-up set before; a zero t
// sets none.
func (c *cordons) wakeAt(t time.Time, fire func()) { c.wake.at(t, fire) }

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
