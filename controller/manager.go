package controller

import (
	ctrl "sigs.k8s.io/controller-runtime"
)

// Setup registers every Portico reconciler with the manager.
func Setup(mgr ctrl.Manager) error {
	return (&PoolReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
}
