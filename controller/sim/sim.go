// Package sim is a deterministic simulation of the controller: two or three replicas, each
// running the controller's own shell (controller.Shell: the Service, health and pool
// reconcilers, the book behind its lock, the status writer and its lease fence, and under them
// the pure decisions) on ports this package fills (controller.Ports): a simulated apiserver,
// informer caches, network, clock and leader election, driven by a seeded random number
// generator. Only the I/O is simulated. After every step that changes what the apiserver
// stores, the invariants are checked (invariants.go); a failing seed replays exactly, with its
// transcript.
package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-lb/portico/controller"
	"github.com/portico-lb/portico/controller/internal/seeded"
)

// Options choose what the simulated controller runs.
type Options struct {
	// Bugs switch on the controller's deliberately broken rules (seeded.Bugs): each invariant
	// is seen to catch one (TestSeededBugs).
	Bugs seeded.Bugs
	// NoLeaseCheck runs the controller without its lease fence (controller.LeaseFence), as
	// before the lease check: a replica that woke from a pause writes until its elector notices
	// that the lease is lost.
	NoLeaseCheck bool
	// SharingKeyEdits lets users edit the sharing key of a Service: they find a known problem
	// (a Service keeps an address shared under its old key), off until it is fixed.
	SharingKeyEdits bool
	// AddressHolds gives pool home an addressHold: a deleted Service's address is kept for it,
	// across a replica's restart too (the pool reconciler writes the holds in its status).
	AddressHolds bool
	// DualPools adds pool home-v6 (IPv6) beside the IPv4 pools: some Services are dual-stack and
	// take each family from another pool, automatically, by naming both pools or by asking for
	// an address of each; users edit home-v6 too.
	DualPools bool
	// Transcript records every step (slower): for a replay.
	Transcript bool
}

// Result is how one seed went.
type Result struct {
	Seed       uint64
	Steps      int
	Violation  string   // "": every invariant held
	Transcript []string // with Options.Transcript
}

// The simulated time scale: the defaults of portico-controller's leader election.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
	// busyUntil is when the workload and the faults stop; the world then has until end to
	// become quiet, when every Service that can get an address must have one.
	busyUntil = 100 * time.Second
	end       = 170 * time.Second
	// addressHold is pool home's with Options.AddressHolds: holds made by busyUntil end before
	// the world is checked quiet.
	addressHold = 20 * time.Second
)

// seriesNobodyReads are every world's replicas' metrics: one registry for the process (a
// registry per seed costs more than the seed's decisions), which nothing reads.
var seriesNobodyReads = sync.OnceValue(func() *controller.Metrics { return controller.NewMetrics(prometheus.NewRegistry()) })

// epoch is the simulated clock's zero, as a time the decisions read (creation times, the news
// desk). A constant: nothing reads the wall clock.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// world is one seed's run: the scheduler, the apiserver, the replicas.
type world struct {
	opts     Options
	rng      *rand.Rand
	now      time.Duration
	seq      uint64
	queue    events
	api      *apiserver
	replicas []*replica
	steps    int
	faults   faults
	failed   string
	log      []string
	metrics  *controller.Metrics // the replicas' series
	running  *coroutine          // the lane request running now, if one is
}

// faults are this seed's probabilities and delays: each seed draws its own, so some runs are
// calm and others stormy.
type faults struct {
	slowNet      float64 // a request or response that takes up to a second
	lostRequest  float64
	lostResponse float64
	watchDup     float64
	watchBreak   float64
	pauseAfter   float64 // a replica pauses just after it handed a write to a lane
}

// Run simulates one seed.
func Run(seed uint64, opts Options) Result {
	w := &world{opts: opts, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), metrics: seriesNobodyReads()}
	w.faults = faults{
		slowNet:      w.rng.Float64() * 0.05,
		lostRequest:  w.rng.Float64() * 0.02,
		lostResponse: w.rng.Float64() * 0.05,
		watchDup:     w.rng.Float64() * 0.05,
		watchBreak:   w.rng.Float64() * 0.01,
		pauseAfter:   w.rng.Float64() * 0.3,
	}
	w.api = newAPIServer(w)
	n := 2 + w.rng.IntN(2)
	for i := range n {
		r := newReplica(w, fmt.Sprintf("r%d", i+1))
		w.replicas = append(w.replicas, r)
		w.api.watchers = append(w.api.watchers, r)
	}
	w.logf("seed %d: %d replicas, faults %+v", seed, n, w.faults)
	w.workload()
	for _, r := range w.replicas {
		r.start()
	}
	for w.failed == "" && w.queue.Len() > 0 {
		e := heap.Pop(&w.queue).(*event)
		if e.at > end {
			break
		}
		w.now = e.at
		if o := e.owner; o != nil {
			if o.epoch != e.epoch {
				continue // its process restarted: the goroutine that would run this is gone
			}
			if o.pausedUntil > w.now {
				w.postpone(e, o.pausedUntil)
				continue
			}
		}
		w.steps++
		e.run()
	}
	if w.failed == "" {
		w.now = end
		w.checkQuiet()
	}
	for _, r := range w.replicas {
		r.stopCoroutines() // their coroutines end with the seed
	}
	return Result{Seed: seed, Steps: w.steps, Violation: w.failed, Transcript: w.log}
}

// busy reports whether the workload and the faults still run.
func (w *world) busy() bool { return w.now < busyUntil }

// logf records a step of the transcript (only with Options.Transcript: formatting costs).
func (w *world) logf(format string, args ...any) {
	if w.opts.Transcript {
		w.log = append(w.log, fmt.Sprintf("%9.3fs %s", w.now.Seconds(), fmt.Sprintf(format, args...)))
	}
}

// fail records the first invariant that broke; the run stops.
func (w *world) fail(format string, args ...any) {
	if w.failed == "" {
		w.failed = fmt.Sprintf("%.3fs step %d: %s", w.now.Seconds(), w.steps, fmt.Sprintf(format, args...))
		w.logf("VIOLATION %s", w.failed)
	}
}

// after schedules fn after d, run by owner (nil: the apiserver or the workload, which never
// pause): a paused owner runs it once it wakes, a restarted one never.
func (w *world) after(d time.Duration, owner *replica, fn func()) {
	epoch := 0
	if owner != nil {
		epoch = owner.epoch
	}
	w.afterIn(d, owner, epoch, fn)
}

// afterIn is after for the owner's process of the given epoch: an answer to a request that
// process sent never reaches the process that replaced it.
func (w *world) afterIn(d time.Duration, owner *replica, epoch int, fn func()) {
	heap.Push(&w.queue, &event{at: w.now + d, seq: w.seq, owner: owner, epoch: epoch, run: fn})
	w.seq++
}

// postpone moves a paused owner's step to when it wakes, in a random order among the others
// due then: which of its goroutines runs first after a pause is the Go scheduler's choice.
func (w *world) postpone(e *event, wake time.Duration) {
	e.at = wake + time.Duration(w.rng.IntN(1000))*time.Microsecond
	e.seq = w.seq
	w.seq++
	heap.Push(&w.queue, e)
}

// between is a random duration in [lo, hi).
func (w *world) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}

func (w *world) chance(p float64) bool { return w.rng.Float64() < p }

// netDelay is one way across the network: about a millisecond, sometimes up to a second.
func (w *world) netDelay() time.Duration {
	if w.busy() && w.chance(w.faults.slowNet) {
		return w.between(10*time.Millisecond, time.Second)
	}
	return w.between(200*time.Microsecond, 3*time.Millisecond)
}

type event struct {
	at    time.Duration
	seq   uint64
	owner *replica
	epoch int
	run   func()
}

// events is the scheduler's queue: by time, then by the order they were scheduled.
type events []*event

func (q events) Len() int { return len(q) }
func (q events) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q events) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// Head is the first n lines of a transcript and its last m, for a report.
func Head(t []string, n, m int) string {
	if len(t) <= n+m {
		return strings.Join(t, "\n")
	}
	return strings.Join(t[:n], "\n") + fmt.Sprintf("\n... (%d steps) ...\n", len(t)-n-m) + strings.Join(t[len(t)-m:], "\n")
}
