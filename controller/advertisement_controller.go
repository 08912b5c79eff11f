package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

// AdvertisementReconciler writes the Ready condition of L2Advertisements and BGPAdvertisements:
// what an advertisement names that does not exist and what its selectors select, which the
// CRD cannot check because the answer lies in other objects. An advertisement is used as it
// is either way; the condition says why it announces nothing, or less than meant.
type AdvertisementReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
}

func (r *AdvertisementReconciler) setup(mgr ctrl.Manager) error {
	// Advertisements are few: any change to what they refer to re-checks every one of a kind.
	l2 := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var ads porticov1.L2AdvertisementList
		return requestsFor(r.Client.List(ctx, &ads), ads.Items)
	})
	bgp := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var ads porticov1.BGPAdvertisementList
		return requestsFor(r.Client.List(ctx, &ads), ads.Items)
	})
	// Nodes post status every few seconds; only their labels matter here.
	labels := builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
	}})
	if err := ctrl.NewControllerManagedBy(mgr).For(&porticov1.L2Advertisement{}).Named("l2advertisement").
		Watches(&porticov1.IPAddressPool{}, l2).
		Watches(&corev1.Node{}, l2, labels).
		Complete(reconcile.Func(r.reconcileL2)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).For(&porticov1.BGPAdvertisement{}).Named("bgpadvertisement").
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
	return reconcileAdvertisement(ctx, r, req, func(ad *porticov1.L2Advertisement) (advertised, *[]metav1.Condition) {
		s := ad.Spec
		a := advertisedBy(s.IPAddressPools, s.IPAddressPoolSelectors, s.NodeSelectors, s.ServiceSelectors)
		for i := range s.PreferredNodeSelectors {
			a.selectors[fmt.Sprintf("preferredNodeSelectors[%d].preference", i)] = []metav1.LabelSelector{s.PreferredNodeSelectors[i].Preference}
		}
		return a, &ad.Status.Conditions
	})
}

func (r *AdvertisementReconciler) reconcileBGP(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return reconcileAdvertisement(ctx, r, req, func(ad *porticov1.BGPAdvertisement) (advertised, *[]metav1.Condition) {
		s := ad.Spec
		a := advertisedBy(s.IPAddressPools, s.IPAddressPoolSelectors, s.NodeSelectors, s.ServiceSelectors)
		a.bgp, a.peers = true, s.Peers
		return a, &ad.Status.Conditions
	})
}

// reconcileAdvertisement reads one advertisement, describes it and writes its condition.
func reconcileAdvertisement[T any, P interface {
	*T
	client.Object
}](ctx context.Context, r *AdvertisementReconciler, req ctrl.Request, describe func(P) (advertised, *[]metav1.Condition)) (ctrl.Result, error) {
	ad := P(new(T))
	found, err := get(ctx, r.Client, req.NamespacedName, ad)
	if err != nil || !found {
		return ctrl.Result{}, err
	}
	a, conds := describe(ad)
	refs, err := r.read(ctx, a.bgp)
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.write(ctx, ad, conds, refs.check(a))
}

// references are the objects an advertisement can refer to.
type references struct {
	pools []porticov1.IPAddressPool
	nodes []corev1.Node
	peers map[string]bool
}

func (r *AdvertisementReconciler) read(ctx context.Context, bgp bool) (references, error) {
	var pools porticov1.IPAddressPoolList
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &pools); err != nil {
		return references{}, err
	}
	if err := r.Client.List(ctx, &nodes); err != nil {
		return references{}, err
	}
	refs := references{pools: pools.Items, nodes: nodes.Items, peers: map[string]bool{}}
	if bgp {
		var peers porticov1.BGPPeerList
		if err := r.Client.List(ctx, &peers); err != nil {
			return references{}, err
		}
		for _, p := range peers.Items {
			refs.peers[p.Name] = true
		}
	}
	return refs, nil
}

// advertised is what the two kinds of advertisement share, as check reads it.
type advertised struct {
	pools         []porticov1.Name
	poolSelectors []metav1.LabelSelector
	nodeSelectors []metav1.LabelSelector
	selectors     map[string][]metav1.LabelSelector // every selector, by field, to parse
	bgp           bool
	peers         []porticov1.Name
}

func advertisedBy(pools []porticov1.Name, poolSelectors, nodeSelectors, serviceSelectors []metav1.LabelSelector) advertised {
	return advertised{pools: pools, poolSelectors: poolSelectors, nodeSelectors: nodeSelectors,
		selectors: map[string][]metav1.LabelSelector{"ipAddressPoolSelectors": poolSelectors, "nodeSelectors": nodeSelectors, "serviceSelectors": serviceSelectors}}
}

// check is the advertisement's Ready condition: every problem, the first one's reason.
func (refs references) check(a advertised) metav1.Condition {
	var reasons, problems []string
	add := func(reason, format string, args ...any) {
		reasons, problems = append(reasons, reason), append(problems, fmt.Sprintf(format, args...))
	}
	for _, field := range slices.Sorted(maps.Keys(a.selectors)) {
		for i := range a.selectors[field] {
			if _, err := metav1.LabelSelectorAsSelector(&a.selectors[field][i]); err != nil {
				add(porticov1.ReasonInvalidSelector, "%s[%d]: %v", field, i, err)
			}
		}
	}
	var missing, selected []string
	for _, name := range a.pools {
		if !slices.ContainsFunc(refs.pools, func(p porticov1.IPAddressPool) bool { return p.Name == string(name) }) {
			missing = append(missing, string(name))
		}
	}
	for _, p := range refs.pools {
		if rules.Selectors(nil).Covers(a.pools, a.poolSelectors, nil, &p, &corev1.Service{}) {
			selected = append(selected, p.Name)
		}
	}
	if len(missing) > 0 {
		add(porticov1.ReasonUnknownPool, "ipAddressPools names IPAddressPools that do not exist: %s", strings.Join(missing, ", "))
	}
	switch {
	case len(refs.pools) == 0:
		add(porticov1.ReasonNoPool, "no IPAddressPool exists, so there is nothing to announce")
	case len(selected) == 0 && len(missing) < len(a.pools)+len(a.poolSelectors):
		add(porticov1.ReasonNoPool, "ipAddressPools and ipAddressPoolSelectors select none of the %d IPAddressPools", len(refs.pools))
	}
	var peersMissing []string
	for _, name := range a.peers {
		if !refs.peers[string(name)] {
			peersMissing = append(peersMissing, string(name))
		}
	}
	if len(peersMissing) > 0 {
		add(porticov1.ReasonUnknownPeer, "peers names BGPPeers that do not exist: %s", strings.Join(peersMissing, ", "))
	} else if a.bgp && len(refs.peers) == 0 {
		add(porticov1.ReasonNoPeer, "no BGPPeer exists, so there is no router to advertise to")
	}
	nodes := 0
	for _, n := range refs.nodes {
		if len(a.nodeSelectors) == 0 || rules.MatchesAny(a.nodeSelectors, n.Labels) {
			nodes++
		}
	}
	if len(a.nodeSelectors) > 0 && nodes == 0 {
		add(porticov1.ReasonNoNode, "nodeSelectors match none of the %d Nodes, so no node announces", len(refs.nodes))
	}
	if len(problems) > 0 {
		return metav1.Condition{Type: porticov1.ConditionReady, Status: metav1.ConditionFalse, Reason: reasons[0], Message: strings.Join(problems, "; ")}
	}
	return metav1.Condition{Type: porticov1.ConditionReady, Status: metav1.ConditionTrue, Reason: porticov1.ReasonValid,
		Message: fmt.Sprintf("selects IPAddressPools %s; %d of %d Nodes may announce", strings.Join(selected, ", "), nodes, len(refs.nodes))}
}

// write sets cond among the advertisement's conditions and writes its status when that
// changes anything, with an event when the condition's status or reason changes.
func (r *AdvertisementReconciler) write(ctx context.Context, ad client.Object, conds *[]metav1.Condition, cond metav1.Condition) error {
	before := slices.Clone(*conds)
	cond.ObservedGeneration = ad.GetGeneration()
	meta.SetStatusCondition(conds, cond)
	if equality.Semantic.DeepEqual(before, *conds) {
		return nil
	}
	if err := r.Client.Status().Update(ctx, ad); err != nil {
		return err
	}
	old := meta.FindStatusCondition(before, cond.Type)
	if r.Recorder != nil && (old == nil || old.Status != cond.Status || old.Reason != cond.Reason) && (old != nil || cond.Status != metav1.ConditionTrue) {
		typ := corev1.EventTypeWarning
		if cond.Status == metav1.ConditionTrue {
			typ = corev1.EventTypeNormal
		}
		r.Recorder.Eventf(ad, nil, typ, cond.Reason, "Ready", "Ready %s: %s", cond.Reason, cond.Message)
	}
	return nil
}
