package speaker

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/kubeapi"
)

// DefaultLeaseRenew is how often a speaker renews its Lease: once a minute, the most a node may
// write while idle (at 5,000 nodes, 83 writes a second against the kubelets' own 500). Only the
// controller reads the Lease, to leave out of the Services' conditions a speaker that froze, was
// killed or was cut off (rules.LiveSpeakers); which node answers an address is the gossip's
// (seconds, whatever the Lease says). So a renewal a minute costs only how soon the conditions
// drop such a speaker: within its duration, three renewals (LeaseDuration), where a speaker
// stopped in order deletes its Lease and is dropped at once (dropLease).
const DefaultLeaseRenew = time.Minute

// LeaseDuration is how long a Lease renewed every renew lasts: three renewals, so that two
// missed in a row (an apiserver overloaded, which at thousands of nodes would miss many at once)
// do not count every speaker out and rewrite every Service's conditions.
func LeaseDuration(renew time.Duration) time.Duration {
	return max(time.Second, (3 * renew).Round(time.Second))
}

// leaseRenewer keeps one node's speaker Lease fresh (rules.LiveSpeakers): the controller names
// only live speakers in a Service's conditions.
type leaseRenewer struct {
	client *kubeapi.Client
	key    types.NamespacedName
	node   string
	every  time.Duration
	clock  clock.WithTicker
	log    logr.Logger
	tried  atomic.Int64 // renewals tried so far: a test that steps a fake clock waits on it
}

func newLeaseRenewer(o Options, c clock.WithTicker) *leaseRenewer {
	return &leaseRenewer{client: o.Client, node: o.Node, every: o.LeaseRenew, clock: c, log: o.Log,
		key: types.NamespacedName{Namespace: o.LeaseNamespace, Name: rules.SpeakerLeaseName(o.Node)}}
}

// renewsLease says whether o has the speaker renew a Lease at all.
func renewsLease(o Options) bool { return o.LeaseNamespace != "" && o.LeaseRenew > 0 }

// run renews the Lease at once and then every r.every until ctx ends. A renewal that fails (the
// apiserver unreachable) is tried again at the next tick; the Lease then goes stale, as it
// should: a speaker cut off from the cluster is not counted.
func (r *leaseRenewer) run(ctx context.Context) {
	var held *coordinationv1.Lease
	tick := r.clock.NewTicker(r.every)
	defer tick.Stop()
	for {
		var err error
		if held, err = r.renewOnce(ctx, held); err != nil && ctx.Err() == nil {
			r.log.Error(err, "renewing the speaker Lease", "namespace", r.key.Namespace)
		}
		r.tried.Add(1)
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		}
	}
}

// renewOnce writes the Lease with a new renew time: an update of the Lease held, or, when there
// is none (the first renewal, or the last one failed), whatever the apiserver has, created
// when missing.
func (r *leaseRenewer) renewOnce(ctx context.Context, held *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	now := metav1.NewMicroTime(r.clock.Now())
	spec := coordinationv1.LeaseSpec{HolderIdentity: ptr.To(r.node), RenewTime: &now,
		LeaseDurationSeconds: ptr.To(int32(LeaseDuration(r.every) / time.Second))}
	if held == nil {
		held = &coordinationv1.Lease{}
		switch err := r.client.Get(ctx, r.key, held); {
		case apierrors.IsNotFound(err):
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: r.key.Namespace, Name: r.key.Name,
				Labels: map[string]string{rules.SpeakerLeaseLabel: ""}}, Spec: spec}
			l.Spec.AcquireTime = &now
			if err := r.client.Create(ctx, l); err != nil {
				return nil, err
			}
			return l, nil
		case err != nil:
			return nil, err
		}
	}
	held.Spec = spec
	if held.Labels == nil {
		held.Labels = map[string]string{}
	}
	held.Labels[rules.SpeakerLeaseLabel] = ""
	if err := r.client.Update(ctx, held); err != nil {
		return nil, err
	}
	return held, nil
}

// dropLease deletes this node's Lease as the speaker stops in order, so that it is counted out
// at once rather than when the Lease runs out.
func (s *Speaker) dropLease() {
	if !renewsLease(s.Options) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	key := types.NamespacedName{Namespace: s.LeaseNamespace, Name: rules.SpeakerLeaseName(s.Node)}
	if err := s.Client.Delete(ctx, key, &coordinationv1.Lease{}); err != nil && !apierrors.IsNotFound(err) {
		s.Log.Error(err, "deleting the speaker Lease")
	}
}
