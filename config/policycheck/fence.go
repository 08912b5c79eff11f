package policycheck

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/controller"
)

const controllerSA = "portico-controller"

// The refusal of portico-controller-leader-only.
const notTheLeader = "does not hold the leader Lease"

// replica is one controller replica of the fence check: its leader elector runs with its pod's
// token, and every write it makes goes through its lease fence.
type replica struct {
	fence   *controller.LeaseFence
	writes  client.Client
	leading chan struct{} // closed once it leads
	pause   context.CancelFunc
}

// startReplica runs pod's leader election with short timings (lease 2 s, renew deadline
// 1.5 s, retry 0.25 s); its writes go through the returned fenced client.
func startReplica(t *testing.T, in Install, cfg *rest.Config, pod string) *replica {
	t.Helper()
	opts := ctrl.Options{LeaderElection: true, LeaderElectionID: leaderLease, LeaderElectionNamespace: in.Namespace,
		LeaseDuration: ptr.To(2 * time.Second), RenewDeadline: ptr.To(1500 * time.Millisecond), RetryPeriod: ptr.To(250 * time.Millisecond)}
	fence, err := controller.FenceLeaderElection(cfg, &opts, pod)
	must(t, err)
	r := &replica{fence: fence, writes: fence.Client(in.clientFor(t, cfg)), leading: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: opts.LeaderElectionResourceLockInterface, LeaseDuration: *opts.LeaseDuration, RenewDeadline: *opts.RenewDeadline,
		RetryPeriod: *opts.RetryPeriod, Name: pod,
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) { close(r.leading) }, OnStoppedLeading: func() {}},
	})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); le.Run(ctx) }()
	r.pause = cancel
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// waitLeading waits until r leads (its fence confirmed by the apiserver, if the policy is there).
func (r *replica) waitLeading(t *testing.T, who string) {
	t.Helper()
	select {
	case <-r.leading:
	case <-time.After(time.Minute):
		t.Fatalf("%s never led", who)
	}
	if !r.fence.Held() {
		t.Fatalf("%s leads, but its fence does not hold", who)
	}
}

// LeaderFenceHoldsWhenTheMachineStops: replica A (a pod's token) leads and writes; then its
// whole machine stops, its clock with it (the fence's clock frozen, its elector stopped). B
// takes the lease and writes at once. A resumes: its own fence still holds, by its frozen clock,
// and it sends its writes, a Service's status and an event: the apiserver refuses each, since A
// no longer holds the Lease, and B's write stays. Without the policy A's writes land.
func LeaderFenceHoldsWhenTheMachineStops(t *testing.T, in Install) {
	ctx := context.Background()
	const node, podA, podB = "fence-node", "portico-controller-fence-a", "portico-controller-fence-b"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fence-"}}
	must(t, in.Client.Create(ctx, ns))
	t.Cleanup(func() { _ = in.Client.Delete(context.Background(), ns) })
	// A ClusterIP Service: a controller of another test running on the same apiserver leaves it
	// alone, and its status takes conditions as a LoadBalancer's does.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns.Name}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Port: 80}}}}
	must(t, in.Client.Create(ctx, svc))
	t.Cleanup(func() { _ = in.Client.Delete(context.Background(), svc) })
	cfgA, cfgB := in.PodConfig(t, controllerSA, podA, node), in.PodConfig(t, controllerSA, podB, node)
	t.Cleanup(func() { // the next election starts from no leader
		_ = in.Client.Delete(context.Background(), heldLease(in.Namespace, leaderLease, ""))
	})

	a := startReplica(t, in, cfgA, podA)
	a.waitLeading(t, podA)
	wantAllowed(t, podA+" writing while it leads", setCondition(ctx, a.writes, svc, "A"))

	// A's machine stops: its clock stands still and its elector no longer runs.
	a.fence.SetClock(clocktesting.NewFakePassiveClock(time.Now()))
	a.pause()
	if !a.fence.Held() {
		t.Fatal("A's fence does not hold on its frozen clock right after a renewal")
	}

	b := startReplica(t, in, cfgB, podB)
	b.waitLeading(t, podB)
	// The new leader's first write, right after it took the lease.
	wantAllowed(t, podB+" writing as soon as it leads", setCondition(ctx, b.writes, svc, "B"))

	// A resumes, leading in its own eyes.
	if !a.fence.Held() {
		t.Fatal("A's fence no longer holds: the frozen clock moved")
	}
	wantRefused(t, podA+"'s late status write", setCondition(ctx, a.writes, svc, "A-late"), notTheLeader)
	wantRefused(t, podA+"'s late event", a.writes.Create(ctx, event(svc, "A-late")), notTheLeader)

	var got corev1.Service
	must(t, in.Client.Get(ctx, client.ObjectKeyFromObject(svc), &got))
	if c := meta.FindStatusCondition(got.Status.Conditions, fenceCondition); c == nil || c.Reason != "B" {
		t.Errorf("the Service's status after A's late write: %+v, want B's", c)
	}
	var events eventsv1.EventList
	must(t, in.Client.List(ctx, &events, client.InNamespace(ns.Name)))
	for _, e := range events.Items {
		if e.Reason == "A-late" {
			t.Errorf("A's late event landed: %s", e.Name)
		}
	}
}

// fenceCondition is the condition the fence check's replicas write, its reason naming the writer.
const fenceCondition = "portico.dev/FenceCheck"

// setCondition writes the fence condition with reason into svc's stored status, as the
// controller's status writer does (an update of the status it read).
func setCondition(ctx context.Context, c client.Client, svc *corev1.Service, reason string) error {
	var cur corev1.Service
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &cur); err != nil {
		return err
	}
	meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: fenceCondition, Status: metav1.ConditionTrue, Reason: reason, Message: "written by " + reason})
	return c.Status().Update(ctx, &cur)
}

// event is an event on svc, as the controller sends them (events.k8s.io).
func event(svc *corev1.Service, reason string) *eventsv1.Event {
	now := metav1.NewMicroTime(time.Now())
	return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "fence-", Namespace: svc.Namespace}, EventTime: now,
		Regarding: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID},
		Reason:    reason, Action: "Check", Type: corev1.EventTypeNormal, Note: "fence check",
		ReportingController: "portico.dev/controller", ReportingInstance: "fence-check"}
}

// FenceWaitsForTheAPIServer: a renewal that starts a tenure raises the fence only once the
// apiserver admits the replica's writes. Here it never does: the replica's identity names
// another pod than its token's, so the policy refuses its probe, and its fence stays down
// although its Lease write succeeded.
func FenceWaitsForTheAPIServer(t *testing.T, in Install) {
	ctx := context.Background()
	cfg := in.PodConfig(t, controllerSA, "portico-controller-fence-c", "fence-node")
	opts := ctrl.Options{LeaderElection: true, LeaderElectionID: leaderLease, LeaderElectionNamespace: in.Namespace,
		RenewDeadline: ptr.To(time.Second)}
	fence, err := controller.FenceLeaderElection(cfg, &opts, "portico-controller-elsewhere")
	must(t, err)
	if err := in.Client.Delete(ctx, heldLease(in.Namespace, leaderLease, "")); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Client.Delete(context.Background(), heldLease(in.Namespace, leaderLease, "")) })
	lock := opts.LeaderElectionResourceLockInterface
	now := metav1.Now()
	must(t, lock.Create(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: lock.Identity(), LeaseDurationSeconds: 2,
		AcquireTime: now, RenewTime: now}))
	if fence.Held() {
		t.Error("the fence holds although the apiserver refuses the replica's writes")
	}
}
