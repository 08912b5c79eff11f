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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of every Portico object.
	GroupVersion = schema.GroupVersion{Group: "portico.dev", Version: "v1alpha1"}

	// AddToScheme adds the Portico types to a scheme. It is apimachinery's builder, not
	// controller-runtime's, so the pure packages that use these types (rules, controller/decide,
	// speaker/plan) link no controller-runtime code.
	AddToScheme = schemeBuilder.AddToScheme

	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
)

// known are the Portico types, each kind with its list; each kind's file adds them (register).
var known []runtime.Object

func register(objs ...runtime.Object) { known = append(known, objs...) }

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, known...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
