package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// BGPPeerReconciler folds the sessions the speakers report in their Speaker objects into each
// BGPPeer's status (the controller is the peer's only writer): one entry per node, and the
// SessionsEstablished condition naming the nodes whose session is not up.
type BGPPeerReconciler struct {
	Client client.Client
}

func (r *BGPPeerReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&porticov1.BGPPeer{}).
		Named("bgppeer").
		// A Speaker change can add, change or drop a session of any peer; peers are few.
		Watches(&porticov1.Speaker{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
			var peers porticov1.BGPPeerList
			if err := r.Client.List(ctx, &peers); err != nil {
				return nil
			}
			reqs := make([]reconcile.Request, len(peers.Items))
			for i := range peers.Items {
				reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&peers.Items[i])}
			}
			return reqs
		})).
		Complete(r)
}

// Reconcile writes one peer's status from the Speakers' reports.
func (r *BGPPeerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var peer porticov1.BGPPeer
	found, err := get(ctx, r.Client, req.NamespacedName, &peer)
	if err != nil || !found {
		return ctrl.Result{}, err
	}
	var speakers porticov1.SpeakerList
	if err := r.Client.List(ctx, &speakers); err != nil {
		return ctrl.Result{}, err
	}
	st := foldSessions(peer.Name, speakers.Items)
	st.Conditions = slices.Clone(peer.Status.Conditions)
	cond := sessionsCondition(st.Sessions)
	cond.ObservedGeneration = peer.Generation
	meta.SetStatusCondition(&st.Conditions, cond)
	if equality.Semantic.DeepEqual(st, peer.Status) {
		return ctrl.Result{}, nil
	}
	peer.Status = st
	return ctrl.Result{}, r.Client.Status().Update(ctx, &peer)
}

// foldSessions collects every node's session with the named peer, sorted by node.
func foldSessions(peer string, speakers []porticov1.Speaker) porticov1.BGPPeerStatus {
	var st porticov1.BGPPeerStatus
	for _, sp := range speakers {
		for _, s := range sp.Status.Sessions {
			if s.Peer == peer {
				st.Sessions = append(st.Sessions, porticov1.BGPSessionState{Node: sp.Name, State: s.State, Since: s.Since, Message: s.Message})
			}
		}
	}
	slices.SortFunc(st.Sessions, func(a, b porticov1.BGPSessionState) int { return strings.Compare(a.Node, b.Node) })
	return st
}

func sessionsCondition(sessions []porticov1.BGPSessionState) metav1.Condition {
	c := metav1.Condition{Type: porticov1.ConditionSessionsEstablished}
	var down []string
	for _, s := range sessions {
		if s.State != "Established" {
			down = append(down, fmt.Sprintf("%s (%s)", s.Node, s.State))
		}
	}
	switch {
	case len(sessions) == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, porticov1.ReasonNoSessions,
			"no speaker holds a session with this peer: no node matches its nodeSelectors, no speaker runs, or a speaker reports a problem in its Speaker status"
	case len(down) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, porticov1.ReasonNotEstablished
		c.Message = fmt.Sprintf("%d of %d sessions not established: %s", len(down), len(sessions), strings.Join(down, ", "))
	default:
		c.Status, c.Reason = metav1.ConditionTrue, porticov1.ReasonAllEstablished
		c.Message = fmt.Sprintf("%d of %d sessions established", len(sessions), len(sessions))
	}
	return c
}
