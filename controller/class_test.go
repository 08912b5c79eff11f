package controller_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
)

// TestIgnoreClassless: with IgnoreClassless (--ignore-classless) Portico runs beside another
// load balancer: a Service with no loadBalancerClass is left alone (no address, no condition,
// no annotation, no finalizer, no event) while one of Portico's class gets its address. What
// the other load balancer wrote in its status is not Portico's either: it holds nothing.
func TestIgnoreClassless(t *testing.T) {
	cp.RunManager(t, func(mgr ctrl.Manager) error {
		return controller.Setup(mgr, controller.Options{IgnoreClassless: true})
	})
	ns := namespace(t, nil)
	pool := addresses("198.51.100.160/30")
	pool.ServiceAllocation = &porticov1.ServiceAllocation{Namespaces: []porticov1.Name{porticov1.Name(ns)}}
	createPool(t, "classes", pool)
	writeIngress(t, createService(t, ns, "classless"), "198.51.100.160") // the other load balancer's
	createService(t, ns, "classed", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To(porticov1.DefaultLoadBalancerClass) })
	waitIPs(t, ns, "classed", "198.51.100.160")
	waitEvent(t, ns, "classed", "IPAllocated", "198.51.100.160")

	var svc corev1.Service
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "classless"}, &svc); err != nil {
		t.Fatal(err)
	}
	if ips(&svc) != "198.51.100.160" || len(svc.Status.Conditions) > 0 || len(svc.Annotations) > 0 || len(svc.Finalizers) > 0 {
		t.Fatalf("the classless Service was touched: status %+v, annotations %v, finalizers %v", svc.Status, svc.Annotations, svc.Finalizers)
	}
	for _, e := range porticoEvents(t, ns) {
		if e.Regarding.Name == "classless" {
			t.Errorf("event on the classless Service: %s %s", e.Reason, e.Note)
		}
	}
}
