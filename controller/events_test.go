package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
)

// TestEventsWaitForStatusWrites: addresses come before news. While one Service's status
// write is on its way, another Service whose address was written has its IPAllocated event
// waiting (portico_events_pending), not sent; once no write is pending, both events are sent.
func TestEventsWaitForStatusWrites(t *testing.T) {
	ns := namespace(t, nil)
	held := holdStatusWrites(client.ObjectKey{Namespace: ns, Name: "slow"})
	reg := prometheus.NewRegistry()
	cp.RunManager(t, func(mgr ctrl.Manager) error {
		return controller.Setup(mgr, controller.Options{Metrics: controller.NewMetrics(reg)})
	}, held.wrap)
	t.Cleanup(held.release) // before the manager stops (cleanups run last first)
	createPool(t, "events-wait", addresses("198.51.100.244/31"))

	createService(t, ns, "slow", withAnnotation(porticov1.AnnotationAddressPool, "events-wait"))
	held.waitArrived(t) // slow's write is on its way, and stays there
	createService(t, ns, "fast", withAnnotation(porticov1.AnnotationAddressPool, "events-wait"))
	waitIPs(t, ns, "fast", "198.51.100.245")
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		pending, _ := sample(t, reg, "portico_events_pending", nil)
		return pending == 1, nil
	})
	if err != nil {
		t.Fatal("fast's IPAllocated event is not waiting behind slow's status write")
	}
	for _, e := range porticoEvents(t, ns) {
		t.Errorf("event %s on %s sent while a status write was pending", e.Reason, e.Regarding.Name)
	}

	held.release()
	waitEvent(t, ns, "fast", "IPAllocated", "198.51.100.245 from pool events-wait")
	waitEvent(t, ns, "slow", "IPAllocated", "198.51.100.244 from pool events-wait")
}
