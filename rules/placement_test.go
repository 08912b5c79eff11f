package rules

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestL2Rollout: balance waits while a node with a speaker is cordoned or restarts its speaker
// (Ready, speaker not alive); a node that is down (not Ready) or runs no speaker holds nothing
// back.
func TestL2Rollout(t *testing.T) {
	node := func(name string, cordoned, notReady bool) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: cordoned}}
		if notReady {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		}
		return n
	}
	alive := func(names ...string) func(string) bool {
		return func(n string) bool {
			for _, a := range names {
				if a == n {
					return true
				}
			}
			return false
		}
	}
	speakers := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name  string
		nodes []corev1.Node
		alive func(string) bool
		want  string
	}{
		{"settled", []corev1.Node{node("a", false, false), node("b", false, false)}, alive("a", "b"), ""},
		{"cordoned", []corev1.Node{node("a", true, false), node("b", false, false)}, alive("a", "b"),
			"a rollout is under way (cordoned: a)"},
		{"speaker restarting", []corev1.Node{node("a", false, false), node("b", false, false)}, alive("b"),
			"a rollout is under way (speaker not alive on a Ready node: a)"},
		{"node down", []corev1.Node{node("a", false, true), node("b", false, false)}, alive("b"), ""},
		{"no speaker on the node", []corev1.Node{node("a", false, false), node("cp", true, false)}, alive("a"), ""},
	} {
		if got := L2Rollout(tc.nodes, speakers, tc.alive); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
