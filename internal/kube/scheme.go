// Package kube holds the small pieces the controller, the kubectl plugin and the test control
// plane share when talking to Kubernetes through controller-runtime; the speaker has its own,
// smaller client (speaker/kubeapi).
package kube

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/kube/watchlist"
)

// NewScheme knows the core Kubernetes types and Portico's.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := porticov1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewManager returns a controller-runtime manager on cfg (ctrl.GetConfig: in-cluster,
// --kubeconfig or $KUBECONFIG) whose scheme knows Portico's types. Its informers list, then
// watch (see watchlist.Off).
func NewManager(cfg *rest.Config, opts ctrl.Options) (ctrl.Manager, error) {
	watchlist.Off()
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	opts.Scheme = scheme
	return ctrl.NewManager(cfg, opts)
}
