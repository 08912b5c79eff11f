package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
)

// ServiceReconciler gives LoadBalancer Services addresses and says in their status how it went.
type ServiceReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	state    *state
	metrics  *Metrics
	writer   *statusWriter
	// health, when set, computes a new Service's health conditions so its first status
	// write carries them with the address: one write per new Service, not two.
	health *HealthReconciler
}

func (r *ServiceReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.Service{}).
		Named("service").
		// One worker decides, in queue order (the allocator is one state machine and a decision
		// costs microseconds); the status writer sends the results in parallel.
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		WatchesRawSource(source.Channel(r.state.retry, &handler.EnqueueRequestForObject{})).
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

// Reconcile allocates or releases the Service's addresses and writes its status, in one
// request and only when something changed.
func (r *ServiceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := req.Namespace + "/" + req.Name
	var svc corev1.Service
	found, err := get(ctx, r.Client, req.NamespacedName, &svc)
	if err != nil {
		return ctrl.Result{}, err
	}

	s := r.state
	ours := found && s.ours(&svc)
	var o outcome
	if err := s.withLock(ctx, func(b *book) {
		switch {
		case ours && svc.DeletionTimestamp != nil:
			o = keep(b, &svc, key, r.mayList(key, &svc))
		case ours:
			o = r.allocate(ctx, b, &svc, key)
		default:
			o.freedIn = release(b, key)
		}
	}); err != nil {
		return ctrl.Result{}, err
	}
	r.afterRelease(o.freedIn)
	switch {
	case ours:
		s.poolsDirty(o.pools)
		r.write(ctx, &svc, o)
	case found:
		r.forget(&svc)
	default:
		r.writer.forget(key)
	}
	return ctrl.Result{}, nil
}

// outcome is what one allocation decided.
type outcome struct {
	asg     allocator.Assignment
	err     error    // why the request is not met (the Service may still keep asg)
	freedIn []string // pools in which an address became free (names, not addresses)
	pools   []string // pools whose counts may have changed
}

func (r *ServiceReconciler) allocate(ctx context.Context, b *book, svc *corev1.Service, key string) outcome {
	before, _ := b.alloc.Assignment(key)
	was := b.dropLeaving(key) // what it is leaving never stands in its own way; held again below
	req, reqErr := r.state.request(ctx, svc)
	var o outcome
	if reqErr != nil {
		o.asg, _ = b.alloc.Assignment(key) // keep what it has
		o.err = reqErr
	} else {
		o.asg, o.err = b.alloc.Allocate(req)
		if o.err != nil {
			o.asg, _ = b.alloc.Assignment(key)
		}
	}
	if o.err != nil {
		b.waiting[key] = waiter{since: svc.CreationTimestamp.Time, pools: b.alloc.PoolsFor(req)}
	} else {
		delete(b.waiting, key)
	}
	if o.asg.Orphaned() {
		b.orphanOf[key] = svc.Annotations[porticov1.AnnotationAllocatedFromPool]
	} else {
		delete(b.orphanOf, key)
	}
	left := b.holdLeaving(key, was, r.mayList(key, svc), o.asg.IPs)
	o.freedIn, o.pools = append(o.freedIn, left...), append(o.pools, left...)
	changed := !slices.Equal(before.IPs, o.asg.IPs)
	if changed && before.Pool != "" {
		o.freedIn = append(o.freedIn, before.Pool)
	}
	o.pools = appendPools(o.pools, before.Pool, o.asg.Pool)
	o.pools = append(o.pools, b.waiting[key].pools...)
	if changed {
		// Overlapping pools count an address in each pool that contains it, not only in the
		// one it was taken from.
		released := b.poolsContaining(before.IPs)
		o.freedIn = append(o.freedIn, released...)
		o.pools = append(append(o.pools, released...), b.poolsContaining(o.asg.IPs)...)
	}
	return o
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

// release frees what a gone (or no longer LoadBalancer) Service held; returns the pools that
// gained addresses.
func release(b *book, key string) []string {
	held, ok := b.alloc.Assignment(key)
	delete(b.waiting, key)
	left := b.poolsContaining(b.dropLeaving(key)) // a gone Service's status lists nothing
	if !ok {
		return left
	}
	b.alloc.Release(key)
	orphanPool := b.orphanOf[key]
	delete(b.orphanOf, key)
	return append(appendPools(left, held.Pool, orphanPool), b.poolsContaining(held.IPs)...)
}

// afterRelease lets waiting Services try again when addresses were freed.
func (r *ServiceReconciler) afterRelease(pools []string) {
	if len(pools) == 0 {
		return
	}
	r.state.retryServices(r.state.waiting())
	r.state.poolsDirty(pools)
}

func appendPools(pools []string, names ...string) []string {
	for _, n := range names {
		if n != "" {
			pools = append(pools, n)
		}
	}
	return pools
}

// write puts the outcome into the Service: ingress, the IPAllocated condition and the
// allocated-from-pool annotation, in one status update, when any of them changed.
func (r *ServiceReconciler) write(ctx context.Context, svc *corev1.Service, o outcome) {
	cond := allocatedCondition(o)
	if svc.DeletionTimestamp != nil { // keep's outcome: it keeps asg, gets nothing new
		cond = terminatingCondition(svc.Finalizers, o.asg)
	}
	cond.ObservedGeneration = svc.Generation
	var health []metav1.Condition
	apply := func(want *corev1.Service) {
		for _, c := range health {
			meta.SetStatusCondition(&want.Status.Conditions, c)
		}
		want.Status.LoadBalancer.Ingress = nil
		for _, ip := range o.asg.IPs {
			want.Status.LoadBalancer.Ingress = append(want.Status.LoadBalancer.Ingress,
				corev1.LoadBalancerIngress{IP: ip.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)})
		}
		meta.SetStatusCondition(&want.Status.Conditions, cond)
		if o.asg.Pool != "" {
			if want.Annotations == nil {
				want.Annotations = map[string]string{}
			}
			want.Annotations[porticov1.AnnotationAllocatedFromPool] = o.asg.Pool
		} else if len(o.asg.IPs) == 0 {
			delete(want.Annotations, porticov1.AnnotationAllocatedFromPool)
		} // an orphaned address keeps naming the pool it came from
	}
	if r.health != nil && meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionEndpointsReady) == nil {
		view := svc.DeepCopy()
		apply(view)
		meta.SetStatusCondition(&view.Status.Conditions, cond)
		var err error
		if health, _, err = r.health.changes(ctx, svc, view); err != nil {
			health = nil // the health reconciler writes them on its own
		}
	}
	var done func(*corev1.Service)
	if conditionChanged(svc, cond) {
		done = func(written *corev1.Service) { r.event(written, cond) }
	}
	r.writer.submit(svc.Namespace+"/"+svc.Name, svc, writePart{apply: apply, done: done, retry: r.state.retry})
}

// conditionChanged reports whether setting cond on the Service changes it (beyond the time).
func conditionChanged(svc *corev1.Service, cond metav1.Condition) bool {
	conds := slices.Clone(svc.Status.Conditions)
	return meta.SetStatusCondition(&conds, cond)
}

// event tells the story of a written condition change on the Service.
func (r *ServiceReconciler) event(svc *corev1.Service, cond metav1.Condition) {
	if r.Recorder == nil {
		return
	}
	if cond.Reason == porticov1.ReasonTerminating {
		r.Recorder.Eventf(svc, nil, corev1.EventTypeNormal, porticov1.ReasonTerminating, "Allocate", "%s", cond.Message)
		return
	}
	if cond.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(svc, nil, corev1.EventTypeNormal, "IPAllocated", "Allocate", "%s", cond.Message)
		r.metrics.allocations.Inc()
		return
	}
	r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, "AllocationFailed", "Allocate", "%s: %s", cond.Reason, cond.Message)
	r.metrics.allocationFailures.WithLabelValues(cond.Reason).Inc()
}

func allocatedCondition(o outcome) metav1.Condition {
	c := metav1.Condition{Type: porticov1.ConditionIPAllocated}
	var annErr *annotationError
	var allocErr *allocator.Error
	switch {
	case errors.As(o.err, &annErr):
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, porticov1.ReasonInvalidAnnotation, annErr.Error()
		if len(o.asg.IPs) > 0 {
			c.Message += fmt.Sprintf("; keeping %s", andAddrs(o.asg.IPs))
		}
	case errors.As(o.err, &allocErr):
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(allocErr.Reason), allocErr.Message
	case o.err != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "Error", o.err.Error()
	case o.asg.Orphaned():
		c.Status, c.Reason = metav1.ConditionTrue, porticov1.ReasonOrphanedIP
		c.Message = fmt.Sprintf("%s is in no IPAddressPool any more; it stays assigned until the Service is deleted or asks for another address", andAddrs(o.asg.IPs))
	default:
		c.Status, c.Reason = metav1.ConditionTrue, porticov1.ReasonAllocated
		c.Message = fmt.Sprintf("%s from pool %s", andAddrs(o.asg.IPs), o.asg.Pool)
	}
	return c
}

// forget removes what Portico wrote on a Service it no longer handles.
func (r *ServiceReconciler) forget(svc *corev1.Service) {
	r.writer.submit(svc.Namespace+"/"+svc.Name, svc, writePart{retry: r.state.retry, apply: func(want *corev1.Service) {
		meta.RemoveStatusCondition(&want.Status.Conditions, porticov1.ConditionIPAllocated)
		delete(want.Annotations, porticov1.AnnotationAllocatedFromPool)
	}})
}
