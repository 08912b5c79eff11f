package controller

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
	"github.com/portico-lb/portico/rules"
)

// poolWriteInterval is the least time between two status writes of one pool: a burst of
// allocations makes one write a second, not one per Service.
const poolWriteInterval = time.Second

// PoolReconciler feeds pool edits to the allocator and keeps each IPAddressPool's status true:
// counts, waiting Services, the next addresses, those foreign hosts answer for (folded from the
// Speakers, and given to the allocator to skip), the holds kept for deleted Services (ended
// here when their time is up), and the Ready, Overlapping, Exhausted,
// OrphanedIPs, AddressesInUse and SharedProblem conditions.
// Ready reports what the CRD's CEL rules cannot check (an IPv6 range that runs backwards,
// entries of one pool that overlap, malformed label selectors) and re-checks addressHold's
// bounds.
type PoolReconciler struct {
	Client    client.Client
	Recorder  events.EventRecorder
	state     *state
	metrics   *Metrics
	lastWrite map[string]time.Time
	news      *decide.NewsDesk // the problems the pool's Services share
}

func (r *PoolReconciler) setup(mgr ctrl.Manager) error {
	r.lastWrite = map[string]time.Time{}
	return ctrl.NewControllerManagedBy(mgr).
		For(&porticov1.IPAddressPool{}).
		Named("ipaddresspool").
		WatchesRawSource(source.Channel(r.state.dirty, &handler.EnqueueRequestForObject{})).
		Watches(&porticov1.Speaker{}, handler.EnqueueRequestsFromMapFunc(everyPool(r.Client)), builder.WithPredicates(foreignAnswersChanged)).
		Complete(r)
}

// Reconcile syncs the allocator's pools and writes this pool's status, at most once a second.
func (r *PoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pool porticov1.IPAddressPool
	found, err := get(ctx, r.Client, req.NamespacedName, &pool)
	if err != nil {
		return ctrl.Result{}, err
	}

	var speakers porticov1.SpeakerList
	// Read only: no deep copy of every Speaker on every pool reconcile.
	if err := r.Client.List(ctx, &speakers, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	var poolList porticov1.IPAddressPoolList
	if err := r.Client.List(ctx, &poolList, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	verdict := judgeProbes(speakers.Items, poolList.Items, time.Now())
	findings := verdict.inUse
	var facts decide.PoolFacts
	var retry, dirty []string
	var nextExpiry time.Time
	if err := r.state.withLock(ctx, nil, func(b *decide.Book, _ []porticov1.IPAddressPool) {
		changed, released := b.SetInUse(findingAddrs(findings))
		if changed {
			dirty = b.PoolNames() // their next addresses may change
		}
		if ended := b.ExpireHolds(time.Now()); len(ended) > 0 {
			released = true
			dirty = append(dirty, ended...)
		}
		nextExpiry = b.NextExpiry()
		if released {
			retry = b.WaitingServices()
		}
		if found {
			facts = b.PoolFacts(pool.Name)
			facts.InUse = inUseIn(b, pool.Name, findings)
		}
	}); err != nil {
		return ctrl.Result{}, err
	}
	r.state.retryServices(retry)
	r.state.poolsDirty(slices.DeleteFunc(dirty, func(n string) bool { return n == req.Name }))
	// A speaker that stops reporting changes nothing the watch sees: look again when its
	// answers stop counting.
	var again time.Duration
	if !verdict.expires.IsZero() {
		again = time.Until(verdict.expires) + time.Second
	}
	// Nothing the watch sees ends a hold either: look again when the soonest one ends.
	if !nextExpiry.IsZero() {
		if wait := max(time.Until(nextExpiry), 0) + 10*time.Millisecond; again == 0 || wait < again {
			again = wait
		}
	}
	if !found {
		r.metrics.poolGone(req.Name)
		delete(r.lastWrite, req.Name)
		return ctrl.Result{}, nil
	}

	want := pool.DeepCopy()
	r.fill(ctx, want, facts, verdict.proxies[pool.Name])
	r.metrics.pool(pool.Name, facts)
	if equality.Semantic.DeepEqual(want.Status, pool.Status) {
		return ctrl.Result{RequeueAfter: again}, nil
	}
	if wait := poolWriteInterval - time.Since(r.lastWrite[pool.Name]); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	r.lastWrite[pool.Name] = time.Now()
	if err := r.Client.Status().Update(ctx, want); err != nil {
		return ctrl.Result{}, err
	}
	for _, u := range newlyInUse(pool.Status.InUse, want.Status.InUse) {
		if r.Recorder != nil {
			r.Recorder.Eventf(want, nil, corev1.EventTypeWarning, porticov1.ReasonAddressInUse, "Probe",
				"%s is in use by a foreign host (MAC %s, heard by node %s): it is not handed out while it answers", u.Address, u.MAC, u.SeenBy)
		}
	}
	for _, p := range newlyProxy(pool.Status.ProxyAnswerers, want.Status.ProxyAnswerers) {
		if r.Recorder != nil {
			r.Recorder.Eventf(want, nil, corev1.EventTypeWarning, porticov1.ReasonProxyAnswerer, "Probe",
				"MAC %s answers for %d of the pool's probed addresses (heard by node %s): taken for proxy ARP/NDP, its answers hold no address back", p.MAC, p.Addresses, p.SeenBy)
		}
	}
	return ctrl.Result{RequeueAfter: again}, nil
}

// fill computes the pool's whole status.
func (r *PoolReconciler) fill(ctx context.Context, pool *porticov1.IPAddressPool, f decide.PoolFacts, proxies []porticov1.ProxyAnswerer) {
	st := &pool.Status
	st.ObservedGeneration = pool.Generation
	if f.Stats.Size[0] != nil {
		st.AssignedIPv4, st.AssignedIPv6 = f.Stats.Assigned[0], f.Stats.Assigned[1]
		st.AvailableIPv4, st.AvailableIPv6 = decimalIf(f.Stats.Size[0], f.Stats.Available[0]), decimalIf(f.Stats.Size[1], f.Stats.Available[1])
		st.Assigned = f.Stats.Assigned[0] + f.Stats.Assigned[1]
		st.Available = new(big.Int).Add(f.Stats.Available[0], f.Stats.Available[1]).String()
	}
	st.Waiting = f.Waiting
	st.NextAddresses = nil
	for _, ip := range f.Next {
		st.NextAddresses = append(st.NextAddresses, ip.String())
	}
	st.InUse, st.ProxyAnswerers = f.InUse, proxies
	st.Holds = decide.HoldEntries(f.Holds)

	set := func(c metav1.Condition) {
		c.ObservedGeneration = pool.Generation
		meta.SetStatusCondition(&st.Conditions, c)
	}
	set(poolReadyCondition(pool))
	set(r.overlapCondition(ctx, pool))
	set(decide.ExhaustedCondition(f))
	set(decide.OrphanCondition(f))
	set(inUseCondition(pool.ProbesConflicts(), f.InUse, proxies))
	if r.news == nil {
		return
	}
	// A new leader keeps what the one before wrote until it has reviewed every Service.
	if shared, known := r.news.Shared(pool.Name); known {
		set(decide.SharedCondition(shared))
	}
}

func decimalIf(size, n *big.Int) string {
	if size == nil || size.Sign() == 0 {
		return ""
	}
	return n.String()
}

// overlapCondition names the other pools that share addresses with this one.
func (r *PoolReconciler) overlapCondition(ctx context.Context, pool *porticov1.IPAddressPool) metav1.Condition {
	c := metav1.Condition{Type: porticov1.ConditionOverlapping, Status: metav1.ConditionFalse, Reason: "NoOverlap",
		Message: "no other pool shares an address with this one"}
	var others porticov1.IPAddressPoolList
	if err := r.Client.List(ctx, &others); err != nil {
		return c
	}
	mine := decide.AllocatorPool(pool).Ranges
	var found []string
	for i := range others.Items {
		o := &others.Items[i]
		if o.Name == pool.Name {
			continue
		}
		for _, a := range mine {
			for _, b := range decide.AllocatorPool(o).Ranges {
				if a.Overlaps(b) {
					found = append(found, fmt.Sprintf("%s (%s overlaps %s)", o.Name, a, b))
				}
			}
		}
	}
	if len(found) > 0 {
		slices.Sort(found)
		c.Status, c.Reason = metav1.ConditionTrue, porticov1.ConditionOverlapping
		c.Message = "shares addresses with pool " + strings.Join(found, "; ") + "; an address taken through one pool is taken in both"
	}
	return c
}

// poolReadyCondition judges a pool's spec on its own; problems between pools are other
// conditions.
func poolReadyCondition(pool *porticov1.IPAddressPool) metav1.Condition {
	if len(pool.Spec.Addresses) == 0 {
		return notReady(porticov1.ReasonInvalidAddresses, "the pool lists no addresses")
	}
	if _, errs := rules.PoolRanges(pool); len(errs) > 0 {
		return notReady(porticov1.ReasonInvalidAddresses, joinErrors(errs))
	}
	if err := selectorErrors(pool.Spec.ServiceAllocation); err != nil {
		return notReady(porticov1.ReasonInvalidSelector, err.Error())
	}
	if h := pool.Spec.AddressHold; h != nil && pool.HoldFor() == 0 {
		return notReady(porticov1.ReasonInvalidAddressHold, fmt.Sprintf("addressHold.duration %s is not between %s and %s: no address is held",
			h.Duration.Duration, porticov1.MinAddressHold, porticov1.MaxAddressHold))
	}
	return metav1.Condition{
		Type:    porticov1.ConditionReady,
		Status:  metav1.ConditionTrue,
		Reason:  porticov1.ReasonValid,
		Message: fmt.Sprintf("%d address entries, all valid", len(pool.Spec.Addresses)),
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
