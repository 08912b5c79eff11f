package controller

import (
	"errors"
	"fmt"
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
	"github.com/portico-lb/portico/rules"
)

// A Service goes through the controller as a message through etcd's raft: the reconcilers
// gather what the apiserver says (ServiceReconciler.Reconcile, gatherHealth), one pure
// decision turns it into a ready value (this file: no client, no context, no clock), and the
// reconcilers write that (statusWriter.submit, the events once the write lands).
// testdata/decide tells the decisions as a story.

// seen is what the apiserver says about one Service: all a decision reads besides the book.
type seen struct {
	key  string
	svc  *corev1.Service // nil: gone
	ours bool            // rules.Handles: a LoadBalancer Service of our class, maybe Terminating
	req  allocator.Request
	// reqErr says why req cannot be met as asked (a bad annotation); the Service keeps what
	// it holds meanwhile.
	reqErr error
	// listed is every address its stored status may list: the cached copy's, and those of our
	// writes on their way or not yet in the cache (statusWriter.mayList).
	listed []netip.Addr
	// health, when set, lets the first status write of a new Service carry its health
	// conditions with its address: one write per new Service, not two.
	health *healthFacts
}

// ready is what a decision asks for. apply puts it on a copy of the Service.
type ready struct {
	addresses bool // write asg as the ingress and the allocated-from-pool annotation
	asg       allocator.Assignment
	// conditions to set; each type has one owner: allocatedCondition, endpointsCondition,
	// announcedCondition, reachableCondition.
	conditions []metav1.Condition
	remove     []string           // condition types to take off (a Service no longer ours)
	dropPool   bool               // take off the allocated-from-pool annotation
	tell       []metav1.Condition // changes told as events (eventOf); allocation's once its write lands
	retry      []string           // Services to decide again: addresses were freed
	pools      []string           // pools whose status may have changed
}

// decide steps the book with what was seen of one Service: allocate, keep (Terminating) or
// release its addresses, and say what to write and tell.
func decide(b *book, in seen) ready {
	var o outcome
	switch {
	case in.svc != nil && in.svc.DeletionTimestamp != nil:
		// Ours or not: a type edited away while Terminating frees nothing before it is gone.
		o = keep(b, in.key, in.listed)
	case !in.ours:
		o.freedIn = release(b, in.key, in.listed)
	default:
		o = allocate(b, in)
	}
	rd := ready{asg: o.asg, pools: o.pools}
	if len(o.freedIn) > 0 {
		rd.retry = b.waitingServices()
		rd.pools = append(rd.pools, o.freedIn...)
	}
	switch {
	case in.svc == nil:
		return rd
	case !in.ours: // what Portico wrote goes; the health reconciler takes off its own conditions
		rd.remove, rd.dropPool = []string{porticov1.ConditionIPAllocated}, true
		return rd
	}
	rd.addresses = true
	cond := allocatedCondition(in.svc, o)
	rd.conditions = []metav1.Condition{cond}
	if conditionChanged(in.svc, cond) {
		rd.tell = []metav1.Condition{cond}
	}
	if in.health != nil {
		view := in.svc.DeepCopy()
		rd.apply(view) // health follows the address about to be written
		rd.conditions = append(rd.conditions, healthConditions(view, *in.health)...)
	}
	return rd
}

// writes reports whether the decision changes anything on the Service it was made for.
func (rd ready) writes() bool {
	return rd.addresses || rd.dropPool || len(rd.conditions)+len(rd.remove) > 0
}

// apply puts the decision on a copy of the Service: what the status write sends.
func (rd ready) apply(want *corev1.Service) {
	if rd.addresses {
		want.Status.LoadBalancer.Ingress = nil
		for _, ip := range rd.asg.IPs {
			want.Status.LoadBalancer.Ingress = append(want.Status.LoadBalancer.Ingress,
				corev1.LoadBalancerIngress{IP: ip.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)})
		}
		if rd.asg.Pool != "" {
			if want.Annotations == nil {
				want.Annotations = map[string]string{}
			}
			want.Annotations[porticov1.AnnotationAllocatedFromPool] = rd.asg.Pool
		} else if len(rd.asg.IPs) == 0 {
			delete(want.Annotations, porticov1.AnnotationAllocatedFromPool)
		} // an orphaned address keeps naming the pool it came from
	}
	if rd.dropPool {
		delete(want.Annotations, porticov1.AnnotationAllocatedFromPool)
	}
	for _, c := range rd.conditions {
		meta.SetStatusCondition(&want.Status.Conditions, c)
	}
	for _, t := range rd.remove {
		meta.RemoveStatusCondition(&want.Status.Conditions, t)
	}
}

// healthFacts is what a Service's health conditions are folded from.
type healthFacts struct {
	rules.Cluster // the nodes, the Service's EndpointSlices, the L2Advertisements, the pools
	bgpAds        []porticov1.BGPAdvertisement
	speakers      []porticov1.Speaker
	// pods are the labels of the namespace's pods, read only when the Service has a selector
	// and its slices list no endpoint (the hint in EndpointsReady).
	pods []map[string]string
}

// healthConditionTypes are the condition types the health conditions are.
var healthConditionTypes = []string{porticov1.ConditionEndpointsReady, porticov1.ConditionAnnounced, porticov1.ConditionReachable}

// healthConditions are the Service's health conditions, each from its owner.
func healthConditions(svc *corev1.Service, f healthFacts) []metav1.Condition {
	return []metav1.Condition{endpointsCondition(svc, f.EndpointSlices, f.pods), announcedCondition(svc, f), reachableCondition(svc, f.speakers)}
}

// decideHealth is the health reconciler's decision for a Service of ours that has its
// allocation: its health conditions when any changed, and what the news desk, which tells a
// stored problem only once it has lasted, tells at now.
func decideHealth(svc *corev1.Service, f healthFacts, desk *newsDesk, now time.Time) (rd ready, again time.Duration) {
	rd.tell, again = desk.review(svc.Namespace+"/"+svc.Name, svc.Status.Conditions, healthConditionTypes, now)
	conds := healthConditions(svc, f)
	if slices.ContainsFunc(conds, func(c metav1.Condition) bool { return conditionChanged(svc, c) }) {
		rd.conditions = conds
	}
	return rd, again
}

// outcome is what one allocation decided.
type outcome struct {
	asg     allocator.Assignment
	err     error    // why the request is not met (the Service may still keep asg)
	freedIn []string // pools in which an address became free (names, not addresses)
	pools   []string // pools whose counts may have changed
}

// allocate gives a Service of ours what it asks for, or keeps what it holds and says why not.
func allocate(b *book, in seen) outcome {
	key, svc := in.key, in.svc
	before, _ := b.alloc.Assignment(key)
	was := b.dropLeaving(key) // what it is leaving never stands in its own way; held again below
	var o outcome
	if in.reqErr != nil {
		o.asg, _ = b.alloc.Assignment(key) // keep what it has
		o.err = in.reqErr
	} else {
		o.asg, o.err = b.alloc.Allocate(in.req)
		if o.err != nil {
			o.asg, _ = b.alloc.Assignment(key)
		}
	}
	if o.err != nil {
		b.waiting[key] = waiter{since: svc.CreationTimestamp.Time, pools: b.alloc.PoolsFor(in.req)}
	} else {
		delete(b.waiting, key)
	}
	if o.asg.Orphaned() {
		b.orphanOf[key] = svc.Annotations[porticov1.AnnotationAllocatedFromPool]
	} else {
		delete(b.orphanOf, key)
	}
	left := b.holdLeaving(key, was, in.listed, o.asg.IPs)
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

// release frees what a gone (or no longer LoadBalancer) Service held, except what our writes
// may still put in its status (listed; nothing once it is gone): a write on its way, made for
// an earlier version of it, is re-applied to the current one after a conflict, and that may be a
// LoadBalancer again (the type flipped twice); it would list an address another Service was
// given meanwhile. Returns the pools that gained addresses.
func release(b *book, key string, listed []netip.Addr) []string {
	held, ok := b.alloc.Assignment(key)
	delete(b.waiting, key)
	was := b.dropLeaving(key)
	b.alloc.Release(key)
	left := b.holdLeaving(key, was, listed, nil)
	if !ok {
		return left
	}
	orphanPool := b.orphanOf[key]
	delete(b.orphanOf, key)
	return append(appendPools(left, held.Pool, orphanPool), b.poolsContaining(held.IPs)...)
}

func appendPools(pools []string, names ...string) []string {
	for _, n := range names {
		if n != "" {
			pools = append(pools, n)
		}
	}
	return pools
}

// allocatedCondition is the Service's IPAllocated condition, its one owner: what the
// allocation gave, why it gave nothing, or what a Terminating Service keeps.
func allocatedCondition(svc *corev1.Service, o outcome) metav1.Condition {
	if svc.DeletionTimestamp != nil {
		c := terminatingCondition(svc.Finalizers, o.asg)
		c.ObservedGeneration = svc.Generation
		return c
	}
	c := metav1.Condition{Type: porticov1.ConditionIPAllocated, ObservedGeneration: svc.Generation}
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

// conditionChanged reports whether setting cond on the Service changes it (beyond the time).
func conditionChanged(svc *corev1.Service, cond metav1.Condition) bool {
	conds := slices.Clone(svc.Status.Conditions)
	return meta.SetStatusCondition(&conds, cond)
}

// notice is an event to tell on a Service.
type notice struct {
	eventType, reason, action, note string
}

// eventOf is the event that tells a condition's change.
func eventOf(c metav1.Condition) notice {
	if c.Type == porticov1.ConditionIPAllocated {
		switch {
		case c.Reason == porticov1.ReasonTerminating:
			return notice{corev1.EventTypeNormal, porticov1.ReasonTerminating, "Allocate", c.Message}
		case c.Status == metav1.ConditionTrue:
			return notice{corev1.EventTypeNormal, "IPAllocated", "Allocate", c.Message}
		}
		return notice{corev1.EventTypeWarning, "AllocationFailed", "Allocate", c.Reason + ": " + c.Message}
	}
	// Only a False condition is a problem; Unknown (Pending, NotProbed) is a state on its way.
	typ := corev1.EventTypeNormal
	if c.Status == metav1.ConditionFalse {
		typ = corev1.EventTypeWarning
	}
	short := strings.TrimPrefix(c.Type, "portico.dev/")
	return notice{typ, c.Reason, short, fmt.Sprintf("%s %s: %s", short, c.Reason, c.Message)}
}
