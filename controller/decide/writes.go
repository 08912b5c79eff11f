package decide

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// SameWrite reports whether two copies of a Service carry the same status write: the status
// and the annotations, which a status update stores too (kube-apiserver 1.37).
func SameWrite(a, b *corev1.Service) bool {
	return equality.Semantic.DeepEqual(a.Status, b.Status) && equality.Semantic.DeepEqual(a.Annotations, b.Annotations)
}
