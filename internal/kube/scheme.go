// Package kube holds the small pieces every Portico binary shares when talking to Kubernetes.
package kube

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
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
