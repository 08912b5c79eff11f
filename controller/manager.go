package controller

import (
	ctrl "sigs.k8s.io/controller-runtime"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// Options configure the controller.
type Options struct {
	// LoadBalancerClass is the spec.loadBalancerClass handled besides no class; default
	// portico.dev/lb.
	LoadBalancerClass string
}

// Setup registers every Portico reconciler with the manager. They share one allocator, fed
// first from the pools and every Service's status, so no address moves across restarts.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.LoadBalancerClass == "" {
		opts.LoadBalancerClass = porticov1.DefaultLoadBalancerClass
	}
	s := newState(mgr.GetClient(), opts.LoadBalancerClass)
	if err := (&PoolReconciler{Client: mgr.GetClient(), state: s}).setup(mgr); err != nil {
		return err
	}
	if err := (&BGPPeerReconciler{Client: mgr.GetClient()}).setup(mgr); err != nil {
		return err
	}
	return (&ServiceReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("portico-controller"), state: s}).setup(mgr)
}
