package decide

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
)

// keep is the decision for a Terminating Service (deleted, held in the API by a finalizer):
// its addresses stay taken, since its status still lists them and kube-proxy and the speakers
// go on using them, until the object is gone; it gets nothing new. That holds too when its
// type or class is edited away meanwhile (the apiserver then clears its status): turned back,
// it would list them again. in.Listed is every address its stored status may list
// (ServiceReconciler.mayList). Who may share them follows its spec (allocator.Follow), and an
// edit meanwhile that forbids sharing an address it shares (its sharing key, ports or traffic
// policy) lets that address go, as for a Service not being deleted: two sharing keys never
// hold one address.
func keep(b *Book, in Seen) outcome {
	key, listed := in.Key, in.Listed
	if in.Ours && in.ReqErr == nil && b.alloc.Follow(in.Req) != nil {
		return outcome{freedIn: release(b, key, listed, time.Time{})}
	}
	var o outcome
	o.asg, _ = b.alloc.Assignment(key)
	// No longer waiting: the pools it waited on count one Service fewer.
	o.pools = appendPools(b.waiting[key].pools, o.asg.Pool())
	delete(b.waiting, key)
	o.freedIn = b.holdLeaving(key, b.dropLeaving(key), listed, o.asg.IPs)
	o.pools = append(o.pools, o.freedIn...)
	return o
}

// terminatingCondition says that a Terminating Service keeps its addresses, and what holds it.
func terminatingCondition(finalizers []string, asg allocator.Assignment) metav1.Condition {
	c := metav1.Condition{Type: porticov1.ConditionIPAllocated, Reason: porticov1.ReasonTerminating}
	held := "finalizers: " + strings.Join(finalizers, ", ")
	if len(asg.IPs) == 0 {
		c.Status, c.Message = metav1.ConditionFalse, fmt.Sprintf("no address: the Service is being deleted (%s)", held)
		return c
	}
	c.Status = metav1.ConditionTrue
	c.Message = fmt.Sprintf("%s kept until the Service is deleted; nobody else gets it meanwhile (%s)", andAddrs(asg.IPs), held)
	return c
}
