package controller

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// HealthReconciler writes the conditions that tell whether a LoadBalancer Service works
// beyond its address: EndpointsReady (from its EndpointSlices, never the deprecated Endpoints
// API). It shares the allocation's status writer, so their writes never overwrite each other.
type HealthReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	ours     func(*corev1.Service) bool
	writer   *statusWriter
	retries  chan event.GenericEvent
}

// healthConditions are the condition types this reconciler owns.
var healthConditions = []string{porticov1.ConditionEndpointsReady}

func (r *HealthReconciler) setup(mgr ctrl.Manager) error {
	r.retries = make(chan event.GenericEvent, 1024)
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.Service{}).
		Named("service-health").
		WatchesRawSource(source.Channel(r.retries, &handler.EnqueueRequestForObject{})).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(sliceService)).
		// Pods only for their labels (the hint when a selector matches nothing): metadata is
		// all the cache keeps of them.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.servicesIn), builder.OnlyMetadata).
		Complete(r)
}

// sliceService maps an EndpointSlice to its Service, by the label the endpointslice
// controller puts on it.
func sliceService(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[discoveryv1.LabelServiceName]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// servicesIn maps a pod to the LoadBalancer Services of its namespace that have no ready
// endpoint: only their messages depend on pods' labels (the others follow their slices).
func (r *HealthReconciler) servicesIn(ctx context.Context, pod client.Object) []reconcile.Request {
	var svcs corev1.ServiceList
	if err := r.Client.List(ctx, &svcs, client.InNamespace(pod.GetNamespace())); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		if r.ours(svc) && !meta.IsStatusConditionTrue(svc.Status.Conditions, porticov1.ConditionEndpointsReady) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(svc)})
		}
	}
	return reqs
}

// Reconcile computes the Service's health conditions and writes those that changed.
func (r *HealthReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := req.Namespace + "/" + req.Name
	var svc corev1.Service
	found, err := get(ctx, r.Client, req.NamespacedName, &svc)
	if err != nil || !found {
		return ctrl.Result{}, err
	}
	if !r.ours(&svc) {
		r.writer.submit(key, &svc, writePart{retry: r.retry, apply: func(want *corev1.Service) {
			for _, t := range healthConditions {
				meta.RemoveStatusCondition(&want.Status.Conditions, t)
			}
		}})
		return ctrl.Result{}, nil
	}
	conds, err := r.conditions(ctx, &svc)
	if err != nil {
		return ctrl.Result{}, err
	}
	var changed []metav1.Condition
	for _, c := range conds {
		if conditionChanged(&svc, c) {
			changed = append(changed, c)
		}
	}
	if len(changed) == 0 {
		return ctrl.Result{}, nil
	}
	r.writer.submit(key, &svc, writePart{
		retry: r.retry,
		apply: func(want *corev1.Service) {
			for _, c := range conds {
				meta.SetStatusCondition(&want.Status.Conditions, c)
			}
		},
		done: func(written *corev1.Service) {
			for _, c := range changed {
				r.event(written, c)
			}
		},
	})
	return ctrl.Result{}, nil
}

func (r *HealthReconciler) conditions(ctx context.Context, svc *corev1.Service) ([]metav1.Condition, error) {
	var slices discoveryv1.EndpointSliceList
	if err := r.Client.List(ctx, &slices, client.InNamespace(svc.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return nil, err
	}
	var podLabels []map[string]string
	if len(svc.Spec.Selector) > 0 && countEndpoints(slices.Items).total == 0 {
		pods := &metav1.PartialObjectMetadataList{}
		pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		if err := r.Client.List(ctx, pods, client.InNamespace(svc.Namespace)); err != nil {
			return nil, err
		}
		for i := range pods.Items {
			if pods.Items[i].DeletionTimestamp == nil {
				podLabels = append(podLabels, pods.Items[i].Labels)
			}
		}
	}
	return []metav1.Condition{endpointsCondition(svc, slices.Items, podLabels)}, nil
}

func (r *HealthReconciler) retry(key string) {
	ns, name, _ := strings.Cut(key, "/")
	svc := &corev1.Service{}
	svc.Namespace, svc.Name = ns, name
	r.retries <- event.GenericEvent{Object: svc}
}

// event tells a condition's change on the Service, and counts it.
func (r *HealthReconciler) event(svc *corev1.Service, c metav1.Condition) {
	conditionChanges.WithLabelValues(c.Type, c.Reason).Inc()
	if r.Recorder == nil {
		return
	}
	typ := corev1.EventTypeWarning
	if c.Status == metav1.ConditionTrue {
		typ = corev1.EventTypeNormal
	}
	short := strings.TrimPrefix(c.Type, "portico.dev/")
	r.Recorder.Eventf(svc, nil, typ, c.Reason, short, "%s %s: %s", short, c.Reason, c.Message)
}
