package controller

import (
	"context"
	"slices"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
)

// poolWriteInterval is the least time between two status writes of one pool: a burst of
// allocations makes one write a second, not one per Service.
const poolWriteInterval = time.Second

// PoolReconciler feeds pool edits to the allocator and keeps each IPAddressPool's status true
// (decide.Pool): counts, waiting Services, the next addresses, those foreign hosts answer for
// (folded from the Speakers, decide.JudgeProbes, and given to the allocator to skip), the holds
// kept for deleted Services (ended here when their time is up), and its conditions.
type PoolReconciler struct {
	reader    client.Reader
	tell      *teller
	state     *state
	metrics   *Metrics
	writer    *statusWriter
	lastWrite map[string]time.Time
	news      *decide.NewsDesk // the problems the pool's Services share
}

func (r *PoolReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&porticov1.IPAddressPool{}).
		Named("ipaddresspool").
		WatchesRawSource(source.Channel(channel(r.state.dirty), &handler.EnqueueRequestForObject{})).
		Watches(&porticov1.Speaker{}, handler.EnqueueRequestsFromMapFunc(everyPool(r.reader)), builder.WithPredicates(foreignAnswersChanged)).
		Complete(r)
}

// Reconciling a pool looks at the book (what foreign hosts answer for, the holds whose time
// is up), then decides the pool's status (decide.Pool) and writes it, at most once a second.
func (r *PoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pool porticov1.IPAddressPool
	found, err := get(ctx, r.reader, req.NamespacedName, &pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	var speakers porticov1.SpeakerList
	var pools porticov1.IPAddressPoolList
	// Read only: no deep copy of every Speaker and pool on every pool reconcile.
	if err := r.reader.List(ctx, &speakers, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.reader.List(ctx, &pools, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	now := r.state.clock.Now()
	verdict := decide.JudgeProbes(speakers.Items, pools.Items, now)
	in := decide.PoolSeen{Pool: &pool, Pools: pools.Items, Proxies: verdict.Proxies[pool.Name], Now: now}
	var look decide.PoolsLook
	if err := r.state.withLock(ctx, nil, func(b *decide.Book, _ []porticov1.IPAddressPool) {
		look = b.LookAtPools(verdict.Answerers(), now)
		if found {
			in.Facts = b.PoolFacts(pool.Name)
			in.Facts.InUse = b.InUseIn(pool.Name, verdict.InUse)
		}
	}); err != nil {
		return ctrl.Result{}, err
	}
	r.state.retryServices(look.Retry)
	r.state.poolsDirty(slices.DeleteFunc(look.Dirty, func(n string) bool { return n == req.Name }))
	// A speaker that stops reporting, or a hold that ends, changes nothing the watch sees.
	again := decide.LookAgain(verdict.Expires, look.NextExpiry, now)
	if !found {
		r.metrics.poolGone(req.Name)
		delete(r.lastWrite, req.Name)
		return ctrl.Result{}, nil
	}
	r.metrics.pool(pool.Name, in.Facts, len(in.Proxies))
	// Within a poolWriteInterval of its last write a pool gets no other: it is decided once
	// the interval is over (in a burst of allocations, once a second, not once a Service).
	if wait := poolWriteInterval - now.Sub(r.lastWrite[pool.Name]); wait > 0 {
		if again > 0 {
			wait = min(wait, again)
		}
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if r.news != nil {
		in.Shared, in.SharedKnown = r.news.Shared(pool.Name)
	}
	return r.write(decide.Pool(in), now, again), nil
}

// write hands the pool's status to the status writer; its events are told once it lands.
func (r *PoolReconciler) write(rd decide.PoolReady, now time.Time, again time.Duration) ctrl.Result {
	if rd.Want == nil {
		return ctrl.Result{RequeueAfter: again}
	}
	r.lastWrite[rd.Want.Name] = now
	r.writer.submitStatus(rd.Want, writePart{retry: r.state.dirty, done: func(written client.Object) {
		for _, n := range rd.Tell {
			r.tell.notice(written, nil, n)
		}
	}})
	return ctrl.Result{RequeueAfter: again}
}
