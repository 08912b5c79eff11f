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
	// IgnoreClassless leaves Services without a loadBalancerClass to another load balancer;
	// the speakers must run with the same setting.
	IgnoreClassless bool
}

// Setup registers every Portico reconciler with the manager. They share one allocator, fed
// first from the pools and every Service's status, so no address moves across restarts, and
// one status writer, so their writes to a Service never fight.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.LoadBalancerClass == "" {
		opts.LoadBalancerClass = porticov1.DefaultLoadBalancerClass
	}
	s := newState(mgr.GetClient(), opts.LoadBalancerClass)
	s.live = mgr.GetAPIReader()
	s.ignoreClassless = opts.IgnoreClassless
	w := newStatusWriter(mgr.GetClient(), mgr.GetAPIReader())
	if err := mgr.Add(w); err != nil {
		return err
	}
	if err := (&PoolReconciler{Client: mgr.GetClient(), state: s}).setup(mgr); err != nil {
		return err
	}
	if err := (&BGPPeerReconciler{Client: mgr.GetClient()}).setup(mgr); err != nil {
		return err
	}
	recorder := mgr.GetEventRecorder("portico-controller")
	health := &HealthReconciler{Client: mgr.GetClient(), Recorder: recorder, ours: s.ours, writer: w}
	if err := (&ServiceReconciler{Client: mgr.GetClient(), Recorder: recorder, state: s, writer: w, health: health}).setup(mgr); err != nil {
		return err
	}
	return health.setup(mgr)
}
