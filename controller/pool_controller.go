package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
)

// PoolReconciler keeps each IPAddressPool's Ready condition true to its spec. It reports what
// the CRD's CEL rules cannot check (an IPv6 range that runs backwards, entries of one pool that
// overlap, malformed label selectors), and anything that reached the apiserver while
// validation was relaxed.
type PoolReconciler struct {
	Client client.Client
}

// SetupWithManager registers the reconciler.
func (r *PoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&porticov1.IPAddressPool{}).
		Named("ipaddresspool").
		Complete(r)
}

// Reconcile sets the Ready condition, writing only when it changed.
func (r *PoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pool porticov1.IPAddressPool
	if err := r.Client.Get(ctx, req.NamespacedName, &pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ready := poolReadyCondition(&pool)
	ready.ObservedGeneration = pool.Generation
	changed := meta.SetStatusCondition(&pool.Status.Conditions, ready)
	if pool.Status.ObservedGeneration != pool.Generation {
		pool.Status.ObservedGeneration = pool.Generation
		changed = true
	}
	if !changed {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.Client.Status().Update(ctx, &pool)
}

// poolReadyCondition judges a pool's spec on its own; problems between pools are other
// conditions.
func poolReadyCondition(pool *porticov1.IPAddressPool) metav1.Condition {
	entries := make([]string, len(pool.Spec.Addresses))
	for i, a := range pool.Spec.Addresses {
		entries[i] = string(a)
	}
	if len(entries) == 0 {
		return notReady(porticov1.ReasonInvalidAddresses, "the pool lists no addresses")
	}
	if _, errs := allocator.ParsePool(entries); len(errs) > 0 {
		return notReady(porticov1.ReasonInvalidAddresses, joinErrors(errs))
	}
	if err := selectorErrors(pool.Spec.ServiceAllocation); err != nil {
		return notReady(porticov1.ReasonInvalidSelector, err.Error())
	}
	return metav1.Condition{
		Type:    porticov1.ConditionReady,
		Status:  metav1.ConditionTrue,
		Reason:  porticov1.ReasonValid,
		Message: fmt.Sprintf("%d address entries, all valid", len(entries)),
	}
}

func selectorErrors(sa *porticov1.ServiceAllocation) error {
	if sa == nil {
		return nil
	}
	var errs []error
	for _, f := range []struct {
		field     string
		selectors []metav1.LabelSelector
	}{{"namespaceSelectors", sa.NamespaceSelectors}, {"serviceSelectors", sa.ServiceSelectors}} {
		for i := range f.selectors {
			if _, err := metav1.LabelSelectorAsSelector(&f.selectors[i]); err != nil {
				errs = append(errs, fmt.Errorf("serviceAllocation.%s[%d]: %w", f.field, i, err))
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.New(joinErrors(errs))
}

func notReady(reason, message string) metav1.Condition {
	return metav1.Condition{Type: porticov1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: message}
}

// joinErrors puts several problems on one line, as a condition message is read in one line
// of `kubectl describe`.
func joinErrors(errs []error) string {
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}
