package sim

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
	"github.com/portico-lb/portico/rules"
)

// ours is rules.Handles with the default class, as portico-controller runs.
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
				stored = append(stored, decide.StoredOf(svc, req))
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
	if r.w.opts.AddressHolds {
		in.Now = epoch.Add(r.w.now)
		defer r.lookAtHolds()
	}
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

// lookAtHolds schedules what the pool reconciler does when the book's soonest hold ends: end
// the holds whose time is up, and retry the waiting Services.
func (r *replica) lookAtHolds() {
	next := r.book.NextExpiry()
	if next.IsZero() || next.Equal(r.holdsAt) {
		return
	}
	r.holdsAt = next
	r.w.after(next.Sub(epoch.Add(r.w.now)), r, func() {
		r.holdsAt = time.Time{}
		if !r.leading {
			return
		}
		var retry []string
		r.withLock(func(b *decide.Book) {
			if ended := b.ExpireHolds(epoch.Add(r.w.now)); len(ended) > 0 {
				retry = b.WaitingServices()
				r.w.logf("%s ends holds in %v; retries %v", r.name, ended, retry)
			}
		})
		for _, k := range retry {
			r.enqueue(&r.svcQ, k)
		}
		r.lookAtHolds()
	})
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
