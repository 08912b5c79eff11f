package rules

import (
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// A speaker's Speaker object says what it announced when it last wrote, not that it still runs:
// a frozen (SIGSTOP), killed or cut-off speaker leaves it as it was. So each speaker also renews
// a Lease in its namespace, named after its node, once a minute by default (its duration three
// renewals), and a speaker counts as live only while its Lease is fresh. A speaker stopped in
// order (SIGTERM) deletes its Lease.

// SpeakerLeaseLabel marks the speakers' Leases, so that the controller watches those alone.
const SpeakerLeaseLabel = "portico.dev/speaker-lease"

// speakerLeasePrefix begins every speaker's Lease name: a node may bear any name, and the
// prefix keeps a speaker from writing a Lease named like another component's.
const speakerLeasePrefix = "speaker-"

// SpeakerLeaseName is the name of the Lease the speaker of node renews.
func SpeakerLeaseName(node string) string { return speakerLeasePrefix + node }

// speakerOf is the node whose speaker l is the Lease of: named after the node and held by it.
func speakerOf(l *coordinationv1.Lease) (node string, ok bool) {
	node, ok = strings.CutPrefix(l.Name, speakerLeasePrefix)
	return node, ok && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == node
}

// LiveSpeakers says which nodes run a live speaker at now: those whose Lease (named after the
// node, held by it) was renewed less than its duration ago. next is when the earliest of them
// goes stale, the zero time when none is live. leased is false when no speaker holds a Lease at
// all (speakers older than the Leases): then every Speaker object counts as live, as before.
func LiveSpeakers(leases []coordinationv1.Lease, now time.Time) (live map[string]bool, next time.Time, leased bool) {
	live = map[string]bool{}
	for i := range leases {
		l := &leases[i]
		node, ok := speakerOf(l)
		if !ok {
			continue
		}
		leased = true
		if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
			continue
		}
		until := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
		if now.Before(until) {
			live[node] = true
			if next.IsZero() || until.Before(next) {
				next = until
			}
		}
	}
	return live, next, leased
}

// CountedSpeakers are the Speakers the Services' conditions (and explain) count at now: those
// whose speaker is live, or every one while no speaker holds a Lease (speakers older than the
// Leases); stale names the nodes whose Speaker does not count, sorted as speakers are.
func CountedSpeakers(speakers []v1alpha1.Speaker, leases []coordinationv1.Lease, now time.Time) (counted []v1alpha1.Speaker, stale []string) {
	live, _, leased := LiveSpeakers(leases, now)
	if !leased {
		return speakers, nil
	}
	counted = make([]v1alpha1.Speaker, 0, len(speakers))
	for _, s := range speakers {
		if live[s.Name] {
			counted = append(counted, s)
		} else {
			stale = append(stale, s.Name)
		}
	}
	return counted, stale
}

// LastRenewed is the latest renewal of any speaker's Lease: when the controller last heard from a
// speaker, for the message that says none is live. Zero when no speaker's Lease was ever renewed.
func LastRenewed(leases []coordinationv1.Lease) time.Time {
	var last time.Time
	for i := range leases {
		l := &leases[i]
		if _, ok := speakerOf(l); !ok || l.Spec.RenewTime == nil {
			continue
		}
		if l.Spec.RenewTime.After(last) {
			last = l.Spec.RenewTime.Time
		}
	}
	return last
}

// IgnoreExcludeLabel says whether the speakers announce from nodes labelled
// exclude-from-external-load-balancers: a live one reports running with
// --ignore-exclude-lb-label. Every speaker of a DaemonSet runs with the same flags; while a
// rollout changes it, the speakers already on the new flag decide the addresses they answer.
func IgnoreExcludeLabel(live []v1alpha1.Speaker) bool {
	for i := range live {
		if live[i].Status.IgnoreExcludeLabel {
			return true
		}
	}
	return false
}
