package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// The ports a replica's controller.Shell runs on (controller.Ports): its informer cache, the
// simulated apiserver, its lease fence, the simulated clock and lanes that run as steps of the
// world. One set per process that leads: a process that exits closes them.

// term is one process's leadership: from winning the lease to the process's exit.
type term struct {
	r       *replica
	epoch   int
	leading context.Context
	end     context.CancelFunc
	lanes   [8]lane
}

// over says whether the process the term belongs to has exited.
func (t *term) over() bool { return t.r.epoch != t.epoch }

type lane struct {
	jobs      []laneJob
	busy      bool
	coroutine *coroutine // made at the lane's first request
}

type laneJob struct {
	send func(context.Context)
	d    *decision
}

// Send queues a request on lane i (controller.LaneScheduler), with the decision it carries: the
// reconcile that hands it over is running now (replica.deciding).
func (t *term) Send(i int, send func(context.Context)) bool {
	if t.over() {
		return false
	}
	r := t.r
	d := r.deciding
	r.w.logf("%s hands %s to lane %d", r.name, d.what(), i)
	t.lanes[i].jobs = append(t.lanes[i].jobs, laneJob{send: send, d: d})
	t.kick(i)
	if r.w.busy() && r.w.chance(r.w.faults.pauseAfter) {
		r.pause(r.w.between(leaseDuration+time.Second, 3*leaseDuration))
	}
	return true
}

// After runs fn after d on the process, unless it exits first (controller.LaneScheduler).
func (t *term) After(d time.Duration, fn func(context.Context)) {
	if t.over() {
		return
	}
	t.r.w.afterIn(d, t.r, t.epoch, func() { fn(t.leading) })
}

func (t *term) kick(i int) {
	if l := &t.lanes[i]; !l.busy && len(l.jobs) > 0 {
		l.busy = true
		t.r.w.afterIn(t.r.w.between(10*time.Microsecond, 500*time.Microsecond), t.r, t.epoch, func() { t.runLane(i) })
	}
}

// runLane is one step of a lane: its oldest request runs as a coroutine until it is answered.
func (t *term) runLane(i int) {
	l := &t.lanes[i]
	if len(l.jobs) == 0 {
		l.busy = false
		return
	}
	j := l.jobs[0]
	l.jobs = l.jobs[1:]
	if l.coroutine == nil {
		l.coroutine = t.r.newCoroutine()
	}
	l.coroutine.run(j.d, func() { j.send(t.leading) }, func() {
		if !t.over() {
			l.busy = false
			t.kick(i)
		}
	})
}

// clock is the simulated clock as controller.Clock: timers are steps of the process.
type clock struct{ r *replica }

func (c clock) Now() time.Time { return epoch.Add(c.r.w.now) }

func (c clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c clock) AfterFunc(d time.Duration, f func()) {
	c.r.w.after(d, c.r, f)
}

// statusUpdates sends status updates to the simulated apiserver (controller.StatusUpdater): a
// round trip from a lane's coroutine.
type statusUpdates struct{ r *replica }

func (u statusUpdates) Update(_ context.Context, obj client.Object, _ ...client.SubResourceUpdateOption) error {
	r := u.r
	d := r.w.running.d
	by := r.name + "'s " + d.what()
	if d.rv != "" && obj.GetResourceVersion() != d.rv {
		// Sent on another version than it was decided from: the writer rebased it after a
		// conflict. Whose write it met: issue 30's bug is a rebase over the next leader's.
		switch w := r.w.api.writer[d.key]; w {
		case r.name:
			by += " (rebased over its own write)"
		case "user":
			by += " (rebased over the user's edit)"
		default:
			by += " (rebased over " + w + "'s write)"
		}
	}
	return r.roundTrip(func() error { return r.w.api.updateStatus(obj, by, d) })
}

// roundTrip is one request from the running coroutine to the apiserver: do runs there, and the
// coroutine goes on with its answer. A request or its answer may be lost (the client times out, not
// knowing whether it landed).
func (r *replica) roundTrip(do func() error) error {
	w := r.w
	var answer error
	ok := w.await(func(wake func()) {
		ep := r.epoch
		back := func(d time.Duration, err error) {
			w.afterIn(d, r, ep, func() { answer = err; wake() })
		}
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
	})
	if !ok {
		return errCancelled
	}
	return answer
}

// cacheReader reads a replica's informer cache (controller.Ports.Cache): what the watch has
// delivered to it.
type cacheReader struct{ r *replica }

func (c cacheReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r := c.r
	switch o := obj.(type) {
	case *corev1.Service:
		if svc, ok := r.svcs[key.String()]; ok {
			svc.DeepCopyInto(o)
			return nil
		}
	case *porticov1.IPAddressPool:
		if i := slices.IndexFunc(r.pools, func(p porticov1.IPAddressPool) bool { return p.Name == key.Name }); i >= 0 {
			r.pools[i].DeepCopyInto(o)
			return nil
		}
	case *corev1.Namespace:
		if labels, ok := r.namespaces[key.Name]; ok {
			o.Name, o.Labels = key.Name, labels
			return nil
		}
	default:
		panic(fmt.Sprintf("the simulated cache holds no %T", obj))
	}
	return apierrors.NewNotFound(corev1.Resource("object"), key.String())
}

func (c cacheReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r := c.r
	o := (&client.ListOptions{}).ApplyOptions(opts)
	switch l := list.(type) {
	case *porticov1.IPAddressPoolList:
		l.Items = r.pools // shared: the shell reads pools only, as an informer's cache lets it
	case *corev1.ServiceList:
		l.Items = nil
		var ip string
		if o.FieldSelector != nil && !o.FieldSelector.Empty() {
			ip = o.FieldSelector.Requirements()[0].Value // the index of ingress addresses
		}
		for _, k := range r.svcKeys() {
			svc := r.svcs[k]
			if (o.Namespace == "" || svc.Namespace == o.Namespace) && (ip == "" || listsIP(svc, ip)) {
				l.Items = append(l.Items, *svc)
			}
		}
	default: // no Speakers, EndpointSlices or Pods in this world
	}
	return nil
}

func listsIP(svc *corev1.Service, ip string) bool {
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP == ip {
			return true
		}
	}
	return false
}

// liveReader reads the simulated apiserver (controller.Ports.Live). From a lane's coroutine a read
// is a round trip; a reconciler's (a new leader's rebuild, a fenced Service's check) is
// answered at once. What a rebuild lists is what the process knows: the pools it may give
// addresses of, the addresses it restores.
type liveReader struct{ r *replica }

func (l liveReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r := l.r
	svc, ok := obj.(*corev1.Service)
	if !ok {
		panic(fmt.Sprintf("the simulated apiserver is not asked for %T", obj))
	}
	get := func() error {
		cur, found := r.w.api.get(key.String())
		if !found {
			return apierrors.NewNotFound(corev1.Resource("services"), key.Name)
		}
		cur.DeepCopyInto(svc)
		return nil
	}
	if r.w.running == nil {
		return get()
	}
	return r.roundTrip(get)
}

func (l liveReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	r := l.r
	switch o := list.(type) {
	case *corev1.ServiceList:
		o.Items = nil
		for _, svc := range r.w.api.list() {
			o.Items = append(o.Items, *svc)
			if ours(svc) {
				r.kept = append(r.kept, porticov1.IngressAddrs(svc)...)
			}
		}
	case *porticov1.IPAddressPoolList:
		o.Items = r.w.api.poolList()
		r.know(o.Items)
	default:
		panic(fmt.Sprintf("the simulated apiserver is not asked for %T", list))
	}
	return nil
}

// sortedStore is an informer store of the simulated cache (controller.Stores) that lists in a
// fixed order, so that a seed replays: only List is read.
type sortedStore struct {
	toolscache.Store
	list func() []any
}

func (s sortedStore) List() []any { return s.list() }

// noObjects is the store of a kind this world has none of.
var noObjects = sortedStore{list: func() []any { return nil }}
