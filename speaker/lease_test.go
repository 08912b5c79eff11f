package speaker

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	testclock "k8s.io/utils/clock/testing"

	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/kubeapi"
)

// TestIdleLeaseWrites: over ten virtual minutes an idle speaker with the default renewal
// writes its Lease at most once a minute (issue 47: at 5,000 nodes, 5 s renewals were 1,000
// writes a second), counted by a watch on a real apiserver; and at every virtual second the
// Lease the apiserver holds counts the speaker live by the controller's rule
// (rules.LiveSpeakers), so the renewals never leave a gap in which it would be counted out.
func TestIdleLeaseWrites(t *testing.T) {
	const minutes = 10
	cp := controlplane.StartFor(t, controlplane.Options{})
	cl, err := kubeapi.New(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := rules.SpeakerLeaseName("node-a")
	w, err := cs.CoordinationV1().Leases("default").Watch(ctx,
		metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", key).String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	clk := testclock.NewFakeClock(time.Now())
	r := newLeaseRenewer(Options{Client: cl, Node: "node-a", LeaseNamespace: "default", LeaseRenew: DefaultLeaseRenew,
		Log: logr.Discard()}, clk)
	go r.run(ctx)
	var start time.Time
	renewed := func(n int64) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return r.tried.Load() >= n, nil
		}); err != nil {
			t.Fatalf("%s after the first renewal the renewer tried %d renewals, want %d", clk.Since(start), r.tried.Load(), n)
		}
	}
	renewed(1)
	start = clk.Now()
	for range minutes * 60 {
		clk.Step(time.Second)
		renewed(1 + int64(clk.Now().Sub(start)/r.every))
		var l coordinationv1.Lease
		if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: key}, &l); err != nil {
			t.Fatal(err)
		}
		if live, _, _ := rules.LiveSpeakers([]coordinationv1.Lease{l}, clk.Now()); !live["node-a"] {
			t.Fatalf("%s after the first renewal the Lease (renewed %s, %ds) counts node-a out",
				clk.Now().Sub(start), l.Spec.RenewTime.Sub(start), *l.Spec.LeaseDurationSeconds)
		}
	}

	writes := countWrites(t, w, r.tried.Load())
	if writes > 1+minutes {
		t.Errorf("idle for %d virtual minutes, the speaker wrote its Lease %d times (the create and %.1f a minute); want at most one a minute",
			minutes, writes, float64(writes-1)/minutes)
	}
}

// countWrites counts the Lease's writes the watch reports until it has seen want of them, or
// nothing more comes for 5 s.
func countWrites(t *testing.T, w watch.Interface, want int64) int64 {
	t.Helper()
	var n int64
	for n < want {
		select {
		case ev := <-w.ResultChan():
			switch ev.Type {
			case watch.Added, watch.Modified:
				n++
			case watch.Error:
				t.Fatalf("the Lease's watch failed: %v", ev.Object)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the watch reported %d writes of the Lease, the renewer tried %d", n, want)
		}
	}
	return n
}
