package rules

import (
	"maps"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestLiveSpeakers(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	lease := func(name, holder string, renewed time.Duration, seconds int32) coordinationv1.Lease {
		l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To(seconds), RenewTime: &metav1.MicroTime{Time: t0.Add(renewed)}}}
		if holder != "" {
			l.Spec.HolderIdentity = ptr.To(holder)
		}
		return l
	}
	leases := []coordinationv1.Lease{
		lease("speaker-node-a", "node-a", -2*time.Second, 15),  // fresh until t0+13s
		lease("speaker-node-b", "node-b", -20*time.Second, 15), // ran out at t0-5s (frozen, killed, cut off)
		lease("speaker-node-c", "node-c", -10*time.Second, 15), // fresh until t0+5s: the next to run out
		lease("speaker-node-d", "node-x", 0, 15),               // held by another name: not node-d's
		lease("portico-controller.portico.dev", "node-e", 0, 15),
	}
	live, next, leased := LiveSpeakers(leases, t0)
	if want := []string{"node-a", "node-c"}; !slices.Equal(slices.Sorted(maps.Keys(live)), want) || !leased {
		t.Errorf("live %v, leased %v; want %v, true", live, leased, want)
	}
	if want := t0.Add(5 * time.Second); !next.Equal(want) {
		t.Errorf("next change at %v, want %v", next, want)
	}
	if live, _, _ := LiveSpeakers(leases, t0.Add(5*time.Second)); len(live) != 1 || !live["node-a"] {
		t.Errorf("at t0+5s: live %v, want node-a alone", live)
	}
	if live, next, leased := LiveSpeakers(leases[4:], t0); len(live) != 0 || !next.IsZero() || leased {
		t.Errorf("no speaker Lease: live %v, next %v, leased %v; want none, zero, false", live, next, leased)
	}
	if last := LastRenewed(leases); !last.Equal(t0.Add(-2 * time.Second)) {
		t.Errorf("last renewed %v, want %v (node-a's; node-d's Lease is not its speaker's)", last, t0.Add(-2*time.Second))
	}
	if last := LastRenewed(leases[4:]); !last.IsZero() {
		t.Errorf("no speaker Lease: last renewed %v, want zero", last)
	}
}
