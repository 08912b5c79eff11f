package plan

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/rules"
)

// Stop is what a stopping speaker does with its node's BGP routes and with the state the
// hand-off keeps in the node's kernel (docs/speaker-bgp.md, "What survives which move").
type Stop struct {
	// Keep: a planned restart; the sessions with graceful restart end without a NOTIFICATION,
	// so routers keep the routes, stale, until the next speaker refreshes them. Otherwise every
	// route is withdrawn and every session closed with a Cease, at once.
	Keep bool
	// Last: no speaker follows on this node (an uninstall, the node going away), so the state
	// the hand-off keeps in the node's kernel for the next speaker goes too.
	Last bool
	// HandoffEnds: the next speaker on this node runs no hand-off (read from the DaemonSet's
	// pod template), so that state goes too, though BGP stops for a restart: that speaker could
	// not adopt it, nor, without NET_ADMIN, remove it.
	HandoffEnds bool
	Reason      string // in a word, for the log and the metric
}

// ClearsHandoff says whether the stop removes the state the hand-off keeps in the node's kernel
// (no speaker follows on this node, or the next one runs no hand-off), and why, in a word;
// otherwise the state is released for the next speaker to adopt.
func (s Stop) ClearsHandoff() (clear bool, reason string) {
	switch {
	case s.Last:
		return true, s.Reason
	case s.HandoffEnds:
		return true, "next-speaker-without-handoff"
	}
	return false, ""
}

// Taints that announce a node about to go: the cluster autoscaler's and Karpenter's before
// they remove it, and the one an administrator sets on a node that is down for good.
var leavingTaints = []string{"ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted", corev1.TaintNodeOutOfService}

// StopOf says whether a stop of the speaker on node n (nil: the Node is gone) is a restart,
// after which a speaker is back on the same node within seconds while its kube-proxy forwards
// all along (a DaemonSet rolling update, the pod deleted, a crash the kubelet restarts), or a
// stop for good, whose routes must go at once so that routers stop sending there: the node
// cordoned (kubectl drain's first step; drained, the node's pods leave and it may be powered
// off next), not Ready or its network unavailable (the plan withdrew already), excluded from
// load balancers, being deleted, or tainted as leaving. A rolling update and an uninstall look
// alike from the node: the speaker's DaemonSet, read at the stop, tells them apart
// (Stop.AfterDaemonSet).
func StopOf(n *corev1.Node, ignoreExcludeLabel bool) Stop {
	if n == nil {
		return Stop{Reason: "node-gone", Last: true}
	}
	h := rules.FitnessOf(n)
	switch {
	case n.DeletionTimestamp != nil:
		return Stop{Reason: "node-deleting", Last: true}
	case h.Cordoned:
		return Stop{Reason: "cordoned"}
	case h.NotReady || h.NetworkUnavailable:
		return Stop{Reason: "not-ready"}
	case rules.ExcludedFromLB(n, ignoreExcludeLabel):
		return Stop{Reason: "excluded"}
	}
	for _, t := range n.Spec.Taints {
		for _, leaving := range leavingTaints {
			if t.Key == leaving {
				return Stop{Reason: "node-leaving", Last: true}
			}
		}
	}
	return Stop{Keep: true, Reason: "restart"}
}

// AfterDaemonSet is the stop given the speaker's DaemonSet as read at the stop (its metadata
// and pod template, or why it could not be read): gone or being deleted is an uninstall, and so
// is a refusal, as the speaker's ServiceAccount and RBAC go with the chart; pods whose speaker
// runs no hand-off end the hand-off's state. Another error (an apiserver out of reach) says
// nothing: the stop stays as it was.
func (s Stop) AfterDaemonSet(ds metav1.ObjectMeta, template corev1.PodSpec, err error) Stop {
	switch {
	case err == nil && ds.DeletionTimestamp != nil,
		apierrors.IsNotFound(err), apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return Stop{Reason: "uninstall", Last: true}
	case err == nil:
		s.HandoffEnds = !runsHandoff(template)
	}
	return s
}

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

// DefaultHandoffGrace is --l2-handoff-grace's default: how long after taking an address over a
// node passes on the packets of connections opened through the node it took it from.
const DefaultHandoffGrace = 10 * time.Minute
