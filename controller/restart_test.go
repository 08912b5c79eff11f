package controller_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// TestRestartPrefersServicesThatFit: found by `make chaos` (an unedited Service's address
// changed). The leader moved Service "older" to pool fit-b and gave its freed address to
// "younger"; younger's status write landed, older's did not, and the leader was killed. Both
// statuses now list 198.51.100.161 (and .160 is free). The new leader must let younger keep it (its status
// meets its spec), not move it to the lowest free address, and move older, which asked for another pool, instead of honouring the
// older Service first and moving a Service nobody edited.
func TestRestartPrefersServicesThatFit(t *testing.T) {
	ctx := context.Background()
	for name, spec := range map[string]porticov1.IPAddressPoolSpec{
		"fit-a": addresses("198.51.100.160/30"), "fit-b": addresses("198.51.100.164/30"),
	} {
		pool := &porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
		if err := cp.Client.Create(ctx, pool); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cp.Client.Delete(ctx, pool) })
	}
	ns := namespace(t, nil)
	// Created in this order (and in one second, where names break the tie): "older" comes
	// first in age order.
	for _, svc := range []*corev1.Service{
		createService(t, ns, "older", withAnnotation(porticov1.AnnotationAddressPool, "fit-b")),
		createService(t, ns, "younger"),
	} {
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.161"}}
		if err := cp.Client.Status().Update(ctx, svc); err != nil {
			t.Fatal(err)
		}
	}
	startManager(t)
	waitIPs(t, ns, "older", "198.51.100.164")
	younger := waitService(t, ns, "younger", "an IPAllocated condition", func(s *corev1.Service) bool { return allocated(s) != nil })
	if got := ips(younger); got != "198.51.100.161" {
		t.Errorf("younger, never edited, moved from 198.51.100.161 to %s", got)
	}
}
