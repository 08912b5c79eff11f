package decide

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
)

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
		orphans, pooled := splitOrphans(o.asg)
		c.Message = fmt.Sprintf("%s is in no IPAddressPool any more; it stays assigned until the Service is deleted or asks for another address", andAddrs(orphans.IPs))
		if len(pooled.IPs) > 0 {
			c.Message += "; " + fromPools(pooled)
		}
	default:
		c.Status, c.Reason = metav1.ConditionTrue, porticov1.ReasonAllocated
		c.Message = fromPools(o.asg)
	}
	return c
}

// conditionChanged reports whether setting cond on the Service changes it (beyond the time).
func conditionChanged(svc *corev1.Service, cond metav1.Condition) bool {
	conds := slices.Clone(svc.Status.Conditions)
	return meta.SetStatusCondition(&conds, cond)
}

// Notice is an event to tell on a Service.
type Notice struct {
	Type, Reason, Action, Note string
}

// EventOf is the event that tells a condition's change.
func EventOf(c metav1.Condition) Notice {
	if c.Type == porticov1.ConditionIPAllocated {
		switch {
		case c.Reason == porticov1.ReasonTerminating:
			return Notice{corev1.EventTypeNormal, porticov1.ReasonTerminating, "Allocate", c.Message}
		case c.Status == metav1.ConditionTrue:
			return Notice{corev1.EventTypeNormal, "IPAllocated", "Allocate", c.Message}
		}
		return Notice{corev1.EventTypeWarning, "AllocationFailed", "Allocate", c.Reason + ": " + c.Message}
	}
	// Only a False condition is a problem; Unknown (Pending, NotProbed) is a state on its way.
	typ := corev1.EventTypeNormal
	if c.Status == metav1.ConditionFalse {
		typ = corev1.EventTypeWarning
	}
	short := strings.TrimPrefix(c.Type, "portico.dev/")
	return Notice{typ, c.Reason, short, fmt.Sprintf("%s %s: %s", short, c.Reason, c.Message)}
}
