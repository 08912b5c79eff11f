package events

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// TestEventQueue: identical events waiting together become one, sent as a series with their
// count (the object's resourceVersion does not make them different); a different note is
// another event; beyond maxPending the newest are dropped and counted.
func TestEventQueue(t *testing.T) {
	s := NewSender(Options{Scheme: clientgoscheme.Scheme, Controller: "portico-controller", Metrics: NewMetrics(prometheus.NewRegistry())})
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "gitea", UID: "u1", ResourceVersion: "1"}}
	s.Eventf(svc, nil, corev1.EventTypeWarning, "AllocationFailed", "Allocate", "%s", "pool home-lab is full")
	svc.ResourceVersion = "2"
	s.Eventf(svc, nil, corev1.EventTypeWarning, "AllocationFailed", "Allocate", "%s", "pool home-lab is full")
	s.Eventf(svc, nil, corev1.EventTypeNormal, "IPAllocated", "Allocate", "%s", "10.0.0.200 from pool home-lab")

	first := s.take()
	if first.count != 2 || first.key.reason != "AllocationFailed" || first.regarding.ResourceVersion != "1" {
		t.Errorf("first: %d × %s (regarding resourceVersion %s), want 2 × AllocationFailed at 1", first.count, first.key.reason, first.regarding.ResourceVersion)
	}
	if second := s.take(); second.count != 1 || second.key.note != "10.0.0.200 from pool home-lab" {
		t.Errorf("second: %d × %q, want the allocation once", second.count, second.key.note)
	}

	for i := range maxPending + 3 {
		s.Eventf(svc, nil, corev1.EventTypeNormal, "IPAllocated", "Allocate", "%d", i)
	}
	var dropped dto.Metric
	if err := s.o.Metrics.Dropped.Write(&dropped); err != nil {
		t.Fatal(err)
	}
	if len(s.queue) != maxPending || dropped.GetCounter().GetValue() != 3 {
		t.Errorf("%d waiting, %v dropped; want %d and 3", len(s.queue), dropped.GetCounter().GetValue(), maxPending)
	}
}

// TestEventQueueFolds: more than foldAbove events of one kind about objects related to one
// object, waiting together, are sent as one event on that object, counting them and naming the
// first few; as many or fewer are sent each on its own, and so is an event of another kind.
func TestEventQueueFolds(t *testing.T) {
	s := NewSender(Options{Scheme: clientgoscheme.Scheme, Controller: "portico-controller", Metrics: NewMetrics(prometheus.NewRegistry())})
	pool := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "home-lab", UID: "p1"}} // any object with a kind the scheme knows
	allocate := func(n int) {
		for i := range n {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: fmt.Sprintf("s-%02d", i), UID: types.UID(fmt.Sprint(i))}}
			s.Eventf(svc, pool, corev1.EventTypeNormal, "IPAllocated", "Allocate", "10.0.0.%d from pool home-lab", i)
		}
	}
	allocate(foldAbove)
	s.Eventf(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "x"}}, pool, corev1.EventTypeWarning, "AllocationFailed", "Allocate", "full")
	for i := range foldAbove {
		if p := s.take(); p.regarding.Kind != "Service" || p.key.note != fmt.Sprintf("10.0.0.%d from pool home-lab", i) {
			t.Fatalf("event %d: %s %q, want each of %d on its Service", i, p.regarding.Kind, p.key.note, foldAbove)
		}
	}
	if p := s.take(); p.key.reason != "AllocationFailed" {
		t.Fatalf("got %s, want the AllocationFailed", p.key.reason)
	}

	allocate(50)
	p := s.take()
	want := "50 Services: apps/s-00: 10.0.0.0 from pool home-lab; apps/s-01: 10.0.0.1 from pool home-lab; apps/s-02: 10.0.0.2 from pool home-lab; and 47 more"
	if p.regarding.Name != "home-lab" || p.key.reason != "IPAllocated" || p.key.note != want {
		t.Errorf("folded: on %s %s %q; want on home-lab IPAllocated %q", p.regarding.Kind, p.key.reason, p.key.note, want)
	}
	if len(s.queue) != 0 || len(s.byKey) != 0 {
		t.Errorf("%d still waiting after the fold", len(s.queue))
	}
}

// TestLull: quiet before any work, not quiet once stirred (a lull of an hour cannot end during
// the test), and quiet again once the stirring stops for the lull's length.
func TestLull(t *testing.T) {
	long := NewLull(time.Hour)
	if !closed(long.Quiet()) {
		t.Fatal("a lull never stirred is not quiet")
	}
	long.Stir()
	if closed(long.Quiet()) {
		t.Fatal("quiet right after a stir")
	}

	short := NewLull(time.Millisecond)
	for range 3 {
		short.Stir()
		select {
		case <-short.Quiet():
		case <-time.After(10 * time.Second):
			t.Fatal("still not quiet 10 s after the last stir")
		}
	}
}

// TestLullHeld: a held lull is not quiet however old its last stir, and becomes quiet once the
// hold is released and the lull's length has passed.
func TestLullHeld(t *testing.T) {
	l := NewLull(time.Millisecond)
	l.Hold()
	l.mu.Lock()
	l.last = time.Now().Add(-time.Hour)
	l.mu.Unlock()
	l.check() // what its timer does; it may have run already
	if closed(l.Quiet()) {
		t.Fatal("quiet while held")
	}
	l.Release()
	select {
	case <-l.Quiet():
	case <-time.After(10 * time.Second):
		t.Fatal("still not quiet 10 s after the release")
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
