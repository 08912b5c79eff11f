package controller_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// holdFinalizer stands for any controller's finalizer: it keeps a deleted Service in the API,
// Terminating, until it is removed.
const holdFinalizer = "example.com/hold"

func withHold(s *corev1.Service) { s.Finalizers = append(s.Finalizers, holdFinalizer) }

// deleteHeld deletes a Service that holdFinalizer keeps in the API, and lets it go when the
// test ends if the test did not.
func deleteHeld(t *testing.T, svc *corev1.Service) {
	t.Helper()
	if err := cp.Client.Delete(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { letGo(t, svc) })
}

// letGo removes holdFinalizer, so a Terminating Service is really deleted.
func letGo(t *testing.T, svc *corev1.Service) {
	t.Helper()
	var cur corev1.Service
	if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(svc), &cur); err != nil {
		if client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		return
	}
	update(t, &cur, func() {
		cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == holdFinalizer })
	})
}

// waitTerminating waits for the Terminating condition and checks the Service still lists ip.
func waitTerminating(t *testing.T, ns, name, ip string) {
	t.Helper()
	c := waitReason(t, ns, name, porticov1.ReasonTerminating)
	want := ip + " kept until the Service is deleted; nobody else gets it meanwhile (finalizers: " + holdFinalizer + ")"
	if c.Status != metav1.ConditionTrue || c.Message != want {
		t.Errorf("%s: condition %s %q, want True %q", name, c.Status, c.Message, want)
	}
	var svc corev1.Service
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
		t.Fatal(err)
	}
	if ips(&svc) != ip || c.ObservedGeneration != svc.Generation {
		t.Errorf("%s: Terminating with addresses %q (want %s), condition for generation %d of %d", name, ips(&svc), ip, c.ObservedGeneration, svc.Generation)
	}
}

// TestTerminatingKeepsItsAddress: a deleted Service that a finalizer keeps in the API still
// lists its address, which kube-proxy and the speakers go on using; a new Service in the
// same pool must wait for it, and gets it once the object is gone.
func TestTerminatingKeepsItsAddress(t *testing.T) {
	startManager(t)
	createPool(t, "terminating", addresses("198.51.100.180/32"))
	ns := namespace(t, nil)
	a := createService(t, ns, "a", withHold)
	waitIPs(t, ns, "a", "198.51.100.180")

	deleteHeld(t, a)
	waitTerminating(t, ns, "a", "198.51.100.180")
	waitEvent(t, ns, "a", porticov1.ReasonTerminating, "198.51.100.180 kept until the Service is deleted")
	createService(t, ns, "b")
	c := waitReason(t, ns, "b", porticov1.ReasonPoolExhausted)
	if c.Status != metav1.ConditionFalse {
		t.Errorf("b: %+v", c)
	}

	letGo(t, a)
	waitIPs(t, ns, "b", "198.51.100.180")
}

// TestTerminatingKeepsItsAddressWhenEditedAway: a Terminating Service whose type is edited
// away from LoadBalancer (the apiserver then clears its status) still keeps its address until
// the object is gone: a new Service waits for it, and the Service turned back into a
// LoadBalancer before it goes lists it again.
func TestTerminatingKeepsItsAddressWhenEditedAway(t *testing.T) {
	startManager(t)
	createPool(t, "terminating-edited", addresses("198.51.100.182/32"))
	ns := namespace(t, nil)
	a := createService(t, ns, "a", withHold)
	waitIPs(t, ns, "a", "198.51.100.182")
	deleteHeld(t, a)
	waitTerminating(t, ns, "a", "198.51.100.182")

	update(t, a, func() { a.Spec.Type = corev1.ServiceTypeClusterIP })
	waitService(t, ns, "a", "Portico's condition taken off the ClusterIP Service", func(s *corev1.Service) bool { return allocated(s) == nil })
	createService(t, ns, "b")
	if c := waitReason(t, ns, "b", porticov1.ReasonPoolExhausted); c.Status != metav1.ConditionFalse {
		t.Errorf("b: %+v", c)
	}

	update(t, a, func() { a.Spec.Type = corev1.ServiceTypeLoadBalancer })
	waitTerminating(t, ns, "a", "198.51.100.182")
	if c := waitReason(t, ns, "b", porticov1.ReasonPoolExhausted); c.Status != metav1.ConditionFalse {
		t.Errorf("b, after a turned back: %+v", c)
	}
	letGo(t, a)
	waitIPs(t, ns, "b", "198.51.100.182")
}

// TestRestartKeepsTerminatingAddress: a controller that starts while a Service is Terminating
// counts its address as taken.
func TestRestartKeepsTerminatingAddress(t *testing.T) {
	ctx := context.Background()
	pool := &porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "terminating-restart"}, Spec: addresses("198.51.100.181/32")}
	if err := cp.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(ctx, pool) })
	ns := namespace(t, nil)
	t.Run("first controller", func(t *testing.T) {
		startManager(t) // stopped when the subtest ends
		a := createService(t, ns, "a", withHold)
		waitIPs(t, ns, "a", "198.51.100.181")
		if err := cp.Client.Delete(ctx, a); err != nil {
			t.Fatal(err)
		}
		waitTerminating(t, ns, "a", "198.51.100.181")
	})
	a := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}}
	t.Cleanup(func() { letGo(t, a) })
	createService(t, ns, "b") // while no controller runs

	startManager(t)
	c := waitReason(t, ns, "b", porticov1.ReasonPoolExhausted)
	if !strings.Contains(c.Message, "terminating-restart") {
		t.Errorf("b: %+v", c)
	}
	waitTerminating(t, ns, "a", "198.51.100.181")
	letGo(t, a)
	waitIPs(t, ns, "b", "198.51.100.181")
}
