package sim

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
)

// replica is one portico-controller process: its informer cache, its leader elector and,
// while it leads, the Service and health reconcilers (one worker each) and the status writer's
// lanes, as controller/ wires them, calling the real decide package.
type replica struct {
	w           *world
	name        string
	epoch       int // bumped when the process ends: its pending steps are dropped
	up          bool
	pausedUntil time.Duration

	svcs        map[string]*corev1.Service // the cache
	pools       []porticov1.IPAddressPool
	synced      bool
	watchQ      []watchEvent
	watchBroken bool

	leading    bool // its leader context is not cancelled: the reconcilers and lanes run
	lastRenew  time.Duration
	observed   lease
	observedAt time.Duration

	book    *decide.Book
	known   []porticov1.IPAddressPool // every pool version the book was fed: it gives only their addresses
	kept    []netip.Addr              // and those it restored from stored status (orphans among them)
	writes  *decide.Writes
	desk    *decide.NewsDesk
	svcQ    workQueue
	healthQ workQueue
	lanes   [writeLanes]lane
	// holdsAt is when the book's soonest hold ends and a look at it is scheduled: the pool
	// reconciler's requeue.
	holdsAt time.Time
}

// writeLanes as in controller/writer.go: writes for one Service keep their order.
const writeLanes = 8

type lane struct {
	jobs []*job
	busy bool
}

type job struct {
	*decide.Write
	health   bool // the health reconciler's part (else the allocation's)
	lane     int
	decision *decision             // what it was decided from
	apply    func(*corev1.Service) // the part, for OldConflictRule's rebase
}

// workQueue is a reconciler's queue: a key waits once, in order.
type workQueue struct {
	keys []string
	busy bool
}

func newReplica(w *world, name string) *replica { return &replica{w: w, name: name} }

// poolsKey in the Service queue stands for the pool reconciler's sync of the book's pools.
const poolsKey = ""

var (
	errTimeout   = errors.New("request timed out")
	errNoLease   = errors.New("cannot prove it holds the lease: not writing")
	errCancelled = errors.New("context canceled")
)

// start starts the process: its informers list, its elector tries for the lease.
func (r *replica) start() {
	r.up = true
	r.svcs, r.pools, r.synced, r.watchQ, r.watchBroken = map[string]*corev1.Service{}, nil, false, nil, false
	r.leading, r.observed, r.observedAt = false, lease{}, r.w.now
	r.w.logf("%s starts", r.name)
	r.w.after(r.w.between(50*time.Millisecond, time.Second), r, r.relist)
	r.w.after(r.w.between(0, retryPeriod), r, r.tick)
}

// stop ends the process: whatever it had scheduled never runs.
func (r *replica) stop(why string) {
	r.w.logf("%s exits: %s", r.name, why)
	r.epoch++
	r.up, r.leading, r.pausedUntil = false, false, 0
	r.book, r.writes, r.desk = nil, nil, nil
	r.svcQ, r.healthQ, r.lanes = workQueue{}, workQueue{}, [writeLanes]lane{}
}

// restart is a crash and the Deployment's restart.
func (r *replica) restart(why string) {
	if !r.up {
		return
	}
	r.stop(why)
	r.w.after(r.w.between(time.Second, 3*time.Second), nil, r.start)
}

func (r *replica) pause(d time.Duration) {
	if !r.up {
		return
	}
	r.pausedUntil = max(r.pausedUntil, r.w.now+d)
	r.w.logf("%s pauses for %s (leading: %v)", r.name, d.Round(time.Millisecond), r.leading)
}

// tick is the leader elector, every retryPeriod: a leader renews, or learns it lost the lease
// and exits (controller-runtime then ends the process); a follower takes the lease once it
// has not seen it renewed for leaseDuration.
func (r *replica) tick() {
	r.w.after(retryPeriod, r, r.tick)
	l := r.w.api.lease
	if l != r.observed {
		r.observed, r.observedAt = l, r.w.now
	}
	if r.leading {
		if l.holder != r.name {
			r.restart("leader election lost (the lease is " + l.holder + "'s)")
			return
		}
		r.w.api.lease.renew, r.lastRenew = r.w.now, r.w.now
		r.observed, r.observedAt = r.w.api.lease, r.w.now
		return
	}
	if !r.synced || !r.w.api.acquire(r.name, r.observedAt) {
		return
	}
	r.leading, r.lastRenew = true, r.w.now
	r.observed, r.observedAt = r.w.api.lease, r.w.now
	r.book, r.writes, r.desk = decide.NewBook(), decide.NewWrites(), decide.NewNewsDesk(0, time.Time{})
	r.holdsAt = time.Time{}
	r.w.logf("%s leads", r.name)
	// The controllers start: their first list puts every cached object in their queues.
	r.enqueue(&r.svcQ, poolsKey)
	for _, k := range slices.Sorted(maps.Keys(r.svcs)) {
		r.enqueue(&r.svcQ, k)
		r.enqueue(&r.healthQ, k)
	}
}

// watch takes an event the apiserver sends this replica's informers.
func (r *replica) watch(ev watchEvent) {
	if !r.up || !r.synced || r.watchBroken {
		return
	}
	r.watchQ = append(r.watchQ, ev)
	n := 1
	if r.w.busy() && r.w.chance(r.w.faults.watchDup) {
		r.watchQ, n = append(r.watchQ, ev), 2
	}
	for range n {
		d := r.w.between(time.Millisecond, 20*time.Millisecond)
		if r.w.busy() && r.w.chance(r.w.faults.slowNet) {
			d = r.w.between(100*time.Millisecond, 2*time.Second)
		}
		r.w.after(d, r, r.deliver)
	}
}

// deliver hands the oldest event of the watch to the cache: a watch keeps its order.
func (r *replica) deliver() {
	if len(r.watchQ) == 0 {
		return
	}
	if r.w.busy() && r.w.chance(r.w.faults.watchBreak) {
		r.w.logf("%s: its watch breaks; it lists again later", r.name)
		r.watchQ, r.watchBroken = nil, true
		r.w.after(r.w.between(time.Second, 5*time.Second), r, r.relist)
		return
	}
	ev := r.watchQ[0]
	r.watchQ = r.watchQ[1:]
	if ev.pools != nil || ev.key == "" {
		r.pools = ev.pools
		r.enqueue(&r.svcQ, poolsKey)
		return
	}
	if ev.svc == nil {
		delete(r.svcs, ev.key)
	} else {
		r.svcs[ev.key] = ev.svc
	}
	r.enqueue(&r.svcQ, ev.key)
	r.enqueue(&r.healthQ, ev.key)
}

// relist replaces the cache with what the apiserver stores now, as an informer's list does.
func (r *replica) relist() {
	gone := r.svcs
	r.svcs = map[string]*corev1.Service{}
	for _, svc := range r.w.api.list() {
		r.svcs[svc.Namespace+"/"+svc.Name] = svc
	}
	r.pools, r.synced, r.watchQ, r.watchBroken = r.w.api.poolList(), true, nil, false
	r.enqueue(&r.svcQ, poolsKey)
	for _, k := range slices.Sorted(maps.Keys(gone)) {
		r.enqueue(&r.svcQ, k)
		r.enqueue(&r.healthQ, k)
	}
	for _, k := range slices.Sorted(maps.Keys(r.svcs)) {
		r.enqueue(&r.svcQ, k)
		r.enqueue(&r.healthQ, k)
	}
}

// enqueue puts a key in a reconciler's queue (once) and wakes its worker.
func (r *replica) enqueue(q *workQueue, key string) {
	if !r.leading {
		return
	}
	if !slices.Contains(q.keys, key) {
		q.keys = append(q.keys, key)
	}
	if !q.busy {
		q.busy = true
		r.w.after(r.w.between(20*time.Microsecond, time.Millisecond), r, func() { r.work(q) })
	}
}

// work is a reconciler's worker: one key at a time.
func (r *replica) work(q *workQueue) {
	q.busy = false
	if !r.leading || len(q.keys) == 0 {
		return
	}
	key := q.keys[0]
	q.keys = q.keys[1:]
	if q == &r.svcQ {
		r.reconcileService(key)
	} else {
		r.reconcileHealth(key)
	}
	if len(q.keys) > 0 && !q.busy {
		q.busy = true
		r.w.after(r.w.between(20*time.Microsecond, time.Millisecond), r, func() { r.work(q) })
	}
}
