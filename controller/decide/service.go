package decide

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
)

// Service and Health are the controller's decisions: the reconcilers gather what the apiserver
// says (ServiceReconciler.Reconcile, gatherHealth), one pure decision turns it into a Ready
// value (this package: no client, no context, no clock), and the reconcilers write that (the
// status writer, the events once the write lands). testdata/decide tells the decisions as a
// story.

// Seen is what the apiserver says about one Service: all a decision reads besides the book.
type Seen struct {
	Key  string
	Svc  *corev1.Service // nil: gone
	Ours bool            // rules.Handles: a LoadBalancer Service of our class, maybe Terminating
	Req  allocator.Request
	// ReqErr says why Req cannot be met as asked (a bad annotation); the Service keeps what
	// it holds meanwhile.
	ReqErr error
	// Listed is every address its stored status may list: the cached copy's, and those of our
	// writes on their way or not yet in the cache (the status writer's mayList).
	Listed []netip.Addr
	// NSLabels are the labels of its namespace Req was built with: a waiting Service's request
	// is built again when the pools change (ServeBacklog).
	NSLabels map[string]string
	// Health, when set, lets the first status write of a new Service carry its health
	// conditions with its address: one write per new Service, not two.
	Health *HealthFacts
	// Now is when it was seen: a gone Service's addresses are held from then (the pool's
	// addressHold), and holds whose time is up end. Zero: no hold is made or ended.
	Now time.Time
}

// Ready is what a decision asks for. Apply puts it on a copy of the Service.
type Ready struct {
	addresses bool // write asg as the ingress and the allocated-from-pool annotation
	asg       allocator.Assignment
	// Conditions to set; each type has one owner: allocatedCondition, endpointsCondition,
	// announcedCondition, reachableCondition.
	Conditions []metav1.Condition
	Remove     []string           // condition types to take off (a Service no longer ours)
	dropPool   bool               // take off the allocated-from-pool annotation
	Tell       []metav1.Condition // changes told as events (EventOf); allocation's once its write lands
	PoolTell   []PoolNews         // problems told on a pool (PoolNews.Notice): many of its Services share them
	Retry      []string           // Services to decide again: addresses were freed
	Pools      []string           // pools whose status may have changed
}

// Service steps the book with what was seen of one Service: allocate, keep (Terminating) or
// release its addresses, and say what to write and tell.
func Service(b *Book, in Seen) Ready {
	var freedIn []string // besides the decision's own
	if !in.Now.IsZero() {
		freedIn = b.ExpireHolds(in.Now)
	}
	if in.Svc != nil && b.replaced(in.Key, in.Svc.UID) {
		// Deleted and created again under its name, the gap unseen: what the old object held
		// is not the new one's to keep, though the pool may hold it for the new one.
		freedIn = append(freedIn, release(b, in.Key, in.Listed, in.Now)...)
	}
	var o outcome
	switch {
	case in.Svc != nil && in.Svc.DeletionTimestamp != nil:
		// Ours or not: a type edited away while Terminating frees nothing before it is gone.
		o = keep(b, in)
	case in.Svc == nil:
		o.freedIn = release(b, in.Key, in.Listed, in.Now)
	case !in.Ours:
		// An edit to another type or class lets go at once: the Service asked for it.
		o.freedIn = release(b, in.Key, in.Listed, time.Time{})
	default:
		o = allocate(b, in)
	}
	o.freedIn = append(o.freedIn, freedIn...)
	if in.Ours {
		b.uid[in.Key] = in.Svc.UID
	} else {
		delete(b.uid, in.Key)
	}
	rd := Ready{asg: o.asg, Pools: o.pools}
	if len(o.freedIn) > 0 && !b.bugs.NoRetryOnRelease {
		rd.Retry = b.WaitingServices()
		rd.Pools = append(rd.Pools, o.freedIn...)
	}
	switch {
	case in.Svc == nil:
		return rd
	case !in.Ours: // what Portico wrote goes; the health reconciler takes off its own conditions
		rd.Remove, rd.dropPool = []string{porticov1.ConditionIPAllocated}, true
		return rd
	}
	rd.addresses = true
	cond := allocatedCondition(in.Svc, o)
	rd.Conditions = []metav1.Condition{cond}
	if conditionChanged(in.Svc, cond) {
		rd.Tell = []metav1.Condition{cond}
	}
	if in.Health != nil {
		view := in.Svc.DeepCopy()
		rd.Apply(view) // health follows the address about to be written
		rd.Conditions = append(rd.Conditions, healthConditions(view, *in.Health)...)
	}
	return rd
}

// Writes reports whether the decision changes anything on the Service it was made for.
func (rd Ready) Writes() bool {
	return rd.addresses || rd.dropPool || len(rd.Conditions)+len(rd.Remove) > 0
}

// Apply puts the decision on a copy of the Service: what the status write sends.
func (rd Ready) Apply(want *corev1.Service) {
	if rd.addresses {
		want.Status.LoadBalancer.Ingress = nil
		for _, ip := range rd.asg.IPs {
			want.Status.LoadBalancer.Ingress = append(want.Status.LoadBalancer.Ingress,
				corev1.LoadBalancerIngress{IP: ip.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)})
		}
		if rd.asg.Pool() != "" {
			if want.Annotations == nil {
				want.Annotations = map[string]string{}
			}
			want.Annotations[porticov1.AnnotationAllocatedFromPool] = rd.asg.Pool()
		} else if len(rd.asg.IPs) == 0 {
			delete(want.Annotations, porticov1.AnnotationAllocatedFromPool)
		} // an orphaned address keeps naming the pool it came from
		if rd.asg.SharingKey != "" && len(rd.asg.IPs) > 0 {
			if want.Annotations == nil {
				want.Annotations = map[string]string{}
			}
			want.Annotations[porticov1.AnnotationAllocatedSharingKey] = rd.asg.SharingKey
		} else {
			delete(want.Annotations, porticov1.AnnotationAllocatedSharingKey)
		}
	}
	if rd.dropPool {
		delete(want.Annotations, porticov1.AnnotationAllocatedFromPool)
		delete(want.Annotations, porticov1.AnnotationAllocatedSharingKey)
	}
	for _, c := range rd.Conditions {
		meta.SetStatusCondition(&want.Status.Conditions, c)
	}
	for _, t := range rd.Remove {
		meta.RemoveStatusCondition(&want.Status.Conditions, t)
	}
}

// outcome is what one allocation decided.
type outcome struct {
	asg     allocator.Assignment
	err     error    // why the request is not met (the Service may still keep asg)
	freedIn []string // pools in which an address became free (names, not addresses)
	pools   []string // pools whose counts may have changed
}

// allocate gives a Service of ours what it asks for, or keeps what it holds and says why not.
func allocate(b *Book, in Seen) outcome {
	key, svc := in.Key, in.Svc
	before, _ := b.alloc.Assignment(key)
	was := b.dropLeaving(key) // what it is leaving never stands in its own way; held again below
	var o outcome
	if in.ReqErr != nil {
		o.asg, _ = b.alloc.Assignment(key) // keep what it has
		o.err = in.ReqErr
	} else {
		o.asg, o.err = b.allocateSeeded(in.Req)
		if o.err != nil {
			o.asg, _ = b.alloc.Assignment(key)
		}
	}
	if o.err != nil {
		b.waiting[key] = waiter{since: svc.CreationTimestamp.Time, pools: b.alloc.PoolsFor(in.Req), asked: AskedOf(svc, in.NSLabels)}
	} else {
		delete(b.waiting, key)
	}
	if o.asg.Orphaned() {
		b.orphanOf[key] = orphanedFrom(o.asg, svc.Annotations[porticov1.AnnotationAllocatedFromPool])
	} else {
		delete(b.orphanOf, key)
	}
	left := b.holdLeaving(key, was, in.Listed, o.asg.IPs)
	o.freedIn, o.pools = append(o.freedIn, left...), append(o.pools, left...)
	changed := !slices.Equal(before.IPs, o.asg.IPs)
	if !changed && o.asg.SharingKey != before.SharingKey {
		// Under its new key the addresses may be shared by Services waiting for one.
		o.freedIn = append(o.freedIn, b.poolsContaining(o.asg.IPs)...)
	}
	if changed {
		o.freedIn = appendPools(o.freedIn, before.Pool())
	}
	o.pools = appendPools(o.pools, before.Pool(), o.asg.Pool())
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

// release frees what a gone (or no longer LoadBalancer) Service held, except what our writes
// may still put in its status (listed; nothing once it is gone): a write on its way, made for
// an earlier version of it, is re-applied to the current one after a conflict, and that may be a
// LoadBalancer again (the type flipped twice); it would list an address another Service was
// given meanwhile. A gone Service's addresses are held for it from goneAt (zero: not gone),
// in pools with an addressHold. Returns the pools that gained addresses.
func release(b *Book, key string, listed []netip.Addr, goneAt time.Time) []string {
	held, ok := b.alloc.Assignment(key)
	delete(b.waiting, key)
	was := b.dropLeaving(key)
	if goneAt.IsZero() {
		b.alloc.Release(key)
	} else {
		// In whole seconds, as the pool's status stores a hold's end: the status written is then
		// the book's, not a rewrite every second.
		b.alloc.HoldReleased(key, goneAt.Truncate(time.Second), porticov1.MaxPoolHolds)
	}
	left := b.holdLeaving(key, was, listed, nil)
	if !ok {
		return left
	}
	orphanPool := b.orphanOf[key]
	delete(b.orphanOf, key)
	return append(appendPools(left, held.Pool(), orphanPool), b.poolsContaining(held.IPs)...)
}

// appendPools appends the pools names name: each is a pool, or a Service's pools as
// allocated-from-pool lists them ("v4pool,v6pool"), or "".
func appendPools(pools []string, names ...string) []string {
	for _, n := range names {
		for _, p := range strings.Split(n, ",") {
			if p != "" {
				pools = append(pools, p)
			}
		}
	}
	return pools
}

// orphanedFrom names the pools an orphaned address came from, as allocated-from-pool (written
// before it was orphaned) lists them: when it names a pool per address, only those of the
// orphaned ones (a dual-stack Service's IPv6 pool lost its range, its IPv4 one did not).
func orphanedFrom(asg allocator.Assignment, written string) string {
	names := strings.Split(written, ",")
	if len(names) != len(asg.IPs) || len(names) < 2 {
		return written
	}
	var lost []string
	for i, p := range asg.Pools {
		if p == "" {
			lost = append(lost, names[i])
		}
	}
	return strings.Join(lost, ",")
}
