package speaker

import (
	"context"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/plan"
)

// bgpStop is what a stopping speaker does with its node's BGP routes (docs/speaker-bgp.md,
// "What survives which move").
type bgpStop struct {
	// keep: a planned restart; the sessions with graceful restart end without a NOTIFICATION,
	// so routers keep the routes, stale, until the next speaker refreshes them. Otherwise every
	// route is withdrawn and every session closed with a Cease, at once.
	keep   bool
	reason string // in a word, for the log and the metric
	// last: no speaker follows on this node (an uninstall, the node going away), so the state
	// the hand-off keeps in the node's kernel for the next speaker goes too (Handoff.Clear).
	last bool
	// handoffEnds: the next speaker runs no hand-off (runsHandoff, read from the DaemonSet), so
	// that state goes too, though BGP stops for a restart.
	handoffEnds bool
}

// Taints that announce a node about to go: the cluster autoscaler's and Karpenter's before
// they remove it, and the one an administrator sets on a node that is down for good.
var leavingTaints = []string{"ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted", corev1.TaintNodeOutOfService}

// bgpStopOf says whether a stop of the speaker on node n (nil: the Node is gone) is a restart,
// after which a speaker is back on the same node within seconds while its kube-proxy forwards
// all along (a DaemonSet rolling update, the pod deleted, a crash the kubelet restarts), or a
// stop for good, whose routes must go at once so that routers stop sending there: the node
// cordoned (kubectl drain's first step; drained, the node's pods leave and it may be powered
// off next), not Ready or its network unavailable (the plan withdrew already), excluded from
// load balancers, being deleted, or tainted as leaving. A rolling update and an uninstall look
// alike from the node: stopBGP reads the DaemonSet to tell them apart (uninstalling).
func bgpStopOf(n *corev1.Node, ignoreExcludeLabel bool) bgpStop {
	if n == nil {
		return bgpStop{reason: "node-gone", last: true}
	}
	h := rules.FitnessOf(n)
	switch {
	case n.DeletionTimestamp != nil:
		return bgpStop{reason: "node-deleting", last: true}
	case h.Cordoned:
		return bgpStop{reason: "cordoned"}
	case h.NotReady || h.NetworkUnavailable:
		return bgpStop{reason: "not-ready"}
	case rules.ExcludedFromLB(n, ignoreExcludeLabel):
		return bgpStop{reason: "excluded"}
	}
	for _, t := range n.Spec.Taints {
		for _, leaving := range leavingTaints {
			if t.Key == leaving {
				return bgpStop{reason: "node-leaving", last: true}
			}
		}
	}
	return bgpStop{keep: true, reason: "restart"}
}

// uninstalling reads the speaker's DaemonSet as it stops (its metadata, or why it could not):
// gone or being deleted is an uninstall, and so is a refusal, as the speaker's ServiceAccount and
// RBAC go with the chart. Another error (an apiserver out of reach) says nothing: a restart.
func uninstalling(ds metav1.ObjectMeta, err error) bool {
	switch {
	case err == nil:
		return ds.DeletionTimestamp != nil
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return true
	}
	return false
}

// daemonSetWait bounds the read of the DaemonSet at shutdown, within the termination grace.
const daemonSetWait = time.Second

// leaver is a Router that can end its sessions for a planned restart (bgpproc.Supervisor,
// bgp.Sessions).
type leaver interface {
	Leave() (kept []string)
}

// stopBGP ends the BGP side as bgpStopOf says for this node as the cache last saw it and, for
// what would not be the last stop, as uninstalling and runsHandoff say of the DaemonSet; it
// returns the stop.
func (s *Speaker) stopBGP() bgpStop {
	var node *corev1.Node
	var n corev1.Node
	switch err := s.Cache.Get(context.Background(), types.NamespacedName{Name: s.Node}, &n); {
	case err == nil:
		node = &n
	case !apierrors.IsNotFound(err):
		s.Log.Error(err, "reading this node at shutdown; its BGP routes are withdrawn")
	}
	stop := bgpStopOf(node, s.IgnoreExcludeLabel)
	if !stop.last && s.DaemonSet.Name != "" {
		ctx, cancel := context.WithTimeout(context.Background(), daemonSetWait)
		ds, err := s.Client.DaemonSet(ctx, s.DaemonSet)
		cancel()
		switch {
		case uninstalling(ds.ObjectMeta, err):
			stop = bgpStop{reason: "uninstall", last: true}
		case err != nil:
			s.Log.Error(err, "reading this speaker's DaemonSet at shutdown; taken for a restart", "daemonSet", s.DaemonSet)
		default:
			stop.handoffEnds = !runsHandoff(ds.Template)
		}
	}
	s.Metrics.bgpStopping(stop)
	l, ok := s.BGP.(leaver)
	if s.advertiser != nil && s.planner != nil && plan.StopShares(stop.keep && ok, s.planner.Plan().BGP.Peers) {
		// The withdrawal changes the ECMP sets as a drain does: the members share first.
		s.shareFlows(context.Background(), keysOf(s.advertiser.routed, map[netip.Addr]bool(nil)), "stopping-"+stop.reason)
	}
	if !stop.keep || !ok {
		s.BGP.Close()
		s.Log.Info("stopping for good: every BGP route withdrawn, every session closed", "reason", stop.reason)
		return stop
	}
	kept := l.Leave()
	s.Log.Info("stopping for a restart: routers keep this node's BGP routes (graceful restart) until the next speaker refreshes them; sessions without graceful restart withdrawn",
		"reason", stop.reason, "kept", kept)
	return stop
}

// noteBGPStop sets the metric that says what a stop now would do, from this node as the plan
// reads it.
func (s *Speaker) noteBGPStop(nodes []corev1.Node) {
	var me *corev1.Node
	for i := range nodes {
		if nodes[i].Name == s.Node {
			me = &nodes[i]
		}
	}
	s.Metrics.bgpStopping(bgpStopOf(me, s.IgnoreExcludeLabel))
}
