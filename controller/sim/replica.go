package sim

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
	"github.com/portico-lb/portico/rules"
)

// replica is one portico-controller process: its informer cache, its leader elector and lease
// fence, and, while it leads, controller's own shell (controller.Shell: the Service, health and
// pool reconcilers, one worker each, the book and the status writer) on ports this world fills.
type replica struct {
	w           *world
	name        string
	epoch       int // bumped when the process ends: its pending steps are dropped
	up          bool
	pausedUntil time.Duration

	svcs        map[string]*corev1.Service // the cache
	keys        []string                   // svcs' keys, sorted; nil: to sort again
	pools       []porticov1.IPAddressPool
	namespaces  map[string]map[string]string // namespace → its labels
	synced      bool
	watchQ      []watchEvent
	watchBroken bool

	leading    bool // its leader context is not cancelled: the reconcilers and lanes run
	fence      *controller.LeaseFence
	observed   lease
	observedAt time.Duration

	shell      *controller.Shell
	term       *term
	coroutines []*coroutine              // its lanes' requests in flight
	deciding   *decision                 // what the reconcile running now decides from
	known      []porticov1.IPAddressPool // every pool version it was given: it gives only their addresses
	kept       []netip.Addr              // and those it restored from stored status (orphans among them)
	svcQ       workQueue
	healthQ    workQueue
	poolQ      workQueue
}

// workQueue is a reconciler's queue: a key waits once, in order.
type workQueue struct {
	keys []string
	busy bool
}

func newReplica(w *world, name string) *replica { return &replica{w: w, name: name} }

var (
	errTimeout   = errors.New("request timed out")
	errCancelled = errors.New("context canceled")
)

// ours is rules.Handles with the default class, as portico-controller runs.
func ours(svc *corev1.Service) bool {
	return rules.Handles(svc, porticov1.DefaultLoadBalancerClass, true)
}

// start starts the process: its informers list, its elector tries for the lease.
func (r *replica) start() {
	r.up = true
	r.svcs, r.keys, r.pools, r.namespaces, r.synced, r.watchQ, r.watchBroken = map[string]*corev1.Service{}, nil, nil, nil, false, nil, false
	r.leading, r.observed, r.observedAt = false, lease{}, r.w.now
	r.fence = controller.NewLeaseFence(renewDeadline, clock{r})
	r.w.logf("%s starts", r.name)
	r.w.after(r.w.between(50*time.Millisecond, time.Second), r, r.relist)
	r.w.after(r.w.between(0, retryPeriod), r, r.tick)
}

// stop ends the process: whatever it had scheduled never runs, its requests in flight are
// never answered.
func (r *replica) stop(why string) {
	r.w.logf("%s exits: %s", r.name, why)
	r.epoch++
	r.up, r.leading, r.pausedUntil = false, false, 0
	if r.term != nil {
		r.term.end()
	}
	r.stopCoroutines()
	r.shell, r.term, r.known, r.kept = nil, nil, nil, nil
	r.svcQ, r.healthQ, r.poolQ = workQueue{}, workQueue{}, workQueue{}
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

// tick is the leader elector, every retryPeriod: a leader renews (its fence counts from the
// renewal), or learns it lost the lease and exits (controller-runtime then ends the process);
// a follower takes the lease once it has not seen it renewed for leaseDuration.
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
		r.w.api.lease.renew = r.w.now
		r.fence.Renewed(epoch.Add(r.w.now))
		r.observed, r.observedAt = r.w.api.lease, r.w.now
		return
	}
	if !r.synced || !r.w.api.acquire(r.name, r.observedAt) {
		return
	}
	r.fence.Renewed(epoch.Add(r.w.now))
	r.observed, r.observedAt = r.w.api.lease, r.w.now
	r.lead()
}

// lead starts what runs on the leader: the shell on this process's ports, its lanes.
func (r *replica) lead() {
	r.leading = true
	t := &term{r: r, epoch: r.epoch}
	t.leading, t.end = context.WithCancel(context.Background())
	r.term = t
	var status controller.StatusUpdater = statusUpdates{r}
	if !r.w.opts.NoLeaseCheck {
		status = r.fence.Updates(status)
	}
	pools := sortedStore{list: func() []any {
		out := make([]any, len(r.pools))
		for i := range r.pools {
			out[i] = &r.pools[i]
		}
		return out
	}}
	queues := controller.Queues{Services: queue{t, &r.svcQ}, Health: queue{t, &r.healthQ}, Pools: queue{t, &r.poolQ}}
	r.shell = controller.NewShell(controller.Ports{Cache: cacheReader{r}, Live: liveReader{r}, Status: status, Clock: clock{r}, Lanes: t, Queues: queues,
		Stores: controller.Stores{Speakers: noObjects, L2Advertisements: noObjects, BGPAdvertisements: noObjects, BGPPeers: noObjects, Pools: pools, Nodes: noObjects}},
		controller.Options{Metrics: r.w.metrics})
	r.shell.Seed(r.w.opts.Bugs)
	r.w.logf("%s leads", r.name)
	// The leader's first review, once its cache has synced; then the controllers start: their
	// first list puts every cached object in their queues.
	r.shell.ReviewFirst(t.leading)
	for _, p := range r.pools {
		r.enqueue(&r.poolQ, p.Name)
	}
	for _, k := range r.svcKeys() {
		r.enqueue(&r.svcQ, k)
		r.enqueue(&r.healthQ, k)
	}
}

// queue is a reconciler's queue as the shell's controller.Queue.
type queue struct {
	t *term
	q *workQueue
}

func (q queue) Add(_ context.Context, key types.NamespacedName) {
	if q.t.over() {
		return
	}
	k := key.Name
	if key.Namespace != "" {
		k = key.String()
	}
	q.t.r.enqueue(q.q, k)
}

func (r *replica) svcKeys() []string {
	if r.keys == nil {
		r.keys = slices.Sorted(maps.Keys(r.svcs))
	}
	return r.keys
}

// watchEvent is what a watch delivers: a Service (nil: deleted), the pools or the namespaces.
type watchEvent struct {
	key        string // the Service, or the pool that changed
	svc        *corev1.Service
	pool       bool // a pool changed: pools is the whole list, as a relist would give
	pools      []porticov1.IPAddressPool
	namespaces map[string]map[string]string
	namespace  string // the namespace whose labels changed
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
	switch {
	case ev.pool:
		r.setPools(ev.pools, ev.key)
	case ev.namespaces != nil:
		r.namespaces = ev.namespaces
		for _, k := range r.waitingIn(ev.namespace) {
			r.enqueue(&r.svcQ, k)
		}
	case ev.svc == nil:
		delete(r.svcs, ev.key)
		r.keys = nil
		r.serviceChanged(ev.key)
	default:
		if _, ok := r.svcs[ev.key]; !ok {
			r.keys = nil
		}
		r.svcs[ev.key] = ev.svc
		r.serviceChanged(ev.key)
	}
}

// setPools puts the pools in the cache; the one that changed reconciles (the pool reconciler's
// watch), every one, those gone too, after a relist (changed "").
func (r *replica) setPools(pools []porticov1.IPAddressPool, changed string) {
	names := map[string]bool{changed: true}
	if changed == "" {
		for _, p := range append(r.pools, pools...) {
			names[p.Name] = true
		}
		delete(names, "")
	}
	r.pools = pools
	r.know(pools)
	for _, n := range slices.Sorted(maps.Keys(names)) {
		r.enqueue(&r.poolQ, n)
	}
}

// know adds the pools' versions the process did not know (by generation: a status write
// changes no address).
func (r *replica) know(pools []porticov1.IPAddressPool) {
	for _, p := range pools {
		if !slices.ContainsFunc(r.known, func(k porticov1.IPAddressPool) bool { return k.Name == p.Name && k.Generation == p.Generation }) {
			r.known = append(r.known, p)
		}
	}
}

func (r *replica) serviceChanged(key string) {
	r.enqueue(&r.svcQ, key)
	r.enqueue(&r.healthQ, key)
}

// waitingIn is the Service reconciler's watch of Namespaces: the waiting Services of one.
func (r *replica) waitingIn(namespace string) []string {
	if r.shell == nil {
		return nil
	}
	var keys []string
	for _, k := range r.shell.WaitingIn(namespace) {
		keys = append(keys, k.String())
	}
	return keys
}

// relist replaces the cache with what the apiserver stores now, as an informer's list does.
func (r *replica) relist() {
	gone := r.svcs
	r.svcs, r.keys = map[string]*corev1.Service{}, nil
	for _, svc := range r.w.api.list() {
		r.svcs[svc.Namespace+"/"+svc.Name] = svc
	}
	r.namespaces, r.synced, r.watchQ, r.watchBroken = r.w.api.namespaceLabels(), true, nil, false
	r.setPools(r.w.api.poolList(), "")
	for _, k := range slices.Sorted(maps.Keys(gone)) {
		r.serviceChanged(k)
	}
	for _, k := range r.svcKeys() {
		r.serviceChanged(k)
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
	r.reconcile(q, key)
	if len(q.keys) > 0 && !q.busy {
		q.busy = true
		r.w.after(r.w.between(20*time.Microsecond, time.Millisecond), r, func() { r.work(q) })
	}
}

// reconcile runs one of the shell's reconcilers for key, as its controller's worker does: a
// result asking to look again is a later enqueue, an error one after a short backoff.
func (r *replica) reconcile(q *workQueue, key string) {
	ctx := r.term.leading
	ns, name, _ := cutKey(key)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
	d := &decision{replica: r.name, key: key, pools: r.known, kept: r.kept}
	if svc, ok := r.svcs[key]; ok {
		d.edit, d.rv = edits(svc), svc.ResourceVersion
	}
	var res ctrl.Result
	var err error
	switch q {
	case &r.svcQ:
		d.allocation = true
		r.deciding = d
		res, err = r.shell.Services.Reconcile(ctx, req)
	case &r.healthQ:
		r.deciding = d
		res, err = r.shell.Health.Reconcile(ctx, req)
	default:
		d.pool = true
		r.deciding = d
		res, err = r.shell.Pools.Reconcile(ctx, req)
	}
	r.deciding = nil
	again := res.RequeueAfter
	if err != nil {
		again = 5 * time.Millisecond
	}
	if again > 0 {
		r.w.after(again, r, func() { r.enqueue(q, key) })
	}
}

// cutKey splits namespace/name; a pool's key is its name.
func cutKey(key string) (namespace, name string, ok bool) {
	for i := range key {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}
