package plan_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/plan"
)

// TestStopTranscripts runs testdata/stop/*.txt: what a stopping speaker does with its BGP routes
// and the hand-off's kernel state, from its Node as the cache last saw it and, when that is not
// the last stop, its DaemonSet as read at the stop.
//
//	stop node=(STATE,...) [ignore-exclude] [daemonset=READ]
//
// STATE: ready (Ready, schedulable), gone (no Node), deleting, cordoned, notready,
// network-unavailable, excluded (the exclude-from-external-load-balancers label), no-conditions,
// or taint=KEY. READ: present (its pods' speaker runs the hand-off), present-without-net-admin
// (the chart's speaker.forwardGuard=false), present-grace-0 (--l2-handoff-grace=0), deleting,
// gone, forbidden, unauthorized, unreachable.
func TestStopTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/stop", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "stop" {
				t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			}
			var n *corev1.Node
			ignore, read := false, ""
			for _, a := range d.CmdArgs {
				switch a.Key {
				case "node":
					n = stopNode(t, a.Vals)
				case "ignore-exclude":
					ignore = true
				case "daemonset":
					read = a.Vals[0]
				}
			}
			stop := plan.StopOf(n, ignore)
			if read != "" && !stop.Last {
				ds, template, err := daemonSetRead(t, read)
				stop = stop.AfterDaemonSet(ds, template, err)
			}
			routes := "every route withdrawn at once"
			if stop.Keep {
				routes = "routers keep the routes (graceful restart)"
			}
			state := "the hand-off's state left to the next speaker"
			switch clear, reason := stop.ClearsHandoff(); {
			case clear && reason == stop.Reason:
				state = "the hand-off's state removed"
			case clear:
				state = "the hand-off's state removed: " + reason
			}
			return fmt.Sprintf("%s: %s; %s", stop.Reason, routes, state)
		})
	})
}

func stopNode(t *testing.T, states []string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	now := metav1.Now()
	for _, s := range states {
		switch key, val, _ := strings.Cut(s, "="); key {
		case "ready":
		case "gone":
			return nil
		case "deleting":
			n.DeletionTimestamp = &now
		case "cordoned":
			n.Spec.Unschedulable = true
		case "notready":
			n.Status.Conditions[0].Status = corev1.ConditionUnknown
		case "network-unavailable":
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue})
		case "excluded":
			n.Labels[v1alpha1.LabelExcludeFromExternalLoadBalancers] = ""
		case "no-conditions":
			n.Status.Conditions = nil
		case "taint":
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: val, Effect: corev1.TaintEffectNoSchedule})
		default:
			t.Fatalf("unknown node state %q", s)
		}
	}
	return n
}

func daemonSetRead(t *testing.T, read string) (metav1.ObjectMeta, corev1.PodSpec, error) {
	ds := schema.GroupResource{Group: "apps", Resource: "daemonsets"}
	now := metav1.Now()
	speaker := func(netAdmin bool, grace string) corev1.PodSpec {
		sc := &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_RAW"}}}
		if netAdmin {
			sc.Capabilities.Add = append(sc.Capabilities.Add, "NET_ADMIN")
		}
		return corev1.PodSpec{Containers: []corev1.Container{{Name: "speaker", Args: []string{"--l2-handoff-grace=" + grace}, SecurityContext: sc}}}
	}
	meta := metav1.ObjectMeta{Name: "portico-speaker"}
	switch read {
	case "present":
		return meta, speaker(true, "10m"), nil
	case "present-without-net-admin":
		return meta, speaker(false, "0s"), nil
	case "present-grace-0":
		return meta, speaker(true, "0s"), nil
	case "deleting":
		meta.DeletionTimestamp = &now
		return meta, speaker(true, "10m"), nil
	case "gone":
		return metav1.ObjectMeta{}, corev1.PodSpec{}, apierrors.NewNotFound(ds, "portico-speaker")
	case "forbidden":
		return metav1.ObjectMeta{}, corev1.PodSpec{}, apierrors.NewForbidden(ds, "portico-speaker", errors.New("no rule"))
	case "unauthorized":
		return metav1.ObjectMeta{}, corev1.PodSpec{}, apierrors.NewUnauthorized("token")
	case "unreachable":
		return metav1.ObjectMeta{}, corev1.PodSpec{}, errors.New("dial tcp: connection refused")
	}
	t.Fatalf("unknown daemonset read %q", read)
	return metav1.ObjectMeta{}, corev1.PodSpec{}, nil
}
