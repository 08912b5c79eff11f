package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/portico-lb/portico/controller"
)

// writerGoroutines lists the stacks of the goroutines the status writer started that are still
// running: its lanes and its retries.
func writerGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "portico/controller.(*statusWriter)") || strings.Contains(g, "portico/controller.(*goLanes)") {
			found = append(found, g)
		}
	}
	return found
}

// TestStatusWriterStops: the writer's lifecycle. While it runs, a write lands and a failed one
// comes back to its reconciler's queue; when its context ends, Start returns and none of its
// goroutines is left, not even a retry whose queue nobody reads any more; a write handed over
// afterwards is dropped at once, however many there are (they used to wait forever for a lane).
func TestStatusWriterStops(t *testing.T) {
	ns := namespace(t, nil)
	svc := createService(t, ns, "written")
	w := controller.NewStatusWriter(cp.Client)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- w.Start(ctx) }()

	queue := make(chan event.GenericEvent)
	cond := func(reason string) metav1.Condition {
		return metav1.Condition{Type: "portico.dev/WriterTest", Status: metav1.ConditionTrue, Reason: reason, Message: "test"}
	}
	w.SetCondition(svc, cond("Written"), queue)
	waitService(t, ns, "written", "the condition written", func(s *corev1.Service) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, "portico.dev/WriterTest")
		return c != nil && c.Reason == "Written"
	})

	gone := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone", ResourceVersion: "1"}}
	w.SetCondition(gone, cond("Lost"), queue)
	select {
	case ev := <-queue:
		if ev.Object.GetName() != "gone" {
			t.Fatalf("retry for %s/%s, want %s/gone", ev.Object.GetNamespace(), ev.Object.GetName(), ns)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a failed write was never retried")
	}
	w.SetCondition(gone, cond("Lost"), queue) // fails again; nobody reads queue from now on

	cancel()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not return after its context ended")
	}
	var left []string
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		left = writerGoroutines()
		return len(left) == 0, nil
	}); err != nil {
		t.Fatalf("%d of the writer's goroutines outlive it:\n%s", len(left), strings.Join(left, "\n\n"))
	}

	// More than every lane holds: a lane that no longer reads must not block the caller.
	handed := make(chan struct{})
	go func() {
		defer close(handed)
		for i := range controller.QueuedWritesMax + 1 {
			late := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprint("late-", i)}}
			w.SetCondition(late, cond("Late"), queue)
		}
	}()
	select {
	case <-handed:
	case <-time.After(30 * time.Second):
		t.Fatal("handing a write to a stopped writer blocks")
	}
}

// TestHealthWriteAfterTypeChange: a health write decided from a copy of a LoadBalancer Service
// meets it already turned ClusterIP (a conflict). Re-applied to the Service as stored, it puts
// no condition on it: the allocation's write took Portico's conditions off such a Service.
func TestHealthWriteAfterTypeChange(t *testing.T) {
	ns := namespace(t, nil)
	stale := createService(t, ns, "turned")
	turned := stale.DeepCopy()
	turned.Spec.Type = corev1.ServiceTypeClusterIP
	if err := cp.Client.Update(context.Background(), turned); err != nil {
		t.Fatal(err)
	}
	w := controller.NewStatusWriter(cp.Client)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Start(ctx) }()
	ours := func(s *corev1.Service) bool { return s.Spec.Type == corev1.ServiceTypeLoadBalancer }
	queue := make(chan event.GenericEvent, 1)
	health := metav1.Condition{Type: "portico.dev/HealthTest", Status: metav1.ConditionFalse, Reason: "Stale", Message: "test"}
	w.SetHealthCondition(stale, health, ours, queue)
	// One lane per Service, in order: once a later write lands, the health write is done.
	marker := metav1.Condition{Type: "portico.dev/Marker", Status: metav1.ConditionTrue, Reason: "After", Message: "test"}
	w.SetCondition(turned, marker, queue)
	svc := waitService(t, ns, "turned", "the marker written", func(s *corev1.Service) bool {
		return meta.FindStatusCondition(s.Status.Conditions, marker.Type) != nil
	})
	if c := meta.FindStatusCondition(svc.Status.Conditions, health.Type); c != nil {
		t.Fatalf("the health condition was written on a ClusterIP Service: %+v", c)
	}
	select {
	case ev := <-queue:
		t.Fatalf("a write to %s failed and was queued again", ev.Object.GetName())
	default:
	}
}

// TestStaleAddressWriteDropped: an address write decided from a copy of a Service that lists no
// address meets the Service holding another address already (a conflict): the next leader's
// write, met by an old leader that has not noticed it lost the lease. The write is dropped
// unsent and the Service comes back to its queue to be decided again; re-applied, it would
// put the old decision's address over the new leader's, which may have given it to another
// Service. A health write from the same stale copy is still re-applied: it sets conditions
// only.
func TestStaleAddressWriteDropped(t *testing.T) {
	ns := namespace(t, nil)
	stale := createService(t, ns, "contested")
	decided := stale.DeepCopy() // the next leader's decision, stored first
	decided.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.6"}}
	if err := cp.Client.Status().Update(context.Background(), decided); err != nil {
		t.Fatal(err)
	}
	w := controller.NewStatusWriter(cp.Client)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Start(ctx) }()
	queue := make(chan event.GenericEvent, 1)
	w.SetAddresses(stale, []netip.Addr{netip.MustParseAddr("198.51.100.5")}, queue)
	var retried bool
	var listed []string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case ev := <-queue:
			retried = ev.Object.GetName() == "contested"
		default:
		}
		var svc corev1.Service
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(stale), &svc); err != nil {
			return false, err
		}
		listed = nil
		for _, in := range svc.Status.LoadBalancer.Ingress {
			listed = append(listed, in.IP)
		}
		return retried || !slices.Equal(listed, []string{"198.51.100.6"}), nil
	})
	if err != nil {
		t.Fatalf("the stale write was neither dropped nor sent: %v", err)
	}
	if !slices.Equal(listed, []string{"198.51.100.6"}) {
		t.Fatalf("a write decided from a copy listing no address put %v over the next leader's 198.51.100.6", listed)
	}

	ours := func(*corev1.Service) bool { return true }
	health := metav1.Condition{Type: "portico.dev/HealthTest", Status: metav1.ConditionTrue, Reason: "Rebased", Message: "test"}
	w.SetHealthCondition(stale, health, ours, queue)
	svc := waitService(t, ns, "contested", "the health condition re-applied", func(s *corev1.Service) bool {
		return meta.FindStatusCondition(s.Status.Conditions, health.Type) != nil
	})
	if got := svc.Status.LoadBalancer.Ingress; len(got) != 1 || got[0].IP != "198.51.100.6" {
		t.Fatalf("the health write changed the addresses: %v", got)
	}
}
