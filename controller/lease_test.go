package controller_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/portico-lb/portico/controller"
)

// TestUnprovenLeaseSendsNothing: the lease fence of a replica whose last renewal is older than
// the renew deadline (a replica paused past its lease) does not hold, and then nothing is sent:
// a Service status write comes back to its reconciler's queue with the Service unchanged, and a
// create (an event's) is refused. Once renewals go on again the same write lands. Without
// leader election there is no fence, and writes go through.
func TestUnprovenLeaseSendsNothing(t *testing.T) {
	ns := namespace(t, nil)
	svc := createService(t, ns, "fenced")
	opts := ctrl.Options{LeaderElection: true, LeaderElectionID: "fence-test", LeaderElectionNamespace: ns, RenewDeadline: ptr.To(time.Second)}
	fence, err := controller.FenceLeaderElection(cp.Config, &opts, "")
	if err != nil {
		t.Fatal(err)
	}
	lock := opts.LeaderElectionResourceLockInterface
	ctx := context.Background()
	var lockMu sync.Mutex
	created := false
	renew := func() error {
		lockMu.Lock()
		defer lockMu.Unlock()
		now := metav1.Now()
		ler := resourcelock.LeaderElectionRecord{HolderIdentity: lock.Identity(), LeaseDurationSeconds: 2, AcquireTime: now, RenewTime: now, LeaderTransitions: 3}
		if !created {
			created = true
			return lock.Create(ctx, ler)
		}
		return lock.Update(ctx, ler)
	}
	if fence.Held() {
		t.Fatal("the fence holds before any renewal")
	}
	if err := renew(); err != nil {
		t.Fatal(err)
	}
	// The renewal is a second old at most by the time this is read, unless the machine stalls.
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return !fence.Held(), nil
	}); err != nil {
		t.Fatal("the fence still holds long after the last renewal")
	}

	c := controller.Fenced(cp.Client, fence)
	w := controller.NewStatusWriter(c)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = w.Start(wctx) }()
	queue := make(chan event.GenericEvent, 1)
	cond := metav1.Condition{Type: "portico.dev/FenceTest", Status: metav1.ConditionTrue, Reason: "Written", Message: "test"}
	w.SetCondition(svc, cond, queue)
	select {
	case <-queue:
	case <-time.After(30 * time.Second):
		t.Fatal("a write refused by the fence was never retried")
	}
	var got corev1.Service
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(svc), &got); err != nil {
		t.Fatal(err)
	}
	if meta.FindStatusCondition(got.Status.Conditions, cond.Type) != nil || got.ResourceVersion != svc.ResourceVersion {
		t.Fatalf("a status write was sent while the lease was unproven: %+v", got.Status)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fenced"}}
	if err := c.Create(ctx, cm); err == nil || apierrors.IsAlreadyExists(err) {
		t.Fatalf("a create was not refused while the lease was unproven: %v", err)
	}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused create reached the apiserver: %v", err)
	}
	// Both refusals are counted (portico_lease_writes_refused_total), and the leader changes
	// the lock wrote are known (portico_leader_transitions).
	if n := fence.Refused(); n < 2 {
		t.Fatalf("%d refused writes counted, want at least 2 (the status write and the create)", n)
	}
	if n := fence.Transitions(); n != 3 {
		t.Fatalf("leader transitions %d, want the 3 the lock wrote", n)
	}

	// Renewing again, as a leader does every retry period, lets the write through.
	renewed := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			if err := renew(); err != nil {
				renewed <- err
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return fence.Held(), nil
	}); err != nil {
		t.Fatal("renewals resumed, yet the fence does not hold")
	}
	w.SetCondition(svc, cond, queue)
	waitService(t, ns, "fenced", "the write let through once renewals resumed", func(s *corev1.Service) bool {
		return meta.FindStatusCondition(s.Status.Conditions, cond.Type) != nil
	})
	select {
	case err := <-renewed:
		t.Fatal(err)
	default:
	}
	if controller.Fenced(cp.Client, nil) != cp.Client {
		t.Fatal("without leader election the client is fenced")
	}
}

// TestFencedWriteAbandonedPastTheProof: a write that passed the fence's check but must wait on
// this side (here at the client's rate limiter, shut) is abandoned when the proof runs out, not
// sent once its turn comes, when another replica may lead.
func TestFencedWriteAbandonedPastTheProof(t *testing.T) {
	ns := namespace(t, nil)
	svc := createService(t, ns, "throttled")
	opts := ctrl.Options{LeaderElection: true, LeaderElectionID: "fence-throttled", LeaderElectionNamespace: ns, RenewDeadline: ptr.To(2 * time.Second)}
	fence, err := controller.FenceLeaderElection(cp.Config, &opts, "")
	if err != nil {
		t.Fatal(err)
	}
	limiter := &shutLimiter{}
	cfg := rest.CopyConfig(cp.Config)
	cfg.RateLimiter = limiter
	slow, err := client.New(cfg, client.Options{Scheme: cp.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	var cur corev1.Service
	if err := slow.Get(context.Background(), client.ObjectKeyFromObject(svc), &cur); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: "portico.dev/FenceTest", Status: metav1.ConditionTrue, Reason: "Late", Message: "test"})
	limiter.shut.Store(true)
	lock := opts.LeaderElectionResourceLockInterface
	now := metav1.Now()
	if err := lock.Create(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: lock.Identity(), LeaseDurationSeconds: 3, AcquireTime: now, RenewTime: now}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- controller.Fenced(slow, fence).Status().Update(context.Background(), &cur) }()
	select {
	case err := <-done:
		if err == nil || strings.Contains(err.Error(), "cannot prove") {
			t.Fatalf("want the write abandoned at the limiter once the proof ran out, got %v", err)
		}
		t.Logf("abandoned: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the throttled write is still waiting for its turn, long past the lease proof")
	}
	var got corev1.Service
	if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(svc), &got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != svc.ResourceVersion {
		t.Fatalf("the Service was written: %+v", got.Status)
	}
}

// shutLimiter is a client rate limiter that lets every request through until shut, and then
// none: they wait until their context ends.
type shutLimiter struct{ shut atomic.Bool }

func (l *shutLimiter) Wait(ctx context.Context) error {
	if !l.shut.Load() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}
func (l *shutLimiter) TryAccept() bool { return !l.shut.Load() }
func (l *shutLimiter) Accept()         {}
func (l *shutLimiter) Stop()           {}
func (l *shutLimiter) QPS() float32    { return 0 }

// TestLeaderTransitionsOnlyOnceRead: a replica exports portico_leader_transitions only once it
// has read or written the leader Lease. A replica just started knows no count yet; a 0 in its
// place would read as the count falling to 0 and rising back to the Lease's, which
// PorticoLeaderChangingOften (the largest minus the smallest in an hour) takes for as many
// leader changes: every restart of a replica would fire it once the Lease has seen four.
func TestLeaderTransitionsOnlyOnceRead(t *testing.T) {
	ns := namespace(t, nil)
	opts := ctrl.Options{LeaderElection: true, LeaderElectionID: "transitions-test", LeaderElectionNamespace: ns}
	fence, err := controller.FenceLeaderElection(cp.Config, &opts, "")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := controller.RegisterLeaseMetrics(reg, fence); err != nil {
		t.Fatal(err)
	}
	if v, found := sample(t, reg, "portico_leader_transitions", nil); found {
		t.Fatalf("portico_leader_transitions is %v before the Lease was read", v)
	}
	// Another replica's Lease, with its history; this replica reads it as a follower does.
	now := metav1.Now()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "transitions-test"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("another"), LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime: &metav1.MicroTime{Time: now.Time}, RenewTime: &metav1.MicroTime{Time: now.Time}, LeaseTransitions: ptr.To[int32](7)}}
	if err := cp.Client.Create(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	if _, _, err := opts.LeaderElectionResourceLockInterface.Get(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v, found := sample(t, reg, "portico_leader_transitions", nil); !found || v != 7 {
		t.Fatalf("portico_leader_transitions after the Lease was read: %v (exported: %v), want 7", v, found)
	}
}
