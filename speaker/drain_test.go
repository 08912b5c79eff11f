package speaker

import (
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCordonsKeepTheFirstSighting: a node's grace counts from when it was first seen cordoned,
// not from each later plan, and starts again once it was uncordoned in between.
func TestCordonsKeepTheFirstSighting(t *testing.T) {
	node := func(name string, cordoned bool) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: cordoned}}
	}
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var c cordons
	steps := []struct {
		nodes []corev1.Node
		at    time.Duration
		want  map[string]time.Time
	}{
		{[]corev1.Node{node("a", false), node("b", true)}, 0, map[string]time.Time{"b": t0}},
		{[]corev1.Node{node("a", true), node("b", true)}, 10 * time.Second, map[string]time.Time{"a": t0.Add(10 * time.Second), "b": t0}},
		{[]corev1.Node{node("a", true), node("b", false)}, 20 * time.Second, map[string]time.Time{"a": t0.Add(10 * time.Second)}},
		{[]corev1.Node{node("a", true), node("b", true)}, 30 * time.Second, map[string]time.Time{"a": t0.Add(10 * time.Second), "b": t0.Add(30 * time.Second)}},
		{[]corev1.Node{node("b", true)}, 40 * time.Second, map[string]time.Time{"b": t0.Add(30 * time.Second)}},
	}
	for i, s := range steps {
		if got := c.observe(s.nodes, t0.Add(s.at)); !maps.Equal(got, s.want) {
			t.Fatalf("step %d: cordoned since %v, want %v", i, got, s.want)
		}
	}
}
