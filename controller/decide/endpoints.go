package decide

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

// endpointCounts sums a Service's EndpointSlices; an endpoint listed in two slices (one per
// address family) counts once.
type endpointCounts struct {
	total, ready, terminating int
}

func countEndpoints(slices []discoveryv1.EndpointSlice) endpointCounts {
	var c endpointCounts
	seen := map[string]bool{}
	for i := range slices {
		for _, ep := range slices[i].Endpoints {
			id := endpointID(&ep)
			if seen[id] {
				continue
			}
			seen[id] = true
			c.total++
			if rules.ReadyEndpoint(&ep) {
				c.ready++
			}
			if ep.Conditions.Terminating != nil && *ep.Conditions.Terminating {
				c.terminating++
			}
		}
	}
	return c
}

// endpointID names an endpoint across the slices of its families: its pod when it has one.
func endpointID(ep *discoveryv1.Endpoint) string {
	if r := ep.TargetRef; r != nil && r.Kind == "Pod" {
		return "pod/" + r.Namespace + "/" + r.Name
	}
	if len(ep.Addresses) > 0 {
		return "addr/" + ep.Addresses[0]
	}
	return fmt.Sprintf("%p", ep)
}

// slicesOf are svc's among slices: a Service's health facts hold those of the Services sharing
// its addresses too.
func slicesOf(svc *corev1.Service, slices []discoveryv1.EndpointSlice) []discoveryv1.EndpointSlice {
	var out []discoveryv1.EndpointSlice
	for i := range slices {
		if slices[i].Namespace == svc.Namespace && slices[i].Labels[discoveryv1.LabelServiceName] == svc.Name {
			out = append(out, slices[i])
		}
	}
	return out
}

// endpointsCondition is the Service's EndpointsReady condition, from its EndpointSlices and,
// when they list nothing, the labels of the pods in its namespace: an empty slice is not an
// error to Kubernetes, so the condition says which selector found nothing and which labels
// exist near it.
func endpointsCondition(svc *corev1.Service, slices []discoveryv1.EndpointSlice, pods []map[string]string) metav1.Condition {
	c := metav1.Condition{Type: porticov1.ConditionEndpointsReady, ObservedGeneration: svc.Generation}
	n := countEndpoints(slicesOf(svc, slices))
	if len(svc.Spec.Selector) == 0 {
		if n.ready > 0 {
			c.Status, c.Reason = metav1.ConditionTrue, porticov1.ReasonEndpointsReady
			c.Message = fmt.Sprintf("%s (the Service has no selector: its EndpointSlices are managed outside Kubernetes)", readyCount(n))
			return c
		}
		c.Status, c.Reason = metav1.ConditionUnknown, porticov1.ReasonNoSelector
		c.Message = fmt.Sprintf("the Service has no selector, so Kubernetes does not manage its endpoints; no EndpointSlice labelled %s=%s lists a ready endpoint", discoveryv1.LabelServiceName, svc.Name)
		return c
	}
	sel := renderLabels(svc.Spec.Selector)
	switch {
	case n.ready > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, porticov1.ReasonEndpointsReady, readyCount(n)
	case n.total > 0:
		c.Status, c.Reason = metav1.ConditionFalse, porticov1.ReasonNoReadyEndpoints
		c.Message = fmt.Sprintf("%s selector %s, none is Ready", podsMatch(n.total), sel)
		if n.terminating > 0 {
			c.Message += fmt.Sprintf(" (%d terminating)", n.terminating)
		}
	default:
		matching := 0
		for _, l := range pods {
			if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(l)) {
				matching++
			}
		}
		if matching > 0 {
			c.Status, c.Reason = metav1.ConditionFalse, porticov1.ReasonNoReadyEndpoints
			c.Message = fmt.Sprintf("%s selector %s, none is in an EndpointSlice yet (not Ready, or no pod IP)", podsMatch(matching), sel)
			return c
		}
		c.Status, c.Reason = metav1.ConditionFalse, porticov1.ReasonNoEndpoints
		c.Message = fmt.Sprintf("selector %s matches no pods", sel)
		switch hints := closestLabels(svc.Spec.Selector, pods); {
		case len(pods) == 0:
			c.Message += fmt.Sprintf("; namespace %s has no pods", svc.Namespace)
		case len(hints) == 0:
			c.Message += fmt.Sprintf("; no pod in namespace %s has labels near it", svc.Namespace)
		default:
			c.Message += "; " + hints[0].String()
			if len(hints) > 1 {
				c.Message += ", " + hints[1].String()
			}
		}
	}
	return c
}

func readyCount(n endpointCounts) string {
	if n.ready == n.total {
		if n.ready == 1 {
			return "1 ready endpoint"
		}
		return fmt.Sprintf("%d ready endpoints", n.ready)
	}
	return fmt.Sprintf("%d of %d endpoints ready", n.ready, n.total)
}

func podsMatch(n int) string {
	if n == 1 {
		return "1 pod matches"
	}
	return fmt.Sprintf("%d pods match", n)
}
