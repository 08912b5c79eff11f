package speaker

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/portico-lb/portico/rules"
)

// DefaultLeaseRenew is how often a speaker renews its Lease: one small write every few seconds
// (an idle speaker's CPU stays far below 1% of a core), and a speaker that stops is counted out
// three renewals later (rules.LiveSpeakers).
const DefaultLeaseRenew = 5 * time.Second

// renewLease keeps this node's speaker Lease fresh until ctx ends (rules.LiveSpeakers): the
// controller names only live speakers in a Service's conditions. A renewal that fails (the
// apiserver unreachable) is tried again at the next tick; the Lease then goes stale, as it
// should: a speaker cut off from the cluster is not counted.
func (s *Speaker) renewLease(ctx context.Context) {
	if s.LeaseNamespace == "" || s.LeaseRenew <= 0 {
		return
	}
	var held *coordinationv1.Lease
	tick := time.NewTicker(s.LeaseRenew)
	defer tick.Stop()
	for {
		var err error
		if held, err = s.renewOnce(ctx, held); err != nil && ctx.Err() == nil {
			s.Log.Error(err, "renewing the speaker Lease", "namespace", s.LeaseNamespace)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// renewOnce writes the Lease with a new renew time: an update of the Lease held, or, when there
// is none (the first renewal, or the last one failed), whatever the apiserver has, created
// when missing.
func (s *Speaker) renewOnce(ctx context.Context, held *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	key := types.NamespacedName{Namespace: s.LeaseNamespace, Name: rules.SpeakerLeaseName(s.Node)}
	now := metav1.NewMicroTime(time.Now())
	spec := coordinationv1.LeaseSpec{HolderIdentity: ptr.To(s.Node), RenewTime: &now,
		LeaseDurationSeconds: ptr.To(max(1, int32((3*s.LeaseRenew).Round(time.Second)/time.Second)))}
	if held == nil {
		held = &coordinationv1.Lease{}
		switch err := s.Client.Get(ctx, key, held); {
		case apierrors.IsNotFound(err):
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
				Labels: map[string]string{rules.SpeakerLeaseLabel: ""}}, Spec: spec}
			l.Spec.AcquireTime = &now
			if err := s.Client.Create(ctx, l); err != nil {
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
	if err := s.Client.Update(ctx, held); err != nil {
		return nil, err
	}
	return held, nil
}

// dropLease deletes this node's Lease as the speaker stops in order, so that it is counted out
// at once rather than when the Lease runs out.
func (s *Speaker) dropLease() {
	if s.LeaseNamespace == "" || s.LeaseRenew <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	key := types.NamespacedName{Namespace: s.LeaseNamespace, Name: rules.SpeakerLeaseName(s.Node)}
	if err := s.Client.Delete(ctx, key, &coordinationv1.Lease{}); err != nil && !apierrors.IsNotFound(err) {
		s.Log.Error(err, "deleting the speaker Lease")
	}
}
