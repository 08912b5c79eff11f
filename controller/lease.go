package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/leaderelection"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/portico-lb/portico/controller/decide"
)

// LeaseFence tells whether this replica can prove it still holds the leader lease: its last
// renewal that succeeded was sent less than the renew deadline ago, by its own monotonic
// clock. A follower takes the lease only once it has seen no renewal for the lease duration,
// counted from when it saw the last one, which landed after it was sent; so while Held is
// true no other replica leads, with lease duration − renew deadline to spare for the clocks'
// rates and a request's time on the wire. A replica paused past its lease (a GC stall,
// SIGSTOP) wakes up leading in its own eyes until its elector notices; Held is false from the
// first instant, and every write the controller sends is refused until a renewal succeeds
// again (fencedClient).
//
// When the whole machine stops (a VM paused or suspended) the monotonic clock stops with it,
// and the proof still holds when it resumes. The apiserver then refuses the writes instead:
// the admission policy portico-controller-leader-only (config/rbac/controller_policy.yaml)
// admits the controller's status writes and events only from the pod the Lease names as
// holder, which is why the holder identity starts with the pod's name (FenceLeaderElection).
// At the start of a tenure the apiserver's copy of the Lease (the policy's param, from a
// watch) may still name the previous holder for a moment, so the first renewal of a tenure
// counts only once the apiserver admits a dry-run write of ours (confirmTenure): from then
// on the new leader's writes are admitted, and the old leader's refused.
//
// A nil fence (no leader election: one replica) always holds.
type LeaseFence struct {
	renewDeadline time.Duration

	mu        sync.Mutex
	clock     clock.PassiveClock
	renewed   time.Time // when the last renewal that succeeded was sent (with its monotonic reading)
	confirmed tenure    // the tenure the apiserver was seen to admit our writes in

	refused     atomic.Uint64 // writes not sent because the proof had run out
	transitions atomic.Int64  // the Lease's leaseTransitions as last read or written; -1 before
}

// tenure is one leadership of this replica: the Lease's acquire time and transition count,
// which a renewal keeps and an acquisition changes.
type tenure struct {
	acquired    time.Time
	transitions int
}

// tenureOf reads the record's tenure; the acquire time to the microsecond, as the Lease
// stores it.
func tenureOf(ler resourcelock.LeaderElectionRecord) tenure {
	return tenure{acquired: ler.AcquireTime.Truncate(time.Microsecond), transitions: ler.LeaderTransitions}
}

// Held reports whether the last renewal was sent less than the renew deadline ago.
func (f *LeaseFence) Held() bool {
	if f == nil {
		return true
	}
	return f.remaining() > 0
}

// SetClock makes the fence read c instead of the system's clock. Tests freeze it to play a
// machine that was paused: when it resumes, its clock has not moved since.
func (f *LeaseFence) SetClock(c clock.PassiveClock) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clock = c
}

func (f *LeaseFence) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clock.Now()
}

// remaining is how long the proof still runs by the fence's clock: the renew deadline after
// the last renewal was sent (nothing before the first).
func (f *LeaseFence) remaining() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.renewed.IsZero() {
		return 0
	}
	return f.renewed.Add(f.renewDeadline).Sub(f.clock.Now())
}

// send runs one write with ctx ending when the proof runs out: a write that waits past it on
// this side (the client's rate limiter, a connection) is abandoned, not sent late. It fails at
// once while the fence does not hold.
func (f *LeaseFence) send(ctx context.Context, write func(context.Context) error) error {
	left := f.remaining()
	if left <= 0 {
		f.refused.Add(1)
		return errLeaseUnproven
	}
	ctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	return write(ctx)
}

// NewLeaseFence is a fence that holds for renewDeadline after each renewal (Renewed), by c:
// FenceLeaderElection's, or a simulated elector's (controller/sim).
func NewLeaseFence(renewDeadline time.Duration, c clock.PassiveClock) *LeaseFence {
	f := &LeaseFence{renewDeadline: renewDeadline, clock: c}
	f.transitions.Store(-1)
	return f
}

// Renewed records a renewal that succeeded (and whose tenure the apiserver admits), sent at
// sent.
func (f *LeaseFence) Renewed(sent time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sent.After(f.renewed) {
		f.renewed = sent
	}
}

func (f *LeaseFence) isConfirmed(t tenure) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.confirmed.transitions == t.transitions && f.confirmed.acquired.Equal(t.acquired) && !t.acquired.IsZero()
}

func (f *LeaseFence) confirm(t tenure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.confirmed = t
}

// defaultRenewDeadline is controller-runtime's, for options that leave it unset.
const defaultRenewDeadline = 10 * time.Second

// FenceLeaderElection builds the lock controller-runtime would build for opts (a Lease named
// LeaderElectionID) and sets it as opts' lock, wrapped so that each renewal it makes is timed
// by the returned fence. The replica's identity, the Lease's holder, is pod_<uuid> when pod
// (the replica's pod name) is set, so that the apiserver can match the holder to the pod a
// request's token names; controller-runtime's host_<uuid> otherwise (in a pod the host name is
// the pod's name too, unless the pod sets another). Without leader election it returns nil:
// one replica, always held.
func FenceLeaderElection(cfg *rest.Config, opts *ctrl.Options, pod string) (*LeaseFence, error) {
	if !opts.LeaderElection {
		return nil, nil
	}
	renewDeadline := defaultRenewDeadline
	if opts.RenewDeadline != nil {
		renewDeadline = *opts.RenewDeadline
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	events := newLeaseEvents(cs)
	lock, err := leaderelection.NewResourceLock(rest.CopyConfig(cfg), events, leaderelection.Options{
		LeaderElection:             true,
		LeaderElectionResourceLock: opts.LeaderElectionResourceLock,
		LeaderElectionNamespace:    opts.LeaderElectionNamespace,
		LeaderElectionID:           opts.LeaderElectionID,
		RenewDeadline:              renewDeadline,
		LeaderLabels:               opts.LeaderElectionLabels,
	})
	if err != nil {
		return nil, err
	}
	lease, ok := lock.(*resourcelock.LeaseLock)
	if !ok {
		return nil, fmt.Errorf("the lease fence needs a Lease lock, not %T", lock)
	}
	if pod != "" {
		lease.LockConfig.Identity = pod + "_" + string(uuid.NewUUID())
		lease.LockConfig.EventRecorder = events.GetEventRecorderFor(lease.LockConfig.Identity)
	}
	f := NewLeaseFence(renewDeadline, clock.RealClock{})
	probe := func(ctx context.Context) error {
		_, err := cs.CoreV1().Events(lease.LeaseMeta.Namespace).Create(ctx, leaderProbe(lease.LeaseMeta), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	opts.LeaderElectionResourceLockInterface = fencedLock{Interface: lock, fence: f, probe: probe}
	return f, nil
}

// leaderProbe is the event a new leader sends as a dry run (never stored) to learn whether the
// apiserver admits its writes yet (portico-controller-leader-only judges events too).
func leaderProbe(lease metav1.ObjectMeta) *corev1.Event {
	return &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "portico-leader-probe-", Namespace: lease.Namespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: lease.Namespace, Name: lease.Name},
		Reason:         "LeaderProbe", Message: "a dry run, never stored: does the apiserver admit the new leader's writes yet?",
		Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "portico-controller"}}
}

// fencedLock times the renewals of the lock it wraps: the moment each Create or Update that
// names this replica as holder was sent, once it succeeds (and, for the first of a tenure,
// once the apiserver admits our writes). Releasing the lease (an Update naming nobody) is no
// renewal.
type fencedLock struct {
	resourcelock.Interface
	fence *LeaseFence
	probe func(context.Context) error // a dry-run write that portico-controller-leader-only judges
}

// Get reads the Lease, as every replica does at each retry: the leader changes it counts are
// the ones any replica has seen.
func (l fencedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	ler, raw, err := l.Interface.Get(ctx)
	if err == nil && ler != nil {
		l.fence.transitions.Store(int64(ler.LeaderTransitions))
	}
	return ler, raw, err
}

func (l fencedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := l.fence.now()
	err := l.Interface.Create(ctx, ler)
	l.renewed(ctx, ler, sent, err)
	return err
}

func (l fencedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := l.fence.now()
	err := l.Interface.Update(ctx, ler)
	l.renewed(ctx, ler, sent, err)
	return err
}

func (l fencedLock) renewed(ctx context.Context, ler resourcelock.LeaderElectionRecord, sent time.Time, err error) {
	if err == nil {
		l.fence.transitions.Store(int64(ler.LeaderTransitions))
	}
	if err != nil || ler.HolderIdentity != l.Identity() {
		return
	}
	if t := tenureOf(ler); !l.fence.isConfirmed(t) {
		if err := l.confirmTenure(ctx); err != nil {
			// The renewal stands; the fence stays down, and the next renewal tries again.
			logf.Log.WithName("leader-fence").Info("the apiserver does not admit this leader's writes yet", "error", err.Error())
			return
		}
		l.fence.confirm(t)
	}
	l.fence.Renewed(sent)
}

// confirmTenure sends the probe until the apiserver admits it (the policy's copy of the Lease
// names this replica; at once without the policy), for a renew deadline at most.
func (l fencedLock) confirmTenure(ctx context.Context) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, l.fence.renewDeadline, true, func(ctx context.Context) (bool, error) {
		last = l.probe(ctx)
		return last == nil, nil
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

// leaseEvents gives the lock the recorder controller-runtime would: "became leader" events on
// the Lease, through the core events API.
type leaseEvents struct{ broadcaster record.EventBroadcaster }

func newLeaseEvents(cs kubernetes.Interface) leaseEvents {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	return leaseEvents{broadcaster: b}
}

func (p leaseEvents) GetEventRecorderFor(name string) record.EventRecorder {
	return p.broadcaster.NewRecorder(clientgoscheme.Scheme, corev1.EventSource{Component: name})
}

func (p leaseEvents) GetEventRecorder(string) recorder.EventRecorder { return nil } // the lock uses the one above

// errLeaseUnproven refuses a write of a replica that cannot prove it still holds the lease.
// Nothing was sent: the write did not land.
var errLeaseUnproven = fmt.Errorf("%w: this replica cannot prove it still holds the leader lease (no renewal within the renew deadline)", decide.ErrNotSent)

// fencedClient sends no write while its fence does not hold, and gives up on one still
// waiting to be sent when the fence runs out (LeaseFence.send); reads pass through. Every
// write the controller makes (Service and pool status, BGPPeer and advertisement status,
// events) goes through one.
type fencedClient struct {
	client.Client
	fence *LeaseFence
}

// Client is c with every write fenced; c itself without leader election (a nil fence).
func (f *LeaseFence) Client(c client.Client) client.Client { return fenced(c, f) }

func fenced(c client.Client, f *LeaseFence) client.Client {
	if f == nil {
		return c
	}
	return fencedClient{Client: c, fence: f}
}

func (c fencedClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return c.fence.send(ctx, func(ctx context.Context) error { return c.Client.Create(ctx, obj, opts...) })
}

func (c fencedClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.fence.send(ctx, func(ctx context.Context) error { return c.Client.Update(ctx, obj, opts...) })
}

func (c fencedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.fence.send(ctx, func(ctx context.Context) error { return c.Client.Patch(ctx, obj, patch, opts...) })
}

func (c fencedClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	return c.fence.send(ctx, func(ctx context.Context) error { return c.Client.Apply(ctx, obj, opts...) })
}

func (c fencedClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return c.fence.send(ctx, func(ctx context.Context) error { return c.Client.Delete(ctx, obj, opts...) })
}

func (c fencedClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	return c.fence.send(ctx, func(ctx context.Context) error { return c.Client.DeleteAllOf(ctx, obj, opts...) })
}

func (c fencedClient) Status() client.SubResourceWriter {
	return fencedSubResource{SubResourceWriter: c.Client.Status(), fence: c.fence}
}

func (c fencedClient) SubResource(name string) client.SubResourceClient {
	s := c.Client.SubResource(name)
	return struct {
		client.SubResourceReader
		fencedSubResource
	}{s, fencedSubResource{SubResourceWriter: s, fence: c.fence}}
}

// Updates fences status updates sent through u (a nil fence: always held).
func (f *LeaseFence) Updates(u StatusUpdater) StatusUpdater {
	if f == nil {
		return u
	}
	return fencedUpdates{u, f}
}

type fencedUpdates struct {
	StatusUpdater
	fence *LeaseFence
}

func (u fencedUpdates) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return u.fence.send(ctx, func(ctx context.Context) error { return u.StatusUpdater.Update(ctx, obj, opts...) })
}

// fencedSubResource is fencedClient's for a subresource (status).
type fencedSubResource struct {
	client.SubResourceWriter
	fence *LeaseFence
}

func (s fencedSubResource) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return s.fence.send(ctx, func(ctx context.Context) error { return s.SubResourceWriter.Create(ctx, obj, sub, opts...) })
}

func (s fencedSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.fence.send(ctx, func(ctx context.Context) error { return s.SubResourceWriter.Update(ctx, obj, opts...) })
}

func (s fencedSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.fence.send(ctx, func(ctx context.Context) error { return s.SubResourceWriter.Patch(ctx, obj, patch, opts...) })
}

func (s fencedSubResource) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	return s.fence.send(ctx, func(ctx context.Context) error { return s.SubResourceWriter.Apply(ctx, obj, opts...) })
}
