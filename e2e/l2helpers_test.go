package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Name: name} }

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// setLabel sets a label on a Node, or removes it when value is "-".
func setLabel(t *testing.T, e *l2Env, node, key, value string) {
	t.Helper()
	var n corev1.Node
	must(t, e.c.Get(context.Background(), clientKey(node), &n))
	if value == "-" {
		delete(n.Labels, key)
	} else {
		n.Labels[key] = value
	}
	must(t, e.c.Update(context.Background(), &n))
}

// setNodeConditions replaces a Node's conditions, as its kubelet and the node controller would.
func setNodeConditions(t *testing.T, e *l2Env, node string, conds ...corev1.NodeCondition) {
	t.Helper()
	var n corev1.Node
	must(t, e.c.Get(context.Background(), clientKey(node), &n))
	n.Status.Conditions = conds
	must(t, e.c.Status().Update(context.Background(), &n))
}

// setEndpoint gives svc one ready endpoint on node, as the EndpointSlice controller would.
func setEndpoint(t *testing.T, e *l2Env, svc *corev1.Service, node string) {
	t.Helper()
	ready := true
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name + "-1", Namespace: svc.Namespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"}, NodeName: &node,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	must(t, e.c.Create(context.Background(), es))
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), es) })
}
