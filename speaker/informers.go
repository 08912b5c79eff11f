package speaker

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// What the speaker watches through the cache's informers, and what it keeps of each object.

// changeHandler is the informer handler for obj's kind: Services and EndpointSlices name the
// Service that changed, every other kind asks for a whole plan.
func (s *Speaker) changeHandler(obj runtime.Object) toolscache.ResourceEventHandlerFuncs {
	note := func(o any, gone bool) {
		if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		switch o := o.(type) {
		case *corev1.Service:
			s.inbox.pending.service(o.Namespace + "/" + o.Name)
		case *discoveryv1.EndpointSlice:
			s.inbox.pending.slice(o, gone)
		default:
			s.inbox.pending.everything()
		}
		s.trigger("config")
	}
	switch obj.(type) {
	case *corev1.Service, *discoveryv1.EndpointSlice:
	default:
		note = func(any, bool) { s.replanAll("config") }
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { note(o, false) },
		UpdateFunc: func(old, o any) { note(old, true); note(o, false) },
		DeleteFunc: func(o any) { note(o, true) },
	}
}

// What a speaker reads of the Speakers: the subnets the others answer on (subnets.go), and the
// addresses every node answers for over L2 and since when, for the owner rule that keeps an
// address where it is (rules.HoldersOf) and the balance (election.Balance).

// speakersHandler plans everything again when a Speaker comes or goes or a node's reported
// subnets change (this node's own included), and elects again the addresses whose holders
// changed when any node's L2 announcements (their addresses or since) change, this node's own
// among them (the balance waits for them). A Speaker status changes far more often for other
// reasons (self-checks, sessions), which do not matter here. Every node plans with the subnets
// the Speakers report, its own too (not its links as it reads them now, which the others learn
// only once its status is written): so all agree on where each node can answer, and a node
// whose link came back does not answer before the others read that it can, nor stop while
// they still elect it.
func (s *Speaker) speakersHandler() toolscache.ResourceEventHandlerFuncs {
	speakerOf := func(o any) *v1alpha1.Speaker {
		if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		sp, _ := o.(*v1alpha1.Speaker)
		return sp
	}
	replan := func(o any) {
		if sp := speakerOf(o); sp != nil {
			s.replanAll("speakers")
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: replan,
		UpdateFunc: func(old, o any) {
			before, after := speakerOf(old), speakerOf(o)
			if before == nil || after == nil {
				return
			}
			subnetsChanged := (before.Status.Subnets == nil) != (after.Status.Subnets == nil) ||
				!slices.Equal(before.Status.Subnets, after.Status.Subnets)
			switch {
			case subnetsChanged:
				s.replanAll("speakers")
			case !slices.EqualFunc(l2Held(before), l2Held(after), sameHeld):
				s.inbox.pending.reheld()
				s.trigger("holders")
			}
		},
		DeleteFunc: replan,
	}
}

// trimSpeaker keeps only what a speaker reads of a Speaker: its subnets, and the address and
// since of each L2 announcement.
func trimSpeaker(sp *v1alpha1.Speaker) {
	held := l2Held(sp)
	sp.Status = v1alpha1.SpeakerStatus{Subnets: sp.Status.Subnets, Announcements: held}
}

// l2Held are a Speaker's L2 announcements, as trimSpeaker keeps them.
func l2Held(sp *v1alpha1.Speaker) []v1alpha1.Announcement {
	var out []v1alpha1.Announcement
	for _, a := range sp.Status.Announcements {
		if a.Protocol == v1alpha1.ProtocolL2 {
			out = append(out, v1alpha1.Announcement{IP: a.IP, Protocol: a.Protocol, Since: a.Since})
		}
	}
	return out
}

func sameHeld(a, b v1alpha1.Announcement) bool {
	return a.IP == b.IP && a.Since.Equal(b.Since)
}

// TrimForCache drops what the speaker never reads from an object before the informer cache keeps
// it: every object's managedFields and kubectl's last-applied-configuration annotation (a copy
// of the whole object as applied, often most of a Service's size), and a Node's list of
// container images (tens of KiB on a busy node), and all of a Speaker's status but its subnets and L2 addresses (trimSpeaker). Every speaker caches every Service and Node of
// the cluster, so this is paid per object, on every node.
func TrimForCache(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		if m.GetManagedFields() != nil {
			m.SetManagedFields(nil)
		}
		if a := m.GetAnnotations(); a != nil {
			if _, ok := a[corev1.LastAppliedConfigAnnotation]; ok {
				delete(a, corev1.LastAppliedConfigAnnotation)
				m.SetAnnotations(a)
			}
		}
	}
	switch o := obj.(type) {
	case *corev1.Node:
		o.Status.Images = nil
	case *v1alpha1.Speaker:
		trimSpeaker(o)
	}
	return obj, nil
}
