package speaker

import (
	"slices"

	toolscache "k8s.io/client-go/tools/cache"

	"github.com/portico-lb/portico/api/v1alpha1"
)

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
