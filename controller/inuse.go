package controller

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// foreignAnswersChanged lets through only the Speaker events that can change a pool's inUse:
// its foreign answers, its MACs (which tell a speaker's answer from a foreign one), and what
// says whether its answers still count (its Ready condition, its latest probe round).
var foreignAnswersChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return hasForeignAnswers(e.Object) },
	DeleteFunc: func(e event.DeleteEvent) bool { return hasForeignAnswers(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*porticov1.Speaker)
		n, ok2 := e.ObjectNew.(*porticov1.Speaker)
		return !ok1 || !ok2 || !equality.Semantic.DeepEqual(o.Status.ForeignAnswers, n.Status.ForeignAnswers) ||
			!slices.Equal(o.Status.HardwareAddrs, n.Status.HardwareAddrs) || !o.Status.ProbedAt.Equal(n.Status.ProbedAt) ||
			meta.IsStatusConditionTrue(o.Status.Conditions, porticov1.ConditionReady) != meta.IsStatusConditionTrue(n.Status.Conditions, porticov1.ConditionReady)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func hasForeignAnswers(o client.Object) bool {
	sp, ok := o.(*porticov1.Speaker)
	return !ok || len(sp.Status.ForeignAnswers) > 0
}

// everyPool maps a Speaker change to every pool: any pool may hold the addresses it names,
// and pools are few.
func everyPool(c client.Reader) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, _ client.Object) []reconcile.Request {
		var pools porticov1.IPAddressPoolList
		if err := c.List(ctx, &pools); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, len(pools.Items))
		for i := range pools.Items {
			reqs[i].Name = pools.Items[i].Name
		}
		return reqs
	}
}
