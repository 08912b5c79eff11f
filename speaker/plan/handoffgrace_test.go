package plan

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestRunsHandoff: the speaker a DaemonSet's pod template starts adopts the hand-off's state
// only with NET_ADMIN and a grace above 0 (flags read as the flag package reads them); a
// template it cannot read so is taken to run it.
func TestRunsHandoff(t *testing.T) {
	caps := func(add ...corev1.Capability) *corev1.SecurityContext {
		return &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: add}}
	}
	privileged := true
	for _, tc := range []struct {
		name string
		c    corev1.Container
		want bool
	}{
		{"the manifests", corev1.Container{Name: "speaker", Args: []string{"--forward-guard=true", "--l2-handoff-grace=10m"}, SecurityContext: caps("NET_RAW", "NET_ADMIN")}, true},
		{"speaker.forwardGuard=false", corev1.Container{Name: "speaker", Args: []string{"--forward-guard=false", "--l2-handoff-grace=0s"}, SecurityContext: caps("NET_RAW")}, false},
		{"NET_ADMIN, grace 0", corev1.Container{Name: "speaker", Args: []string{"--l2-handoff-grace=0"}, SecurityContext: caps("NET_RAW", "NET_ADMIN")}, false},
		{"NET_ADMIN, grace negative", corev1.Container{Name: "speaker", Args: []string{"-l2-handoff-grace=-1s"}, SecurityContext: caps("NET_ADMIN")}, false},
		{"grace 0 as two arguments", corev1.Container{Name: "speaker", Args: []string{"--l2-handoff-grace", "0s"}, SecurityContext: caps("NET_ADMIN")}, false},
		{"grace in the command", corev1.Container{Name: "speaker", Command: []string{"/portico-speaker", "--l2-handoff-grace=0s"}, SecurityContext: caps("NET_ADMIN")}, false},
		{"the last grace counts", corev1.Container{Name: "speaker", Args: []string{"--l2-handoff-grace=0s", "--l2-handoff-grace=5m"}, SecurityContext: caps("NET_ADMIN")}, true},
		{"grace by default", corev1.Container{Name: "speaker", SecurityContext: caps("NET_ADMIN")}, true},
		{"a flag named alike", corev1.Container{Name: "speaker", Args: []string{"--l2-handoff-grace-x=0s"}, SecurityContext: caps("NET_ADMIN")}, true},
		{"CAP_ prefix", corev1.Container{Name: "speaker", SecurityContext: caps("CAP_NET_ADMIN")}, true},
		{"all capabilities", corev1.Container{Name: "speaker", SecurityContext: caps("ALL")}, true},
		{"privileged", corev1.Container{Name: "speaker", SecurityContext: &corev1.SecurityContext{Privileged: &privileged}}, true},
		{"the runtime's default capabilities", corev1.Container{Name: "speaker"}, false},
		{"capabilities dropped, none added", corev1.Container{Name: "speaker", SecurityContext: caps()}, false},
		{"no container named speaker", corev1.Container{Name: "portico", SecurityContext: caps("NET_RAW")}, true},
		{"a grace that is no duration", corev1.Container{Name: "speaker", Args: []string{"--l2-handoff-grace=soon"}, SecurityContext: caps("NET_RAW")}, true},
	} {
		p := corev1.PodSpec{Containers: []corev1.Container{{Name: "bgp", Args: []string{"bgp-process"}}, tc.c}}
		if got := runsHandoff(p); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
