package controller

import (
	"context"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
	"github.com/portico-lb/portico/rules"
)

// speakerLiveness tells the health conditions which Speakers to count: those whose speaker
// renews its Lease (rules.LiveSpeakers). A frozen, killed or cut-off speaker leaves its Speaker
// object as it was, naming addresses another node has taken over. When the set of live
// speakers changes (a Lease appears, is deleted, or runs out, which no watch event tells) it
// wakes every addressed Service.
type speakerLiveness struct {
	namespace string
	leases    client.Reader // nil: no Lease is read, every Speaker counts
	poke      chan struct{}
	changed   chan event.GenericEvent
}

// newSpeakerLiveness reads the speakers' Leases in namespace from c ("" reads none).
func newSpeakerLiveness(ctx context.Context, c cache.Cache, namespace string) (*speakerLiveness, error) {
	l := &speakerLiveness{namespace: namespace, poke: make(chan struct{}, 1), changed: make(chan event.GenericEvent, 1)}
	if namespace == "" {
		return l, nil
	}
	inf, err := c.GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		return nil, err
	}
	l.leases = c
	poke := func(any) {
		select {
		case l.poke <- struct{}{}:
		default:
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: poke, DeleteFunc: poke,
		UpdateFunc: func(_, o any) { poke(o) }})
	return l, err
}

// leases are the speakers' Leases; ok is false until they can be read.
func (l *speakerLiveness) leaseList() (leases []coordinationv1.Lease, ok bool) {
	if l.leases == nil {
		return nil, false
	}
	var list coordinationv1.LeaseList
	if err := l.leases.List(context.Background(), &list, client.InNamespace(l.namespace),
		client.HasLabels{rules.SpeakerLeaseLabel}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, false // not synced yet: count every Speaker, as before the Leases
	}
	return list.Items, true
}

// count sets f's Speakers to those the conditions count at now (rules.CountedSpeakers), and
// what it says of the others, the subnets they can answer on and the addresses they hold.
func (l *speakerLiveness) count(f *decide.HealthFacts, speakers []porticov1.Speaker, now time.Time) {
	leases, _ := l.leaseList()
	f.Speakers, f.Stale = rules.CountedSpeakers(speakers, leases, now)
	f.Subnets = rules.SubnetsOf(f.Speakers)
	f.Holders = rules.HoldersOf(f.Speakers)
	f.LastRenewed = rules.LastRenewed(leases)
}

// Start follows the live set until ctx ends: at every Lease change and when the next Lease
// runs out, and sends a change on changed when the set differs from the last one sent.
func (l *speakerLiveness) Start(ctx context.Context) error {
	if l.leases == nil {
		return nil
	}
	var last map[string]bool
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.poke:
		case <-timer.C:
		}
		leases, _ := l.leaseList()
		live, next, _ := rules.LiveSpeakers(leases, time.Now())
		if !maps.Equal(live, last) {
			last = live
			select {
			case l.changed <- event.GenericEvent{Object: &coordinationv1.Lease{}}:
			default: // one waiting already wakes every Service
			}
		}
		wait := time.Minute
		if !next.IsZero() {
			wait = time.Until(next) + 10*time.Millisecond
		}
		timer.Reset(wait)
	}
}

// NeedLeaderElection: only the leader's reconcilers read the changes.
func (l *speakerLiveness) NeedLeaderElection() bool { return true }
