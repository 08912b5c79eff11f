// Package v1alpha1 holds Portico's API: address pools, advertisements, BGP peers and the
// per-node Speaker report, all cluster-scoped, in the group portico.dev.
//
// Per-object validation lives in the CRD schema and CEL rules, so the apiserver itself rejects
// bad objects and no admission webhook is needed. Rules CEL cannot express are reported by the
// controller on the object's status (see docs/validation.md).
//
// +kubebuilder:object:generate=true
// +groupName=portico.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of every Portico object.
	GroupVersion = schema.GroupVersion{Group: "portico.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the Portico types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the Portico types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
