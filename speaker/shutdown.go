package speaker

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/speaker/plan"
)

// How a speaker stops: what becomes of its BGP routes and of the hand-off's kernel state is the
// plan's choice (plan.StopOf), from its Node as the cache last saw it and its DaemonSet.

// shutdown stops the speaker in order once its context ends.
func (s *Speaker) shutdown() {
	// BGP first: for good, routers drop this node's routes as soon as they get the withdrawals
	// and the NOTIFICATION that closes each session; for a restart they keep them.
	stop := s.stopOf()
	s.stopBGP(stop)
	// Silent first, then the goodbye, then the sockets closed: closing them takes milliseconds
	// (Responder.Silence), and the others take over as soon as they hear the goodbye.
	s.Announce.Silence()
	if err := s.Group.Leave(time.Second); err != nil {
		s.Log.Error(err, "leaving the gossip group")
	}
	if err := s.Announce.Close(); err != nil {
		s.Log.Error(err, "closing responders")
	}
	s.reporter.unlistL2()
	s.dropLease()
	s.takeovers.end(stop)
	if s.Guard != nil {
		if err := s.Guard.Close(); err != nil {
			s.Log.Error(err, "removing the forwarding guard")
		}
	}
	s.Log.Info("stopped answering and left the group")
}

// daemonSetWait bounds the read of the DaemonSet at shutdown, within the termination grace.
const daemonSetWait = time.Second

// leaver is a Router that can end its sessions for a planned restart (bgpproc.Supervisor,
// bgp.Sessions).
type leaver interface {
	Leave() (kept []string)
}

// stopOf is the stop (plan.StopOf) of this node as the cache last saw it and, for what would
// not be the last stop, of the speaker's DaemonSet as read now (Stop.AfterDaemonSet).
func (s *Speaker) stopOf() plan.Stop {
	var node *corev1.Node
	var n corev1.Node
	switch err := s.Cache.Get(context.Background(), types.NamespacedName{Name: s.Node}, &n); {
	case err == nil:
		node = &n
	case !apierrors.IsNotFound(err):
		s.Log.Error(err, "reading this node at shutdown; its BGP routes are withdrawn")
	}
	stop := plan.StopOf(node, s.IgnoreExcludeLabel)
	if stop.Last || s.DaemonSet.Name == "" {
		return stop
	}
	ctx, cancel := context.WithTimeout(context.Background(), daemonSetWait)
	ds, err := s.Client.DaemonSet(ctx, s.DaemonSet)
	cancel()
	after := stop.AfterDaemonSet(ds.ObjectMeta, ds.Template, err)
	if err != nil && after == stop {
		s.Log.Error(err, "reading this speaker's DaemonSet at shutdown; taken for a restart", "daemonSet", s.DaemonSet)
	}
	return after
}

// stopBGP ends the BGP side as stop says.
func (s *Speaker) stopBGP(stop plan.Stop) {
	s.Metrics.bgpStopping(stop)
	l, ok := s.BGP.(leaver)
	if s.advertiser != nil && s.planner != nil && plan.StopShares(stop.Keep && ok, s.planner.Plan().BGP.Peers) {
		// The withdrawal changes the ECMP sets as a drain does: the members share first.
		s.shareFlows(context.Background(), slices.SortedFunc(maps.Keys(s.advertiser.routed), netip.Addr.Compare), "stopping-"+stop.Reason)
	}
	if !stop.Keep || !ok {
		s.BGP.Close()
		s.Log.Info("stopping for good: every BGP route withdrawn, every session closed", "reason", stop.Reason)
		return
	}
	kept := l.Leave()
	s.Log.Info("stopping for a restart: routers keep this node's BGP routes (graceful restart) until the next speaker refreshes them; sessions without graceful restart withdrawn",
		"reason", stop.Reason, "kept", kept)
}
