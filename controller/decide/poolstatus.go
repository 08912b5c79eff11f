package decide

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

// PoolSeen is what the pool reconciler gathers of one pool: all its status decision reads.
type PoolSeen struct {
	Pool    *porticov1.IPAddressPool  // the cached copy: read only
	Pools   []porticov1.IPAddressPool // every pool, to name those sharing its addresses
	Facts   PoolFacts                 // the book's, InUse filled (Book.InUseIn)
	Proxies []porticov1.ProxyAnswerer // its proxy answerers (ProbeVerdict)
	// Shared are the problems its Services share (NewsDesk.Shared); unknown until a new
	// leader has reviewed every Service, when the condition stored stays as it is.
	Shared      []PoolNews
	SharedKnown bool
	Now         time.Time // a changed condition's lastTransitionTime
}

// PoolReady is a pool's status write: Want is the whole pool to store (nil: its status is
// right already), Tell the events told once it is stored.
type PoolReady struct {
	Want *porticov1.IPAddressPool
	Tell []Notice
}

// Pool is the pool's whole status: counts, waiting Services, the next addresses, those foreign
// hosts answer for, the holds, and the Ready, Overlapping, Exhausted, OrphanedIPs,
// AddressesInUse and SharedProblem conditions; a Warning for each address newly in use and
// each new proxy answerer.
func Pool(in PoolSeen) PoolReady {
	want := *in.Pool // the status is the decision's own; the rest is read only, as in.Pool
	want.Status = *in.Pool.Status.DeepCopy()
	fillPool(&want, in)
	if equality.Semantic.DeepEqual(want.Status, in.Pool.Status) {
		return PoolReady{}
	}
	rd := PoolReady{Want: &want}
	for _, u := range newlyInUse(in.Pool.Status.InUse, want.Status.InUse) {
		rd.Tell = append(rd.Tell, Notice{corev1.EventTypeWarning, porticov1.ReasonAddressInUse, "Probe",
			fmt.Sprintf("%s is in use by a foreign host (MAC %s, heard by node %s): it is not handed out while it answers", u.Address, u.MAC, u.SeenBy)})
	}
	for _, p := range newlyProxy(in.Pool.Status.ProxyAnswerers, want.Status.ProxyAnswerers) {
		rd.Tell = append(rd.Tell, Notice{corev1.EventTypeWarning, porticov1.ReasonProxyAnswerer, "Probe",
			fmt.Sprintf("MAC %s answers for %d of the pool's probed addresses (heard by node %s): taken for proxy ARP/NDP, its answers hold no address back", p.MAC, p.Addresses, p.SeenBy)})
	}
	return rd
}

// fillPool computes the pool's whole status.
func fillPool(pool *porticov1.IPAddressPool, in PoolSeen) {
	st, f := &pool.Status, in.Facts
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
	st.InUse, st.ProxyAnswerers = f.InUse, in.Proxies
	st.Holds = HoldEntries(f.Holds)

	set := func(c metav1.Condition) {
		c.ObservedGeneration, c.LastTransitionTime = pool.Generation, metav1.NewTime(in.Now)
		meta.SetStatusCondition(&st.Conditions, c)
	}
	set(PoolReadyCondition(pool))
	set(overlapCondition(pool, in.Pools))
	set(ExhaustedCondition(f))
	set(OrphanCondition(f))
	set(InUseCondition(pool.ProbesConflicts(), f.InUse, in.Proxies))
	// A new leader keeps what the one before wrote until it has reviewed every Service.
	if in.SharedKnown {
		set(SharedCondition(in.Shared))
	}
}

func decimalIf(size, n *big.Int) string {
	if size == nil || size.Sign() == 0 {
		return ""
	}
	return n.String()
}

// overlapCondition names the other pools that share addresses with this one.
func overlapCondition(pool *porticov1.IPAddressPool, all []porticov1.IPAddressPool) metav1.Condition {
	c := metav1.Condition{Type: porticov1.ConditionOverlapping, Status: metav1.ConditionFalse, Reason: "NoOverlap",
		Message: "no other pool shares an address with this one"}
	mine, _ := rules.PoolRanges(pool)
	var found []string
	for i := range all {
		o := &all[i]
		if o.Name == pool.Name {
			continue
		}
		theirs, _ := rules.PoolRanges(o)
		for _, a := range mine {
			for _, b := range theirs {
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

// PoolReadyCondition judges a pool's spec on its own; problems between pools are other
// conditions. It reports what the CRD's CEL rules cannot check (an IPv6 range that runs
// backwards, entries of one pool that overlap, malformed label selectors) and re-checks
// addressHold's bounds.
func PoolReadyCondition(pool *porticov1.IPAddressPool) metav1.Condition {
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

// PoolsLook is what the pool reconciler's look at the book changed: the Services to retry
// (an address came free), the pools whose status to write again, and when the soonest hold
// ends (zero: none).
type PoolsLook struct {
	Retry, Dirty []string
	NextExpiry   time.Time
}

// LookAtPools gives the book the addresses foreign hosts answer for, each with the MAC that
// answers, and ends the holds whose time is up, at now. Waiting Services are retried when an
// address came free, and when the answers changed at all: their PoolExhausted names the MACs.
func (b *Book) LookAtPools(inUse map[netip.Addr]string, now time.Time) PoolsLook {
	var l PoolsLook
	retry := b.SetInUse(inUse)
	if retry {
		l.Dirty = b.PoolNames() // their next addresses may change
	}
	if ended := b.ExpireHolds(now); len(ended) > 0 {
		retry = true
		l.Dirty = append(l.Dirty, ended...)
	}
	l.NextExpiry = b.NextExpiry()
	if retry {
		l.Retry = b.WaitingServices()
	}
	return l
}

// LookAgain is when the pool reconciler looks again though no watch event comes: when a
// speaker's answers stop counting (expires, a second after), or the soonest hold ends; zero:
// not before an event.
func LookAgain(expires, nextExpiry, now time.Time) time.Duration {
	var again time.Duration
	if !expires.IsZero() {
		again = expires.Sub(now) + time.Second
	}
	if !nextExpiry.IsZero() {
		if wait := max(nextExpiry.Sub(now), 0) + 10*time.Millisecond; again == 0 || wait < again {
			again = wait
		}
	}
	return again
}
