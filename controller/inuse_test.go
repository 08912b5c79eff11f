package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
)

const foreignMAC = "52:54:00:00:00:99"

// foreignAnswers sets what a speaker's probes heard from hosts other than itself, as a Ready
// speaker reports its latest round.
func foreignAnswers(t *testing.T, s *porticov1.Speaker, answers ...porticov1.ForeignAnswer) {
	t.Helper()
	foreignAnswersAt(t, s, true, time.Now(), answers...)
}

// foreignAnswersAt is foreignAnswers from a speaker that is Ready or not, whose latest round
// ended at probed.
func foreignAnswersAt(t *testing.T, s *porticov1.Speaker, ready bool, probed time.Time, answers ...porticov1.ForeignAnswer) {
	t.Helper()
	for i := range answers {
		answers[i].Since = metav1.NewTime(probed.Truncate(time.Second))
		answers[i].Interface = "eth0"
	}
	status := metav1.ConditionTrue
	if !ready {
		status = metav1.ConditionFalse
	}
	at := metav1.NewTime(probed.Truncate(time.Second))
	setSpeakerStatus(t, s, func(st *porticov1.SpeakerStatus) {
		st.ForeignAnswers, st.ProbedAt = answers, &at
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: porticov1.ConditionReady, Status: status, Reason: "Running", Message: "test"})
	})
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

// TestProxyAnswerer: one MAC answering the probes of more than 3 of a pool's addresses (a
// router with proxy ARP) is listed once in the pool's status.proxyAnswerers, with the
// ProxyAnswerer reason and one Warning event, and holds nothing back: the Services get the
// pool's first addresses. A host answering for one address still holds it back.
func TestProxyAnswerer(t *testing.T) {
	startManager(t)
	createPool(t, "proxied", addresses("198.51.100.140-198.51.100.155"))
	ns := namespace(t, nil)
	const router, host = "52:54:00:00:00:01", "52:54:00:00:00:02"
	a := speakerWith(t, "proxied-a", "02:00:00:00:0d:01")
	b := speakerWith(t, "proxied-b", "02:00:00:00:0e:01")
	// The count is the pool's, over every speaker: 2 + 2 addresses heard by two nodes.
	foreignAnswers(t, a, porticov1.ForeignAnswer{IP: "198.51.100.140", MAC: router}, porticov1.ForeignAnswer{IP: "198.51.100.142", MAC: router})
	foreignAnswers(t, b, porticov1.ForeignAnswer{IP: "198.51.100.141", MAC: router}, porticov1.ForeignAnswer{IP: "198.51.100.143", MAC: router},
		porticov1.ForeignAnswer{IP: "198.51.100.144", MAC: host})
	p := waitPool(t, "proxied", "the router a proxy answerer, the host's address in use", func(p *porticov1.IPAddressPool) bool {
		return len(p.Status.ProxyAnswerers) == 1 && p.Status.ProxyAnswerers[0].MAC == router && p.Status.ProxyAnswerers[0].Addresses == 4 &&
			inUseAddrs(p) == "198.51.100.144@"+host+"/proxied-b"
	})
	if c := meta.FindStatusCondition(p.Status.Conditions, porticov1.ConditionAddressesInUse); c == nil || !strings.Contains(c.Message, router+" (answers for 4)") {
		t.Errorf("AddressesInUse = %+v, want it to name the proxy answerer", c)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return poolEvent(t, "proxied", "Warning", porticov1.ReasonProxyAnswerer, "MAC "+router+" answers for 4"), nil
	}); err != nil {
		t.Error("no Warning ProxyAnswerer event on the pool")
	}
	for i, want := range []string{"198.51.100.140", "198.51.100.141", "198.51.100.142", "198.51.100.143", "198.51.100.145"} {
		name := fmt.Sprintf("svc%d", i)
		createService(t, ns, name)
		waitIPs(t, ns, name, want)
	}

	// The host lets its address go: only the proxy answerer is left, its own reason.
	foreignAnswers(t, b, porticov1.ForeignAnswer{IP: "198.51.100.141", MAC: router}, porticov1.ForeignAnswer{IP: "198.51.100.143", MAC: router})
	waitPool(t, "proxied", "ProxyAnswerer, nothing in use", func(p *porticov1.IPAddressPool) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, porticov1.ConditionAddressesInUse)
		return len(p.Status.InUse) == 0 && c != nil && c.Status == metav1.ConditionFalse && c.Reason == porticov1.ReasonProxyAnswerer
	})
	var evs eventsv1.EventList
	if err := cp.Client.List(context.Background(), &evs); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs.Items {
		if e.Regarding.Name == "proxied" && e.Reason == porticov1.ReasonProxyAnswerer {
			n += int(max(e.DeprecatedCount, 1))
			if e.Series != nil {
				n += int(e.Series.Count) - 1
			}
		}
	}
	if n != 1 {
		t.Errorf("%d ProxyAnswerer events, want 1 (reported once)", n)
	}
}

// TestFindingsExpire: a speaker's answers hold an address back only while its Speaker says
// Ready and its latest probe round is at most 3 minutes old. Not Ready: released at once;
// Ready again: held again; a round that is not followed by another within the bound: released
// when the bound passes, with no further write to wake the controller.
func TestFindingsExpire(t *testing.T) {
	startManager(t)
	createPool(t, "expiring", addresses("198.51.100.136/30"))
	a := speakerWith(t, "expiring-a", "02:00:00:00:0f:01")
	in := porticov1.ForeignAnswer{IP: "198.51.100.136", MAC: foreignMAC}
	held := func(p *porticov1.IPAddressPool) bool {
		return inUseAddrs(p) == "198.51.100.136@"+foreignMAC+"/expiring-a"
	}
	free := func(p *porticov1.IPAddressPool) bool {
		return len(p.Status.InUse) == 0 && len(p.Status.NextAddresses) > 0 && p.Status.NextAddresses[0] == "198.51.100.136"
	}

	foreignAnswers(t, a, in)
	waitPool(t, "expiring", ".136 held back", held)
	foreignAnswersAt(t, a, false, time.Now(), in)
	waitPool(t, "expiring", ".136 released: its speaker is not Ready", free)
	foreignAnswers(t, a, in)
	waitPool(t, "expiring", ".136 held back again", held)
	foreignAnswersAt(t, a, true, time.Now().Add(-4*time.Minute), in)
	waitPool(t, "expiring", ".136 released: the round is older than the bound", free)

	// A round that ages past the bound while nothing is written: the controller looks again.
	foreignAnswersAt(t, a, true, time.Now().Add(-controller.FindingTTL+3*time.Second), in)
	waitPool(t, "expiring", ".136 held back by a round about to expire", held)
	waitPool(t, "expiring", ".136 released once the round is older than the bound, without a write", free)

	// A deleted Speaker's answers go with it.
	foreignAnswers(t, a, in)
	waitPool(t, "expiring", ".136 held back", held)
	if err := cp.Client.Delete(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	waitPool(t, "expiring", ".136 released: its Speaker is gone", free)
}

// TestConflictProbingDisabled: with spec.conflictProbing Disabled no answer holds an address of
// the pool back (the condition says why); switched back on, the answer counts again.
func TestConflictProbingDisabled(t *testing.T) {
	startManager(t)
	pool := createPool(t, "unprobed", addresses("198.51.100.132/30"))
	ns := namespace(t, nil)
	a := speakerWith(t, "unprobed-a", "02:00:00:00:10:01")
	foreignAnswers(t, a, porticov1.ForeignAnswer{IP: "198.51.100.132", MAC: foreignMAC})
	waitPool(t, "unprobed", ".132 held back", func(p *porticov1.IPAddressPool) bool { return len(p.Status.InUse) == 1 })

	setProbing := func(mode porticov1.ConflictProbing) {
		t.Helper()
		if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(pool), pool); err != nil {
			t.Fatal(err)
		}
		pool.Spec.ConflictProbing = mode
		if err := cp.Client.Update(context.Background(), pool); err != nil {
			t.Fatal(err)
		}
	}
	setProbing(porticov1.ConflictProbingDisabled)
	waitPool(t, "unprobed", "nothing in use, ProbingDisabled", func(p *porticov1.IPAddressPool) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, porticov1.ConditionAddressesInUse)
		return len(p.Status.InUse) == 0 && c != nil && c.Reason == porticov1.ReasonProbingDisabled
	})
	createService(t, ns, "first")
	waitIPs(t, ns, "first", "198.51.100.132")

	setProbing(porticov1.ConflictProbingEnabled)
	foreignAnswers(t, a, porticov1.ForeignAnswer{IP: "198.51.100.133", MAC: foreignMAC})
	waitPool(t, "unprobed", ".133 held back", func(p *porticov1.IPAddressPool) bool {
		return inUseAddrs(p) == "198.51.100.133@"+foreignMAC+"/unprobed-a"
	})
	createService(t, ns, "second")
	waitIPs(t, ns, "second", "198.51.100.134")
}
