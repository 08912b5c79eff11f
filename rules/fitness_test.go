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
		outOfService                 bool
	}{
		{"no conditions (no kubelet posted)", node(), false, false, false},
		{"Ready", node(ready(corev1.ConditionTrue), network(corev1.ConditionFalse)), false, false, false},
		{"Ready False", node(ready(corev1.ConditionFalse)), true, false, false},
		{"Ready Unknown (kubelet stopped posting)", node(ready(corev1.ConditionUnknown)), true, false, false},
		{"network unavailable", node(ready(corev1.ConditionTrue), network(corev1.ConditionTrue)), false, true, false},
		{"network Unknown is not unavailable", node(network(corev1.ConditionUnknown)), false, false, false},
		{"out of service though Ready", tainted(node(ready(corev1.ConditionTrue)), corev1.TaintNodeOutOfService, corev1.TaintEffectNoExecute), false, false, true},
		{"out of service, NoSchedule", tainted(node(), corev1.TaintNodeOutOfService, corev1.TaintEffectNoSchedule), false, false, true},
		{"another taint", tainted(node(), corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule), false, false, false},
	} {
		h := FitnessOf(tc.node)
		nr, nu, oos := h.NotReady, h.NetworkUnavailable, h.OutOfService
		if nr != tc.notReady || nu != tc.networkUnavailable || oos != tc.outOfService {
			t.Errorf("%s: FitnessOf = %v, %v, %v; want %v, %v, %v", tc.name, nr, nu, oos, tc.notReady, tc.networkUnavailable, tc.outOfService)
		}
		if h.Unfit() != (tc.notReady || tc.networkUnavailable || tc.outOfService) {
			t.Errorf("%s: Unfit = %v", tc.name, h.Unfit())
		}
	}
}

func tainted(n *corev1.Node, key string, effect corev1.TaintEffect) *corev1.Node {
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: "nodeshutdown", Effect: effect})
	return n
}
