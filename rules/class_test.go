package rules

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestHandles(t *testing.T) {
	ours, other := "portico.dev/lb", "example.com/other"
	svc := func(typ corev1.ServiceType, class *string) *corev1.Service {
		return &corev1.Service{Spec: corev1.ServiceSpec{Type: typ, LoadBalancerClass: class}}
	}
	lb := corev1.ServiceTypeLoadBalancer
	for _, tc := range []struct {
		name      string
		svc       *corev1.Service
		classless bool
		want      bool
	}{
		{"no class, classless handled", svc(lb, nil), true, true},
		{"no class, classless left alone", svc(lb, nil), false, false},
		{"our class", svc(lb, &ours), true, true},
		{"our class, classless left alone", svc(lb, &ours), false, true},
		{"another class", svc(lb, &other), true, false},
		{"another class, classless left alone", svc(lb, &other), false, false},
		{"not a LoadBalancer", svc(corev1.ServiceTypeClusterIP, nil), true, false},
		{"NodePort of our class", svc(corev1.ServiceTypeNodePort, &ours), true, false},
	} {
		if got := Handles(tc.svc, ours, tc.classless); got != tc.want {
			t.Errorf("%s: Handles = %v, want %v", tc.name, got, tc.want)
		}
	}
}
