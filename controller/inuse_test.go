package controller_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

const foreignMAC = "52:54:00:00:00:99"

// foreignAnswers sets what a speaker's probes heard from hosts other than itself.
func foreignAnswers(t *testing.T, s *porticov1.Speaker, answers ...porticov1.ForeignAnswer) {
	t.Helper()
	for i := range answers {
		answers[i].Since = metav1.NewTime(time.Now().Truncate(time.Second))
		answers[i].Interface = "eth0"
	}
	setSpeakerStatus(t, s, func(st *porticov1.SpeakerStatus) { st.ForeignAnswers = answers })
}

func inUseAddrs(p *porticov1.IPAddressPool) string {
	var s []string
	for _, u := range p.Status.InUse {
		s = append(s, u.Address+"@"+u.MAC+"/"+u.SeenBy)
	}
	return strings.Join(s, ",")
}

func poolEvent(t *testing.T, pool, typ, reason, note string) bool {
	t.Helper()
	var evs eventsv1.EventList
	if err := cp.Client.List(context.Background(), &evs); err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool {
		return e.Regarding.Kind == "IPAddressPool" && e.Regarding.Name == pool && e.Type == typ && e.Reason == reason && strings.Contains(e.Note, note)
	})
}

// TestAddressesInUse: a foreign host answering a speaker's probe for a pool's next address
// is listed in the pool's status (the answer of a MAC some speaker answers with is not), with
// the AddressesInUse condition, a Warning event and the metric; the next Services skip it; a
// Service that already holds an address reported in use keeps it; and once the speaker's
// latest round no longer hears the host, the address goes to the Service that waited.
func TestAddressesInUse(t *testing.T) {
	reg := startManager(t)
	createPool(t, "inuse", addresses("198.51.100.120-198.51.100.123"))
	ns := namespace(t, nil)
	waitPool(t, "inuse", "next addresses .120-.123", func(p *porticov1.IPAddressPool) bool {
		return strings.Join(p.Status.NextAddresses, ",") == "198.51.100.120,198.51.100.121,198.51.100.122,198.51.100.123"
	})

	a := speakerWith(t, "inuse-a", "02:00:00:00:0a:01")
	b := speakerWith(t, "inuse-b", "02:00:00:00:0b:01")
	foreignAnswers(t, a, porticov1.ForeignAnswer{IP: "198.51.100.120", MAC: foreignMAC},
		porticov1.ForeignAnswer{IP: "198.51.100.122", MAC: "02:00:00:00:0b:01"}) // b's MAC: a speaker, not a foreign host
	p := waitPool(t, "inuse", "198.51.100.120 in use", func(p *porticov1.IPAddressPool) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, porticov1.ConditionAddressesInUse)
		return inUseAddrs(p) == "198.51.100.120@"+foreignMAC+"/inuse-a" && c != nil && c.Status == metav1.ConditionTrue &&
			strings.Join(p.Status.NextAddresses, ",") == "198.51.100.121,198.51.100.122,198.51.100.123"
	})
	if c := meta.FindStatusCondition(p.Status.Conditions, porticov1.ConditionAddressesInUse); c.Reason != porticov1.ReasonAddressInUse || !strings.Contains(c.Message, "198.51.100.120 ("+foreignMAC+")") {
		t.Errorf("AddressesInUse = %+v", c)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return poolEvent(t, "inuse", "Warning", porticov1.ReasonAddressInUse, "198.51.100.120 is in use by a foreign host (MAC "+foreignMAC), nil
	}); err != nil {
		t.Error("no Warning AddressInUse event on the pool")
	}
	if v, _ := sample(t, reg, "portico_pool_addresses_foreign", map[string]string{"pool": "inuse"}); v != 1 {
		t.Errorf("portico_pool_addresses_foreign = %v, want 1", v)
	}

	createService(t, ns, "first")
	waitIPs(t, ns, "first", "198.51.100.121")

	// Found in use once held: reported, never taken away.
	foreignAnswers(t, b, porticov1.ForeignAnswer{IP: "198.51.100.121", MAC: foreignMAC})
	waitPool(t, "inuse", ".120 and .121 in use", func(p *porticov1.IPAddressPool) bool {
		return inUseAddrs(p) == "198.51.100.120@"+foreignMAC+"/inuse-a,198.51.100.121@"+foreignMAC+"/inuse-b"
	})
	createService(t, ns, "second")
	createService(t, ns, "third")
	waitIPs(t, ns, "second", "198.51.100.122")
	waitIPs(t, ns, "third", "198.51.100.123")
	createService(t, ns, "fourth")
	if c := waitReason(t, ns, "fourth", porticov1.ReasonPoolExhausted); !strings.Contains(c.Message, "in use by foreign hosts") {
		t.Errorf("fourth waits with %q, want it to name the addresses in use", c.Message)
	}
	waitIPs(t, ns, "first", "198.51.100.121")

	// The next rounds hear nobody: .120 is free again and goes to the Service that waited.
	foreignAnswers(t, a)
	foreignAnswers(t, b)
	waitIPs(t, ns, "fourth", "198.51.100.120")
	waitPool(t, "inuse", "nothing in use", func(p *porticov1.IPAddressPool) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, porticov1.ConditionAddressesInUse)
		return len(p.Status.InUse) == 0 && c != nil && c.Status == metav1.ConditionFalse
	})
	waitIPs(t, ns, "first", "198.51.100.121")
}

// TestAddressesInUseKnownAtStart: a new leader learns what foreign hosts answer for while it
// rebuilds, before it allocates anything, not from the pool reconciler that may run after the
// first Service's: the pool's first address, in use, is never handed out in between.
func TestAddressesInUseKnownAtStart(t *testing.T) {
	ctx := context.Background()
	pool := &porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "inuse-start"}, Spec: addresses("198.51.100.124-198.51.100.127")}
	if err := cp.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(ctx, pool) })
	a := speakerWith(t, "inuse-start-a", "02:00:00:00:0c:01")
	foreignAnswers(t, a, porticov1.ForeignAnswer{IP: "198.51.100.124", MAC: foreignMAC})
	ns := namespace(t, nil)
	createService(t, ns, "early")
	startManager(t)
	waitIPs(t, ns, "early", "198.51.100.125")
}
