// Package plantest builds the clusters the plan's tests and transcripts read: a small fixed
// cluster (World) and the L2 scenario language of the transcripts (L2Scenario).
package plantest

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/plan"
)

// NodeNames are the nodes of World.
var NodeNames = []string{"node-a", "node-b", "node-c"}

// World is a cluster of three nodes (labelled zone=<name>) and one pool announced over L2 on
// every node, with svcs.
func World(svcs ...corev1.Service) plan.World {
	w := plan.World{Services: svcs}
	for _, n := range NodeNames {
		w.Nodes = append(w.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"zone": n}}})
	}
	w.Pools = []v1alpha1.IPAddressPool{{ObjectMeta: metav1.ObjectMeta{Name: "lab", Labels: map[string]string{"l2": "yes"}},
		Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"198.51.100.0/24", "2001:db8:1::/64"}}}}
	w.Advertisements = []v1alpha1.L2Advertisement{{ObjectMeta: metav1.ObjectMeta{Name: "all"}}}
	return w
}

// LBService is a LoadBalancer Service ns/name holding ip.
func LBService(name, ip string) corev1.Service {
	s := corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	return s
}

// AllAlive sees every node alive.
func AllAlive(string) bool { return true }

// Owners plans as every node of World would and returns who claims each address.
func Owners(w plan.World, alive func(string) bool) map[netip.Addr][]string {
	out := map[netip.Addr][]string{}
	for _, n := range NodeNames {
		for ip := range plan.Make(w, n, v1alpha1.DefaultLoadBalancerClass, alive).Mine {
			out[ip] = append(out[ip], n)
		}
	}
	return out
}
