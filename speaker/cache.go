package speaker

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// TrimForCache drops what the speaker never reads from an object before the informer cache keeps
// it: every object's managedFields and kubectl's last-applied-configuration annotation (a copy
// of the whole object as applied, often most of a Service's size), and a Node's list of
// container images (tens of KiB on a busy node), and all of a Speaker's status but its subnets and L2 addresses (trimSpeaker). Every speaker caches every Service and Node of
// the cluster, so this is paid per object, on every node.
func TrimForCache(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		if m.GetManagedFields() != nil {
			m.SetManagedFields(nil)
		}
		if a := m.GetAnnotations(); a != nil {
			if _, ok := a[corev1.LastAppliedConfigAnnotation]; ok {
				delete(a, corev1.LastAppliedConfigAnnotation)
				m.SetAnnotations(a)
			}
		}
	}
	switch o := obj.(type) {
	case *corev1.Node:
		o.Status.Images = nil
	case *v1alpha1.Speaker:
		trimSpeaker(o)
	}
	return obj, nil
}
