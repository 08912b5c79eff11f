package controller

import (
	"context"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
)

// AdvertisementReconciler writes the Ready condition of L2Advertisements and BGPAdvertisements
// (decide.AdvertisementReady). An advertisement is used as it is either way; the condition
// says why it announces nothing, or less than meant.
type AdvertisementReconciler struct {
	reader            client.Reader
	clock             Clock
	tell              *teller
	writer            *statusWriter
	l2Retry, bgpRetry Queue
}

func (r *AdvertisementReconciler) setup(mgr ctrl.Manager) error {
	// Advertisements are few: any change to what they refer to re-checks every one of a kind.
	l2 := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var ads porticov1.L2AdvertisementList
		return requestsFor(r.reader.List(ctx, &ads), ads.Items)
	})
	bgp := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var ads porticov1.BGPAdvertisementList
		return requestsFor(r.reader.List(ctx, &ads), ads.Items)
	})
	// Nodes post status every few seconds; only their labels matter here.
	labels := builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
	}})
	if err := ctrl.NewControllerManagedBy(mgr).For(&porticov1.L2Advertisement{}).Named("l2advertisement").
		WatchesRawSource(source.Channel(channel(r.l2Retry), &handler.EnqueueRequestForObject{})).
		Watches(&porticov1.IPAddressPool{}, l2).
		Watches(&corev1.Node{}, l2, labels).
		Complete(reconcile.Func(r.reconcileL2)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).For(&porticov1.BGPAdvertisement{}).Named("bgpadvertisement").
		WatchesRawSource(source.Channel(channel(r.bgpRetry), &handler.EnqueueRequestForObject{})).
		Watches(&porticov1.IPAddressPool{}, bgp).
		Watches(&porticov1.BGPPeer{}, bgp).
		Watches(&corev1.Node{}, bgp, labels).
		Complete(reconcile.Func(r.reconcileBGP))
}

func requestsFor[T any, P interface {
	*T
	client.Object
}](err error, items []T) []reconcile.Request {
	if err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, len(items))
	for i := range items {
		reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(P(&items[i]))}
	}
	return reqs
}

func (r *AdvertisementReconciler) reconcileL2(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return reconcileAdvertisement(ctx, r, req, r.l2Retry, func(ad *porticov1.L2Advertisement) (decide.Advertised, *[]metav1.Condition) {
		return decide.L2Advertised(ad), &ad.Status.Conditions
	})
}

func (r *AdvertisementReconciler) reconcileBGP(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return reconcileAdvertisement(ctx, r, req, r.bgpRetry, func(ad *porticov1.BGPAdvertisement) (decide.Advertised, *[]metav1.Condition) {
		return decide.BGPAdvertised(ad), &ad.Status.Conditions
	})
}

// reconcileAdvertisement reads one advertisement and what it refers to, decides its Ready
// condition and hands a changed one to the status writer; its event is told once it lands.
func reconcileAdvertisement[T any, P interface {
	*T
	client.Object
}](ctx context.Context, r *AdvertisementReconciler, req ctrl.Request, retry Queue, describe func(P) (decide.Advertised, *[]metav1.Condition)) (ctrl.Result, error) {
	ad := P(new(T))
	found, err := get(ctx, r.reader, req.NamespacedName, ad)
	if err != nil || !found {
		return ctrl.Result{}, err
	}
	a, conds := describe(ad)
	refs, err := r.read(ctx, a.BGP())
	if err != nil {
		return ctrl.Result{}, err
	}
	rd := decide.SetCondition(*conds, ad.GetGeneration(), decide.AdvertisementReady(refs, a), r.clock.Now())
	if rd.Conditions == nil {
		return ctrl.Result{}, nil
	}
	*conds = rd.Conditions
	r.writer.submitStatus(ad, writePart{retry: retry, done: func(written client.Object) {
		for _, n := range rd.Tell {
			r.tell.notice(written, nil, n)
		}
	}})
	return ctrl.Result{}, nil
}

func (r *AdvertisementReconciler) read(ctx context.Context, bgp bool) (decide.References, error) {
	var pools porticov1.IPAddressPoolList
	var nodes corev1.NodeList
	if err := r.reader.List(ctx, &pools); err != nil {
		return decide.References{}, err
	}
	if err := r.reader.List(ctx, &nodes); err != nil {
		return decide.References{}, err
	}
	refs := decide.References{Pools: pools.Items, Nodes: nodes.Items, Peers: map[string]bool{}}
	if bgp {
		var peers porticov1.BGPPeerList
		if err := r.reader.List(ctx, &peers); err != nil {
			return decide.References{}, err
		}
		for _, p := range peers.Items {
			refs.Peers[p.Name] = true
		}
	}
	return refs, nil
}
