// Package workload puts pods and their EndpointSlices into a test cluster that runs no
// kubelet or scheduler: pods are created and then marked Running (and Ready, or not) through
// their status, as a kubelet would. Where no endpointslice controller runs either, SyncSlice
// writes each Service's EndpointSlice the way kube-controller-manager's endpointslice
// controller writes it (labels, owner, addressType, per-endpoint ready/serving/terminating,
// target ports); the data-plane lab and the demo run the real one instead.
package workload

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ManagedBy is the endpointslice controller's value of the managed-by label.
const ManagedBy = "endpointslice-controller.k8s.io"

// Pod describes one pod to run.
type Pod struct {
	Name   string
	Labels map[string]string
	Node   string
	IP     string // pod IP, e.g. 10.244.1.7
	Ready  bool
}

// Run creates the pod and writes its status as the kubelet would once its container runs.
func Run(ctx context.Context, c client.Client, ns string, p Pod) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.Name, Labels: p.Labels},
		Spec: corev1.PodSpec{
			NodeName:   p.Node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		},
	}
	if err := c.Create(ctx, pod); err != nil {
		return nil, err
	}
	return pod, SetReady(ctx, c, pod, p.IP, p.Ready)
}

// CreateReady creates pod as given (spec.nodeName set by the caller) and reports it running
// and Ready at ip, so an endpointslice controller (the real one, or SyncSlice) lists it.
func CreateReady(ctx context.Context, c client.Client, pod *corev1.Pod, ip string) error {
	if err := c.Create(ctx, pod); err != nil {
		return err
	}
	return SetReady(ctx, c, pod, ip, true)
}

// SetReady writes the pod's status: Running with the IP, Ready or not.
func SetReady(ctx context.Context, c client.Client, pod *corev1.Pod, ip string, ready bool) error {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:  corev1.PodRunning,
		PodIP:  ip,
		PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: status, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: status, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "registry.example/app:1", Ready: ready,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
	}
	return c.Status().Update(ctx, pod)
}

// podReady reads the pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// SyncSlice writes the IPv4 EndpointSlice of a Service with a selector from the pods of its
// namespace, as the endpointslice controller does: every pod that matches and has an IP is an
// endpoint (not-ready ones with ready=false), ports are the Service's target ports, and an
// empty slice is still written when nothing matches.
func SyncSlice(ctx context.Context, c client.Client, svc *corev1.Service) error {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(svc.Namespace)); err != nil {
		return err
	}
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace,
			Name:      svc.Name + "-ipv4", // the controller uses generateName svc.Name+"-"
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   ManagedBy,
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for _, sp := range svc.Spec.Ports {
		port := sp.TargetPort.IntVal
		if port == 0 {
			port = sp.Port
		}
		want.Ports = append(want.Ports, discoveryv1.EndpointPort{Name: ptr.To(sp.Name), Port: ptr.To(port), Protocol: ptr.To(orTCP(sp.Protocol))})
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	for i := range pods.Items {
		p := &pods.Items[i]
		if !sel.Matches(labels.Set(p.Labels)) || p.Status.PodIP == "" {
			continue
		}
		ready := podReady(p) && p.DeletionTimestamp == nil
		ep := discoveryv1.Endpoint{
			Addresses: []string{p.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(podReady(p)),
				Terminating: ptr.To(p.DeletionTimestamp != nil)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		}
		if p.Spec.NodeName != "" {
			ep.NodeName = ptr.To(p.Spec.NodeName)
		}
		want.Endpoints = append(want.Endpoints, ep)
	}
	var cur discoveryv1.EndpointSlice
	err := c.Get(ctx, client.ObjectKeyFromObject(want), &cur)
	switch {
	case apierrors.IsNotFound(err):
		return c.Create(ctx, want)
	case err != nil:
		return err
	}
	cur.Labels, cur.OwnerReferences, cur.Endpoints, cur.Ports = want.Labels, want.OwnerReferences, want.Endpoints, want.Ports
	if err := c.Update(ctx, &cur); err != nil {
		return fmt.Errorf("endpointslice %s/%s: %w", cur.Namespace, cur.Name, err)
	}
	return nil
}

func orTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}
