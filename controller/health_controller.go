package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
	"github.com/portico-lb/portico/rules"
)

// HealthReconciler writes the conditions that tell whether a LoadBalancer Service works
// beyond its address: EndpointsReady (from its EndpointSlices, never the deprecated Endpoints
// API), Announced (from the speakers' reports and the advertisements) and Reachable (from the
// speakers' probes of each other's addresses). It shares the allocation's status writer, so
// their writes never overwrite each other.
type HealthReconciler struct {
	reader  client.Reader
	clock   Clock
	tell    *teller
	ours    func(*corev1.Service) bool
	writer  *statusWriter
	retries Queue
	news    *decide.NewsDesk
	cluster *clusterKinds
}

func (r *HealthReconciler) setup(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &discoveryv1.EndpointSlice{}, sliceServiceIndex,
		func(o client.Object) []string {
			if name := o.GetLabels()[discoveryv1.LabelServiceName]; name != "" {
				return []string{name}
			}
			return nil
		}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Service{}, ingressIPIndex, ingressIPs); err != nil {
		return err
	}
	if err := mgr.Add(r.expectReviews(mgr.GetCache())); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.Service{}).
		Named("service-health").
		WatchesRawSource(source.Channel(channel(r.retries), &handler.EnqueueRequestForObject{})).
		// The live speakers changed: a Lease appeared, went or ran out.
		WatchesRawSource(source.Channel(r.cluster.liveness.changed, handler.EnqueueRequestsFromMapFunc(r.addressed))).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.sliceServices)).
		// Services sharing an address have one owner, elected over all of them.
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(r.sharersOf)).
		// Pods only for their labels (the hint when a selector matches nothing): metadata is
		// all the cache keeps of them.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.servicesIn), builder.OnlyMetadata).
		// Who announces, and who may: the speakers' reports and the configuration.
		// Only what changes the answer: a pool's status (rewritten with every allocation) and
		// a node's heartbeats would otherwise re-run every Service.
		Watches(&porticov1.Speaker{}, r.speakerChanges()).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.addressed),
			builder.WithPredicates(predicate.Or[client.Object](predicate.LabelChangedPredicate{}, nodeFitnessChanged))).
		Watches(&porticov1.L2Advertisement{}, handler.EnqueueRequestsFromMapFunc(r.addressed),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&porticov1.BGPAdvertisement{}, handler.EnqueueRequestsFromMapFunc(r.addressed),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&porticov1.BGPPeer{}, handler.EnqueueRequestsFromMapFunc(r.addressed),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&porticov1.IPAddressPool{}, handler.EnqueueRequestsFromMapFunc(r.addressed),
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Complete(r)
}

// nodeFitnessChanged passes a Node update that changes what the election reads of it
// (rules.NodeFitness), not its heartbeats (which would re-run every Service).
var nodeFitnessChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	before, ok1 := e.ObjectOld.(*corev1.Node)
	after, ok2 := e.ObjectNew.(*corev1.Node)
	if !ok1 || !ok2 {
		return false
	}
	return rules.FitnessOf(before) != rules.FitnessOf(after)
}}

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
	if err := r.reader.List(ctx, &svcs, client.InNamespace(pod.GetNamespace())); err != nil {
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

// addressed maps any change to the LoadBalancer Services that hold an address: their
// Announced condition may change with it.
func (r *HealthReconciler) addressed(ctx context.Context, _ client.Object) []reconcile.Request {
	var svcs corev1.ServiceList
	if err := r.reader.List(ctx, &svcs, client.UnsafeDisableDeepCopy); err != nil { // read only
		return nil
	}
	var reqs []reconcile.Request
	for i := range svcs.Items {
		if svc := &svcs.Items[i]; r.ours(svc) && len(svc.Status.LoadBalancer.Ingress) > 0 {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(svc)})
		}
	}
	return reqs
}

// Reconcile gathers what the Service's health conditions are folded from, decides them
// (decide.Health) and writes those that changed.
func (r *HealthReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := req.Namespace + "/" + req.Name
	var svc corev1.Service
	found, err := get(ctx, r.reader, req.NamespacedName, &svc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !found {
		r.tell.pools(ctx, r.news.Forget(key))
		return ctrl.Result{}, nil
	}
	if !r.ours(&svc) {
		r.tell.pools(ctx, r.news.Forget(key))
		r.write(&svc, decide.Ready{Remove: decide.HealthConditionTypes})
		return ctrl.Result{}, nil
	}
	if meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionIPAllocated) == nil {
		// The allocation writes first (its write brings us back): the two never race for a
		// new Service, and the address is not delayed by a health write.
		return ctrl.Result{}, nil
	}
	facts, err := gatherHealth(ctx, r.reader, r.cluster, r.ours, &svc)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Events follow what is stored, not what is about to be written: a problem becomes news
	// once it has lasted (decide.NewsDesk), and its write brings this reconcile back.
	rd, again := decide.Health(&svc, facts, r.news, r.clock.Now())
	r.tell.conditionChanges(&svc, rd.Tell)
	r.tell.pools(ctx, decide.News{Pool: rd.PoolTell, Pools: rd.Pools})
	r.write(&svc, rd)
	return ctrl.Result{RequeueAfter: again}, nil
}

func (r *HealthReconciler) write(svc *corev1.Service, rd decide.Ready) {
	if rd.Writes() {
		r.writer.submit(svc.Namespace+"/"+svc.Name, svc, healthPart(rd, r.ours, r.retries))
	}
}

// healthPart is the health reconciler's share of a status write. Its conditions go only on a
// Service still ours: after a conflict the writer applies the part to the Service as stored
// then, which may just have become a ClusterIP one, and the conditions the allocation took off
// it would come back.
func healthPart(rd decide.Ready, ours func(*corev1.Service) bool, retry Queue) writePart {
	apply := rd.Apply
	if len(rd.Conditions) > 0 {
		apply = func(want *corev1.Service) {
			if ours(want) {
				rd.Apply(want)
			}
		}
	}
	return writePart{retry: retry, apply: apply}
}

// sliceServiceIndex indexes the cached EndpointSlices by their Service's name: a label
// selector would make the cache test every slice of the namespace, for every reconcile.
const sliceServiceIndex = "portico.dev/service-name"

// gatherHealth reads what the Service's health conditions are folded from: its EndpointSlices
// (and the namespace's pods when they list no endpoint) and the Services sharing its addresses
// from the cache, the cluster-wide kinds from their stores (clusterKinds).
func gatherHealth(ctx context.Context, c client.Reader, cluster *clusterKinds, ours func(*corev1.Service) bool, svc *corev1.Service) (decide.HealthFacts, error) {
	var f decide.HealthFacts
	var slices discoveryv1.EndpointSliceList
	if err := c.List(ctx, &slices, client.InNamespace(svc.Namespace),
		client.MatchingFields{sliceServiceIndex: svc.Name}); err != nil {
		return f, err
	}
	f.EndpointSlices = slices.Items
	if decide.NeedsPodLabels(svc, slices.Items) {
		pods := &metav1.PartialObjectMetadataList{}
		pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		if err := c.List(ctx, pods, client.InNamespace(svc.Namespace)); err != nil {
			return f, err
		}
		for i := range pods.Items {
			if pods.Items[i].DeletionTimestamp == nil {
				f.Pods = append(f.Pods, pods.Items[i].Labels)
			}
		}
	}
	if err := gatherSharers(ctx, c, ours, svc, &f); err != nil {
		return f, err
	}
	cluster.fill(&f)
	return f, nil
}

// expectReviews tells the news desk, once the cache has synced, which Services this leader
// reviews first (reviewFirst).
func (r *HealthReconciler) expectReviews(c cache.Cache) manager.RunnableFunc {
	return func(ctx context.Context) error {
		if c.WaitForCacheSync(ctx) {
			r.reviewFirst(ctx)
		}
		return nil // else stopping
	}
}

// reviewFirst tells the news desk which Services this leader reviews first (those with their
// conditions): the pools' shared problems are written once each of them has been
// (decide.NewsDesk.Hold), so that a new leader does not take a pool's SharedProblem off and
// put it back.
func (r *HealthReconciler) reviewFirst(ctx context.Context) {
	var svcs corev1.ServiceList
	var keys []string
	if err := r.reader.List(ctx, &svcs, client.UnsafeDisableDeepCopy); err == nil { // read only
		for i := range svcs.Items {
			if svc := &svcs.Items[i]; r.ours(svc) && meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionIPAllocated) != nil {
				keys = append(keys, svc.Namespace+"/"+svc.Name)
			}
		}
	} // else wait for none: the pools' status is written from what is reviewed
	r.tell.pools(ctx, r.news.Expect(keys))
}
