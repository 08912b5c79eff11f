package e2e

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// TestSpeakerEventsTrail: a speaker that finds 1000 Services to advertise at once (they have
// their addresses before it starts) writes the Speaker status that lists them all before its
// first Announced event reaches the apiserver, and then tells every Service once: 1000
// Announced events, none lost, none dropped, none left waiting. The speaker is the real
// speaker code in this process with its network side recorded (the simulation's).
func TestSpeakerEventsTrail(t *testing.T) {
	const n = 1000
	cp := startControlPlane(t)
	create(t, cp, "default", n, floorWrite(cp))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := kubernetes.NewForConfigOrDie(cp.Config).CoreV1().Events("default").Watch(ctx, metav1.ListOptions{FieldSelector: "reason=Announced"})
	must(t, err)
	defer w.Stop()

	sim := startSimulation(t, cp, 1, true, eventsSimPort)
	select {
	case <-w.ResultChan():
	case <-time.After(2 * time.Minute):
		t.Fatal("no Announced event within 2 minutes")
	}
	// Read after the first event was seen, so it shows every status write that came before it.
	var sp porticov1.Speaker
	must(t, cp.Client.Get(ctx, client.ObjectKey{Name: sim.nodes[0]}, &sp))
	if got := len(sp.Status.Announcements); got != n {
		t.Errorf("the first Announced event came when the Speaker status listed %d addresses, want all %d first", got, n)
	}

	told := map[string]int{}
	waitFor(t, "an Announced event for every Service", 2*time.Minute, atMostEvery(200*time.Millisecond, func() bool {
		var evs corev1.EventList
		must(t, cp.Client.List(ctx, &evs, client.InNamespace("default"), client.MatchingFields{"reason": "Announced"}))
		told = map[string]int{}
		for _, ev := range evs.Items {
			told[ev.InvolvedObject.Name]++
		}
		return len(told) >= n
	}))
	for name, times := range told {
		if times != 1 {
			t.Errorf("%s told %d times, want once", name, times)
		}
	}
	sim.each(t, "portico_events_dropped_total", func(m *dto.Metric) {
		if v := m.GetCounter().GetValue(); v != 0 {
			t.Errorf("%v events dropped", v)
		}
	})
	sim.each(t, "portico_events_pending", func(m *dto.Metric) {
		if v := m.GetGauge().GetValue(); v != 0 {
			t.Errorf("%v events still waiting", v)
		}
	})
}
