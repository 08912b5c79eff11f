package config_test

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestNoForwardGuardOverlay: config/no-forward-guard, rendered with the real kubectl, is the
// install manifests with the forwarding guard switched off and NET_ADMIN, which only the guard
// needs, no longer granted; nothing else differs in the speaker, and no object is added or lost.
func TestNoForwardGuardOverlay(t *testing.T) {
	objs := objectsOf(t, []byte(kubectl(t, "kustomize", "no-forward-guard")))
	key := func(kind, ns, name string) string { return kind + "/" + ns + "/" + name }
	var got []string
	var ds appsv1.DaemonSet
	for _, u := range objs {
		got = append(got, key(u.GetKind(), u.GetNamespace(), u.GetName()))
		if u.GetKind() == "DaemonSet" {
			must(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ds))
		}
	}
	var want []string
	for _, u := range renderedObjects(t) {
		want = append(want, key(u.GetKind(), u.GetNamespace(), u.GetName()))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the overlay renders %v, the manifests %v", got, want)
	}

	var base appsv1.DaemonSet
	renderedObject(t, "DaemonSet", "portico-speaker", &base)
	c, b := ds.Spec.Template.Spec.Containers[0], base.Spec.Template.Spec.Containers[0]
	if add := c.SecurityContext.Capabilities.Add; !slices.Equal(add, []corev1.Capability{"NET_RAW"}) {
		t.Errorf("the speaker without the guard is granted %v, want [NET_RAW]", add)
	}
	wantArgs := slices.Clone(b.Args)
	i := slices.Index(wantArgs, "--forward-guard=true")
	if i < 0 {
		t.Fatalf("the manifests' speaker args %v do not switch the guard on", b.Args)
	}
	wantArgs[i] = "--forward-guard=false"
	j := slices.Index(wantArgs, "--l2-handoff-grace=10m")
	if j < 0 {
		t.Fatalf("the manifests' speaker args %v do not switch the L2 hand-off on", b.Args)
	}
	wantArgs[j] = "--l2-handoff-grace=0s" // it needs NET_ADMIN too
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("the overlay's speaker args %v, want %v", c.Args, wantArgs)
	}
}
