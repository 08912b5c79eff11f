package speaker

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// speakerContainer is the speaker's container in the DaemonSet's pod template, as the chart and
// the manifests name it.
const speakerContainer = "speaker"

// runsHandoff says whether the speaker a pod template p starts runs the L2 hand-off and so adopts
// the state this one leaves in the node's kernel: its container holds NET_ADMIN (added, or
// privileged) and its --l2-handoff-grace is not 0. A stop for a restart reads it from the
// DaemonSet: a rolling update to the chart's speaker.forwardGuard=false (or to a grace of 0)
// starts speakers that cannot or will not adopt the state, so the stopping one removes it. A
// template it cannot read so (no container named speaker, a grace that is no duration) is taken
// to run it: the state stays, for the next speaker to adopt.
func runsHandoff(p corev1.PodSpec) bool {
	i := slices.IndexFunc(p.Containers, func(c corev1.Container) bool { return c.Name == speakerContainer })
	if i < 0 {
		return true
	}
	c := p.Containers[i]
	grace, ok := handoffGrace(append(slices.Clone(c.Command), c.Args...))
	return !ok || netAdmin(c.SecurityContext) && grace > 0
}

// netAdmin says whether a container with security context sc holds CAP_NET_ADMIN: a container
// runtime's default set lacks it.
func netAdmin(sc *corev1.SecurityContext) bool {
	if sc == nil {
		return false
	}
	if sc.Privileged != nil && *sc.Privileged {
		return true
	}
	if sc.Capabilities == nil {
		return false
	}
	return slices.ContainsFunc(sc.Capabilities.Add, func(c corev1.Capability) bool {
		name := strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_")
		return name == "NET_ADMIN" || name == "ALL"
	})
}

// handoffGrace is the --l2-handoff-grace args give, as the flag package reads it (-name or
// --name, then =value or the next argument; the last one counts), the flag's default when
// absent; false when it is no duration.
func handoffGrace(args []string) (grace time.Duration, ok bool) {
	grace = DefaultHandoffGrace
	for i, arg := range args {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-"), "=")
		if !strings.HasPrefix(arg, "-") || name != "l2-handoff-grace" {
			continue
		}
		if !hasValue && i+1 < len(args) {
			value = args[i+1]
		}
		var err error
		if grace, err = time.ParseDuration(value); err != nil {
			return 0, false
		}
	}
	return grace, true
}
