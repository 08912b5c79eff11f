package rules

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestNodeFitness(t *testing.T) {
	node := func(conds ...corev1.NodeCondition) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: conds}}
	}
	ready := func(s corev1.ConditionStatus) corev1.NodeCondition {
		return corev1.NodeCondition{Type: corev1.NodeReady, Status: s}
	}
	network := func(s corev1.ConditionStatus) corev1.NodeCondition {
		return corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: s}
	}
	for _, tc := range []struct {
		name                         string
		node                         *corev1.Node
		notReady, networkUnavailable bool
	}{
		{"no conditions (no kubelet posted)", node(), false, false},
		{"Ready", node(ready(corev1.ConditionTrue), network(corev1.ConditionFalse)), false, false},
		{"Ready False", node(ready(corev1.ConditionFalse)), true, false},
		{"Ready Unknown (kubelet stopped posting)", node(ready(corev1.ConditionUnknown)), true, false},
		{"network unavailable", node(ready(corev1.ConditionTrue), network(corev1.ConditionTrue)), false, true},
		{"network Unknown is not unavailable", node(network(corev1.ConditionUnknown)), false, false},
	} {
		h := FitnessOf(tc.node)
		nr, nu := h.NotReady, h.NetworkUnavailable
		if nr != tc.notReady || nu != tc.networkUnavailable {
			t.Errorf("%s: FitnessOf = %v, %v; want %v, %v", tc.name, nr, nu, tc.notReady, tc.networkUnavailable)
		}
	}
}
