package sim

import (
	"errors"
	"hash/fnv"
	"maps"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
	"github.com/portico-lb/portico/controller/decide/internal/testhook"
	"github.com/portico-lb/portico/rules"
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
	decision *decision // what it was decided from
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
	if r.w.opts.OldConflictRule {
		testhook.ReapplyAddressesOnConflict(r.writes)
	}
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

func ours(svc *corev1.Service) bool {
	return rules.Handles(svc, porticov1.DefaultLoadBalancerClass, true)
}

// withLock is state.withLock: the book loaded (rebuilt from a live list, fenced) and fed the
// cached pools; when they changed, the moved and waiting Services are decided again.
func (r *replica) withLock(fn func(*decide.Book)) {
	b := r.book
	if !b.Loaded() {
		b.SetPools(r.pools)
		r.known, r.kept = slices.Clone(r.pools), nil
		var stored []decide.Stored
		for _, svc := range r.w.api.list() { // live, not from the cache
			if ips := porticov1.IngressAddrs(svc); ours(svc) && len(ips) > 0 {
				req, _ := decide.Request(svc, r.pools, nil)
				stored = append(stored, decide.Stored{Created: svc.CreationTimestamp.Time, Key: svc.Namespace + "/" + svc.Name,
					ResourceVersion: svc.ResourceVersion, Request: req, IPs: ips})
				r.kept = append(r.kept, ips...)
			}
		}
		refused := b.Rebuild(stored, true)
		r.w.logf("%s rebuilds its book: %d Services hold addresses, %d refused", r.name, len(stored), len(refused))
	}
	changed, moved := b.SetPools(r.pools)
	if changed {
		r.known = append(r.known, r.pools...)
	}
	fn(b)
	if changed {
		for _, k := range append(slices.Sorted(slices.Values(moved)), b.WaitingServices()...) {
			r.enqueue(&r.svcQ, k)
		}
	}
}

// reconcileService is ServiceReconciler.Reconcile: gather, decide.Service, submit.
func (r *replica) reconcileService(key string) {
	if key == poolsKey {
		r.withLock(func(*decide.Book) {})
		return
	}
	in := decide.Seen{Key: key}
	svc, found := r.svcs[key]
	if found {
		svc = svc.DeepCopy()
		in.Svc, in.Ours = svc, ours(svc)
	}
	if in.Ours && meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionEndpointsReady) == nil {
		f := r.facts()
		in.Health = &f
	}
	var rd decide.Ready
	var behind bool
	r.withLock(func(b *decide.Book) {
		if behind = b.Behind(key, in.Svc); behind {
			return
		}
		switch {
		case in.Ours:
			in.Req, in.ReqErr = decide.Request(svc, r.pools, nil)
			in.Listed = porticov1.IngressAddrs(svc)
			for _, ip := range r.writes.MayList(key, svc) {
				if !slices.Contains(in.Listed, ip) {
					in.Listed = append(in.Listed, ip)
				}
			}
		case found:
			in.Listed = r.writes.MayList(key, svc)
		}
		rd = decide.Service(b, in)
	})
	if behind {
		if _, stored := r.w.api.get(key); found || stored {
			return // the cache's event brings it back
		}
		r.book.Unfence(key)
		r.reconcileService(key)
		return
	}
	for _, k := range rd.Retry {
		r.enqueue(&r.svcQ, k)
	}
	if found {
		r.submit(key, svc, rd.Apply, false)
	} else {
		r.writes.Forget(key)
	}
}

// reconcileHealth is HealthReconciler.Reconcile: decide.Health and the news desk.
func (r *replica) reconcileHealth(key string) {
	svc, found := r.svcs[key]
	if !found {
		r.desk.Forget(key)
		return
	}
	if !ours(svc) {
		r.desk.Forget(key)
		r.submit(key, svc, decide.Ready{Remove: decide.HealthConditionTypes}.Apply, true)
		return
	}
	if meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionIPAllocated) == nil {
		return
	}
	rd, again := decide.Health(svc, r.facts(), r.desk, epoch.Add(r.w.now))
	if rd.Writes() {
		// healthPart: conditions go only on a Service still ours when the write is rebased.
		r.submit(key, svc, func(want *corev1.Service) {
			if ours(want) {
				rd.Apply(want)
			}
		}, true)
	}
	if again > 0 {
		r.w.after(again, r, func() { r.enqueue(&r.healthQ, key) })
	}
}

// facts are the health facts: no nodes, speakers or endpoints in this world, only the pools.
func (r *replica) facts() decide.HealthFacts {
	return decide.HealthFacts{Cluster: rules.Cluster{Pools: r.pools}}
}

// submit is statusWriter.submit: decide.Writes says whether to send; a lane sends.
func (r *replica) submit(key string, cached *corev1.Service, apply func(*corev1.Service), health bool) {
	wr := r.writes.Submit(key, cached, r.onSimClock(apply))
	if wr == nil {
		return
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	j := &job{Write: wr, health: health, lane: int(h.Sum32() % writeLanes), decision: &decision{replica: r.name, edit: edits(cached), allocation: !health, pools: r.known, kept: r.kept}}
	r.w.logf("%s decides %s: %s (from rv %s)", r.name, j.what(), describe(wr.Want), wr.Want.ResourceVersion)
	r.lanes[j.lane].jobs = append(r.lanes[j.lane].jobs, j)
	r.kick(j.lane)
	if r.w.busy() && r.w.chance(r.w.faults.pauseAfter) {
		r.pause(r.w.between(leaseDuration+time.Second, 3*leaseDuration))
	}
}

// onSimClock stamps the conditions apply sets with the simulated time: meta.SetStatusCondition
// takes the wall clock for a changed condition's lastTransitionTime, which would make the news
// desk's timing, and the writes compared with each other, depend on the machine.
func (r *replica) onSimClock(apply func(*corev1.Service)) func(*corev1.Service) {
	return func(svc *corev1.Service) {
		apply(svc)
		for i := range svc.Status.Conditions {
			if t := &svc.Status.Conditions[i].LastTransitionTime; t.Time.Before(epoch) || t.Time.After(epoch.Add(end)) {
				t.Time = epoch.Add(r.w.now)
			}
		}
	}
}

func (j *job) what() string {
	if j.health {
		return "health write for " + j.Key
	}
	return "allocation write for " + j.Key
}

func (r *replica) kick(i int) {
	if l := &r.lanes[i]; !l.busy && len(l.jobs) > 0 {
		l.busy = true
		r.w.after(r.w.between(10*time.Microsecond, 500*time.Microsecond), r, func() { r.runLane(i) })
	}
}

// runLane is one step of a lane: it sends its oldest write.
func (r *replica) runLane(i int) {
	l := &r.lanes[i]
	if !r.leading || len(l.jobs) == 0 {
		l.busy = false
		return
	}
	j := l.jobs[0]
	l.jobs = l.jobs[1:]
	r.send(j, j.Want.DeepCopy(), "")
}

// mayWrite is the check before every request: the leader context, and (unless NoLeaseCheck)
// a renewal within the renew deadline by the replica's own clock.
func (r *replica) mayWrite() error {
	if !r.leading {
		return errCancelled
	}
	if !r.w.opts.NoLeaseCheck && r.w.now-r.lastRenew >= renewDeadline {
		return errNoLease
	}
	return nil
}

// send sends one status update; a conflict is rebased (once), as the lane does.
func (r *replica) send(j *job, obj *corev1.Service, rebased string) {
	if err := r.mayWrite(); err != nil {
		r.w.logf("%s does not send its %s: %v", r.name, j.what(), err)
		r.finish(j, "", err)
		return
	}
	by := r.name + "'s " + j.what() + rebased
	base := obj.ResourceVersion
	r.request(func() error { return r.w.api.updateStatus(obj, by, j.decision) }, func(err error) {
		if apierrors.IsConflict(err) && rebased == "" {
			r.rebase(j)
			return
		}
		r.finish(j, base, err)
	})
}

// rebase reads the Service as stored now and sends what decide.Writes.Rebase makes of the job.
func (r *replica) rebase(j *job) {
	var cur *corev1.Service
	r.request(func() error {
		var ok bool
		if cur, ok = r.w.api.get(j.Key); !ok {
			return apierrors.NewNotFound(serviceResource, j.Key)
		}
		return nil
	}, func(err error) {
		if err != nil {
			r.finish(j, "", err)
			return
		}
		sent, err := r.writes.Rebase(j.Write, cur)
		if sent == nil || err != nil {
			if err != nil {
				r.w.logf("%s drops its %s: %v", r.name, j.what(), err)
			}
			r.finish(j, "", err)
			return
		}
		// Whose write it met: the issue-30 bug is a rebase over another replica's (the next
		// leader's) write.
		over := " (rebased over the user's edit)"
		if w := r.w.api.writer[j.Key]; w == r.name {
			over = " (rebased over its own write)"
		} else if w != "user" {
			over = " (rebased over " + w + "'s write)"
		}
		r.send(j, sent, over)
	})
}

// finish is the end of a lane's write: the bookkeeping, a retry through the reconciler's
// queue after a failure, and the lane's next write.
func (r *replica) finish(j *job, base string, err error) {
	r.writes.Done(j.Write)
	backoff := r.writes.Finished(j.Write, base, err)
	if err != nil {
		q := &r.svcQ
		if j.health {
			q = &r.healthQ
		}
		r.w.after(backoff, r, func() { r.enqueue(q, j.Key) })
	}
	r.lanes[j.lane].busy = false
	r.kick(j.lane)
}

// request is one round trip to the apiserver: do runs there, done back here with its error.
// A request or its answer may be lost (the client times out, not knowing whether it landed).
func (r *replica) request(do func() error, done func(error)) {
	w, epoch := r.w, r.epoch
	back := func(d time.Duration, err error) { w.afterIn(d, r, epoch, func() { done(err) }) }
	timeout := w.between(time.Second, 3*time.Second)
	if w.busy() && w.chance(w.faults.lostRequest) {
		back(timeout, errTimeout)
		return
	}
	sent := w.now
	w.after(w.netDelay(), nil, func() {
		err := do()
		if w.busy() && w.chance(w.faults.lostResponse) {
			back(max(sent+timeout-w.now, 0), errTimeout)
			return
		}
		back(w.netDelay(), err)
	})
}
