package rules

import corev1 "k8s.io/api/core/v1"

// Handles reports whether Portico handles svc: a LoadBalancer Service whose
// spec.loadBalancerClass is class, or that has none while classless is true. With classless
// false (the --ignore-classless flag of the controller and the speakers), Services without a
// class are left to another load balancer running beside Portico (a cloud controller, Cilium,
// kube-vip). The controller and every speaker decide with this one rule, so they agree on it
// as long as they run with the same flags.
func Handles(svc *corev1.Service, class string, classless bool) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	if c := svc.Spec.LoadBalancerClass; c != nil {
		return *c == class
	}
	return classless
}
