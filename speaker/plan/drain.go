package plan

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// CordonedSince stamps each node of nodes seen cordoned for the first time with now, keeps the
// stamps of prev for those still cordoned and forgets the others: the Node object does not say
// when spec.unschedulable was set, so a drain's grace (World.CordonedSince, World.DrainGrace)
// counts from when the speaker first saw it. A speaker that starts on a cordoned node starts
// its grace again.
func CordonedSince(prev map[string]time.Time, nodes []corev1.Node, now time.Time) map[string]time.Time {
	seen := make(map[string]time.Time, len(prev))
	for i := range nodes {
		if n := &nodes[i]; n.Spec.Unschedulable {
			since, ok := prev[n.Name]
			if !ok {
				since = now
			}
			seen[n.Name] = since
		}
	}
	return seen
}
