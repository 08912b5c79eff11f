package speaker

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// TestBGPStopOf: a stop is a restart (the routers keep the routes) only on a node that stays:
// present, fit, schedulable, not excluded, not going away; it is the last (the hand-off's kernel
// state goes too) only on a node going away (and, read at the stop, in an uninstall).
func TestBGPStopOf(t *testing.T) {
	node := func(edit func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		if edit != nil {
			edit(n)
		}
		return n
	}
	now := metav1.Now()
	for _, tc := range []struct {
		name          string
		n             *corev1.Node
		ignoreExclude bool
		want          bgpStop
	}{
		{"a rolling update: the node stays", node(nil), false, bgpStop{keep: true, reason: "restart"}},
		{"no conditions yet (a lab)", node(func(n *corev1.Node) { n.Status.Conditions = nil }), false, bgpStop{keep: true, reason: "restart"}},
		{"the Node gone", nil, false, bgpStop{reason: "node-gone", last: true}},
		{"the Node being deleted", node(func(n *corev1.Node) { n.DeletionTimestamp = &now }), false, bgpStop{reason: "node-deleting", last: true}},
		{"cordoned: a drain", node(func(n *corev1.Node) { n.Spec.Unschedulable = true }), false, bgpStop{reason: "cordoned"}},
		{"not Ready", node(func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionUnknown }), false, bgpStop{reason: "not-ready"}},
		{"network unavailable", node(func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue})
		}), false, bgpStop{reason: "not-ready"}},
		{"excluded", node(func(n *corev1.Node) { n.Labels[v1alpha1.LabelExcludeFromExternalLoadBalancers] = "" }), false, bgpStop{reason: "excluded"}},
		{"excluded, label ignored", node(func(n *corev1.Node) { n.Labels[v1alpha1.LabelExcludeFromExternalLoadBalancers] = "" }), true, bgpStop{keep: true, reason: "restart"}},
		{"the autoscaler removing it", node(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule}}
		}), false, bgpStop{reason: "node-leaving", last: true}},
		{"out of service", node(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeOutOfService, Effect: corev1.TaintEffectNoExecute}}
		}), false, bgpStop{reason: "node-leaving", last: true}},
	} {
		if got := bgpStopOf(tc.n, tc.ignoreExclude); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestUninstalling: the speaker's DaemonSet gone, being deleted or out of its reach (its RBAC
// and ServiceAccount removed with the chart) is an uninstall; an apiserver out of reach is not.
func TestUninstalling(t *testing.T) {
	now := metav1.Now()
	ds := schema.GroupResource{Group: "apps", Resource: "daemonsets"}
	for _, tc := range []struct {
		name string
		meta metav1.ObjectMeta
		err  error
		want bool
	}{
		{"present", metav1.ObjectMeta{Name: "portico-speaker"}, nil, false},
		{"being deleted (foreground)", metav1.ObjectMeta{Name: "portico-speaker", DeletionTimestamp: &now}, nil, true},
		{"gone", metav1.ObjectMeta{}, apierrors.NewNotFound(ds, "portico-speaker"), true},
		{"RBAC gone", metav1.ObjectMeta{}, apierrors.NewForbidden(ds, "portico-speaker", errors.New("no rule")), true},
		{"ServiceAccount gone", metav1.ObjectMeta{}, apierrors.NewUnauthorized("token"), true},
		{"apiserver out of reach", metav1.ObjectMeta{}, errors.New("dial tcp: connection refused"), false},
	} {
		if got := uninstalling(tc.meta, tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
