package controller

import (
	"context"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
)

// ServiceReconciler gives LoadBalancer Services addresses and says in their status how it went.
type ServiceReconciler struct {
	reader  client.Reader
	tell    *teller
	state   *state
	metrics *Metrics
	writer  *statusWriter
	// cluster lets a new Service's health facts be gathered here, so its first status write
	// carries the health conditions with the address: one write per new Service, not two.
	cluster *clusterKinds
}

func (r *ServiceReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.Service{}).
		Named("service").
		// One worker decides, in queue order (the allocator is one state machine and a decision
		// costs microseconds); the status writer sends the results in parallel.
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		WatchesRawSource(source.Channel(channel(r.state.retry), &handler.EnqueueRequestForObject{})).
		// A namespace's labels decide which pools' namespaceSelectors take its Services.
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.waitingIn)).
		Complete(r)
}

// waitingIn lists the waiting Services of a namespace whose labels may have changed; Services
// that hold addresses keep them either way.
func (r *ServiceReconciler) waitingIn(_ context.Context, ns client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	for _, key := range r.state.waiting() {
		if namespace, name, _ := strings.Cut(key, "/"); namespace == ns.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}})
		}
	}
	return reqs
}

// Reconcile follows a Service from its watch event to its status write: gather what the
// apiserver says of it, decide (controller/decide: pure), write the decision and wake who it names.
func (r *ServiceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	in := decide.Seen{Key: req.Namespace + "/" + req.Name, Now: r.state.clock.Now()}
	var svc corev1.Service
	found, err := get(ctx, r.reader, req.NamespacedName, &svc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if found {
		in.Svc, in.Ours = &svc, r.state.ours(&svc)
	}
	if in.Ours && meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionEndpointsReady) == nil {
		if facts, err := gatherHealth(ctx, r.reader, r.cluster, r.state.ours, &svc); err == nil { // else the health reconciler writes them on its own
			in.Health = &facts
		}
	}
	var rd decide.Ready
	var behind bool
	var nsLabels map[string]string
	gather := func(pools []porticov1.IPAddressPool) error {
		if in.Ours {
			// Read whether or not a pool selects by them now: a waiting Service's request is
			// built again with them when the pools change.
			nsLabels = r.state.labelsOf(ctx, svc.Namespace)
		}
		return nil
	}
	if err := r.state.withLock(ctx, gather, func(b *decide.Book, pools []porticov1.IPAddressPool) {
		if behind = b.Behind(in.Key, in.Svc); behind {
			return
		}
		// Under the lock: the request is built from the pools the book was just fed.
		switch {
		case in.Ours:
			in.Req, in.ReqErr = decide.Request(&svc, pools, nsLabels)
			in.NSLabels = nsLabels
			in.Listed = r.mayList(in.Key, &svc)
		case found:
			// Only what our own writes may list: a ClusterIP Service lists nothing (the apiserver
			// clears it), and another load balancer's Service lists that one's addresses.
			in.Listed = r.writer.mayList(in.Key, &svc)
		}
		rd = decide.Service(b, in)
	}); err != nil {
		return ctrl.Result{}, err
	}
	if behind {
		return r.catchUp(ctx, req, found)
	}
	r.state.retryServices(rd.Retry)
	r.state.poolsDirty(rd.Pools)
	if found {
		r.write(&svc, rd)
	} else {
		r.writer.forget(in.Key)
	}
	return ctrl.Result{}, nil
}

// catchUp waits for the cache to catch up with what the rebuild read of a Service: its event
// brings the Service back. A Service the cache does not hold may be gone; if the apiserver says
// so, it is no longer fenced and is decided (released) at once.
func (r *ServiceReconciler) catchUp(ctx context.Context, req ctrl.Request, cached bool) (ctrl.Result, error) {
	if cached {
		return ctrl.Result{}, nil
	}
	if found, err := get(ctx, r.state.live, req.NamespacedName, &corev1.Service{}); err != nil || found {
		return ctrl.Result{}, err
	}
	r.state.book.Do(func(b *decide.Book) { b.Unfence(req.Namespace + "/" + req.Name) })
	return r.Reconcile(ctx, req)
}

// mayList is every address the Service's stored status may list: what the cached copy lists,
// and what our writes that the cache does not show yet list.
func (r *ServiceReconciler) mayList(key string, svc *corev1.Service) []netip.Addr {
	ips := porticov1.IngressAddrs(svc)
	for _, ip := range r.writer.mayList(key, svc) {
		if !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}
	return ips
}

// write hands the decision to the status writer; its events are told once the write lands.
func (r *ServiceReconciler) write(svc *corev1.Service, rd decide.Ready) {
	var done func(client.Object)
	if len(rd.Tell) > 0 {
		done = func(written client.Object) {
			pool := r.poolOf(written.(*corev1.Service))
			for _, c := range rd.Tell {
				r.count(c)
				r.tell.condition(written, pool, c)
			}
		}
	}
	r.writer.submit(svc.Namespace+"/"+svc.Name, svc, writePart{apply: rd.Apply, done: done, retry: r.state.retry})
}

// poolOf is the pool the Service's address came from, as its events' related object: many
// allocations from one pool waiting together are one event on the pool (internal/events). nil
// when the Service has no address from a pool the cache holds.
func (r *ServiceReconciler) poolOf(svc *corev1.Service) runtime.Object {
	names := porticov1.AllocatedFromPools(svc)
	if len(names) == 0 {
		return nil
	}
	name := names[0] // a dual-stack Service's second pool gets no events of its own
	var pool porticov1.IPAddressPool
	if found, err := get(context.Background(), r.reader, client.ObjectKey{Name: name}, &pool); err != nil || !found {
		return nil
	}
	return &pool
}

// count counts an allocation, or a failed one by its reason, as its event is told.
func (r *ServiceReconciler) count(c metav1.Condition) {
	switch {
	case c.Reason == porticov1.ReasonTerminating:
	case c.Status == metav1.ConditionTrue:
		r.metrics.allocations.Inc()
	default:
		r.metrics.allocationFailures.WithLabelValues(c.Reason).Inc()
	}
}
