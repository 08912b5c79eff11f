package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/portico-lb/portico/controller/decide"
)

// LeaseFence tells whether this replica can prove it still holds the leader lease: its last
// renewal that succeeded was sent less than the renew deadline ago, by its own monotonic
// clock. A follower takes the lease only once it has seen no renewal for the lease duration,
// counted from when it saw the last one, which landed after it was sent; so while Held is
// true no other replica leads, with lease duration − renew deadline to spare for the clocks'
// rates and a request's time on the wire. A replica paused past its lease (a GC stall,
// SIGSTOP, a frozen VM) wakes up leading in its own eyes until its elector notices; Held is
// false from the first instant, and every write the controller sends is refused until a
// renewal succeeds again (fencedClient).
//
// A nil fence (no leader election: one replica) always holds.
type LeaseFence struct {
	renewDeadline time.Duration

	mu      sync.Mutex
	renewed time.Time // when the last renewal that succeeded was sent (with its monotonic reading)
}

// Held reports whether the last renewal was sent less than the renew deadline ago.
func (f *LeaseFence) Held() bool {
	if f == nil {
		return true
	}
	return time.Until(f.until()) > 0
}

// until is when the proof runs out: the renew deadline after the last renewal was sent (zero
// before the first).
func (f *LeaseFence) until() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.renewed.IsZero() {
		return time.Time{}
	}
	return f.renewed.Add(f.renewDeadline)
}

// send runs one write with ctx ending when the proof runs out: a write that waits past it on
// this side (the client's rate limiter, a connection) is abandoned, not sent late. It fails at
// once while the fence does not hold.
func (f *LeaseFence) send(ctx context.Context, write func(context.Context) error) error {
	until := f.until()
	if time.Until(until) <= 0 {
		return errLeaseUnproven
	}
	ctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	return write(ctx)
}

func (f *LeaseFence) renewedAt(sent time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sent.After(f.renewed) {
		f.renewed = sent
	}
}

// defaultRenewDeadline is controller-runtime's, for options that leave it unset.
const defaultRenewDeadline = 10 * time.Second

// FenceLeaderElection builds the lock controller-runtime would build for opts (a Lease named
// LeaderElectionID) and sets it as opts' lock, wrapped so that each renewal it makes is timed
// by the returned fence. Without leader election it returns nil: one replica, always held.
func FenceLeaderElection(cfg *rest.Config, opts *ctrl.Options) (*LeaseFence, error) {
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
	lock, err := leaderelection.NewResourceLock(rest.CopyConfig(cfg), newLeaseEvents(cs), leaderelection.Options{
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
	f := &LeaseFence{renewDeadline: renewDeadline}
	opts.LeaderElectionResourceLockInterface = fencedLock{Interface: lock, fence: f}
	return f, nil
}

// fencedLock times the renewals of the lock it wraps: the moment each Create or Update that
// names this replica as holder was sent, once it succeeds. Releasing the lease (an Update
// naming nobody) is no renewal.
type fencedLock struct {
	resourcelock.Interface
	fence *LeaseFence
}

func (l fencedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Create(ctx, ler)
	l.renewed(ler, sent, err)
	return err
}

func (l fencedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Update(ctx, ler)
	l.renewed(ler, sent, err)
	return err
}

func (l fencedLock) renewed(ler resourcelock.LeaderElectionRecord, sent time.Time, err error) {
	if err == nil && ler.HolderIdentity == l.Identity() {
		l.fence.renewedAt(sent)
	}
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
