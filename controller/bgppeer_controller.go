package controller

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
)

// BGPPeerReconciler writes each BGPPeer's status from the sessions the speakers report
// (decide.Peer).
type BGPPeerReconciler struct {
	reader  client.Reader
	clock   Clock
	writer  *statusWriter
	retries Queue
}

func (r *BGPPeerReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&porticov1.BGPPeer{}).
		Named("bgppeer").
		WatchesRawSource(source.Channel(channel(r.retries), &handler.EnqueueRequestForObject{})).
		// A Speaker change can add, change or drop a session of any peer; peers are few.
		Watches(&porticov1.Speaker{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
			var peers porticov1.BGPPeerList
			if err := r.reader.List(ctx, &peers); err != nil {
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
	found, err := get(ctx, r.reader, req.NamespacedName, &peer)
	if err != nil || !found {
		return ctrl.Result{}, err
	}
	var speakers porticov1.SpeakerList
	if err := r.reader.List(ctx, &speakers); err != nil {
		return ctrl.Result{}, err
	}
	if st, writes := decide.Peer(&peer, speakers.Items, r.clock.Now()); writes {
		peer.Status = st
		r.writer.submitStatus(&peer, writePart{retry: r.retries})
	}
	return ctrl.Result{}, nil
}
