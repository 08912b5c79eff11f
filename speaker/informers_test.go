package speaker

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// TestTrimForCache: what the cache keeps of a Service and a Node is what the speaker reads
// (labels, its own annotations, spec, status, addresses, conditions), without managedFields,
// kubectl's last-applied copy or the node's image list.
func TestTrimForCache(t *testing.T) {
	fields := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "gitea", Namespace: "git", Labels: map[string]string{"app": "gitea"},
		ManagedFields: fields, Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: `{"kind":"Service"}`,
			v1alpha1.AnnotationAllocatedFromPool: "home"}},
		Spec:   corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "10.0.0.200"}}}}}
	want := svc.DeepCopy()
	want.ManagedFields, want.Annotations = nil, map[string]string{v1alpha1.AnnotationAllocatedFromPool: "home"}
	if got, err := TrimForCache(svc); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Service: got %+v (%v), want %+v", got, err, want)
	}

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"zone": "attic"}, ManagedFields: fields},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.11"}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Images:     []corev1.ContainerImage{{Names: []string{"registry.example/app:v1"}, SizeBytes: 1 << 20}}}}
	wantNode := node.DeepCopy()
	wantNode.ManagedFields, wantNode.Status.Images = nil, nil
	if got, err := TrimForCache(node); err != nil || !reflect.DeepEqual(got, wantNode) {
		t.Errorf("Node: got %+v (%v), want %+v", got, err, wantNode)
	}
}
