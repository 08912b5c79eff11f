package plan_test

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/plan"
	"github.com/portico-lb/portico/speaker/plan/plantest"
	"github.com/portico-lb/portico/speaker/status"
)

// BenchmarkMakePlan: one speaker's whole plan for 1000 Services, each with an EndpointSlice,
// announced over L2 and BGP: the work a change to nodes, pools, advertisements, peers or the
// members costs a speaker. node-a tells of every BGP address; node-b also plans node-a's
// routes to learn that it does not.
func BenchmarkMakePlan(b *testing.B) {
	w := benchWorld(1000)
	for _, node := range []string{"node-a", "node-b"} {
		b.Run(node, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p := plan.Make(w, node, v1alpha1.DefaultLoadBalancerClass, plantest.AllAlive)
				if len(p.Routed) != 1000 {
					b.Fatalf("routed %d, want 1000 (%d problems)", len(p.Routed), len(p.Problems))
				}
			}
		})
	}
}

// BenchmarkPlanChange: what one Service change costs a speaker's plan and status with 1000 and
// 10 000 Services planned: the Service moves to a free address (its old address leaves, the
// new one arrives, over L2 and BGP), then Planner.Update and the status entries it touches.
func BenchmarkPlanChange(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		w := benchWorld(n)
		for _, node := range []string{"node-a", "node-b"} {
			b.Run(fmt.Sprintf("services=%d/%s", n, node), func(b *testing.B) {
				pl := plan.NewPlanner(node, v1alpha1.DefaultLoadBalancerClass)
				pl.Replan(w, plantest.AllAlive)
				v := &status.View{}
				v.Update(pl.Plan(), nil, slices.SortedFunc(maps.Keys(pl.Plan().Mine), netip.Addr.Compare), slices.SortedFunc(maps.Keys(pl.Plan().Routed), netip.Addr.Compare), nil, true, time.Time{})
				svc := w.Services[n/2]
				key := []string{svc.Namespace + "/" + svc.Name}
				addrs := []string{svc.Status.LoadBalancer.Ingress[0].IP, "198.51.200.1"}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: addrs[i%2]}}
					ch := pl.Update([]corev1.Service{svc}, nil, key)
					v.Update(pl.Plan(), nil, ch.Mine, ch.Routed, ch.Prefixes(), false, time.Time{})
					if len(ch.Routed) != 2 {
						b.Fatalf("%d routed addresses changed, want 2", len(ch.Routed))
					}
				}
			})
		}
	}
}

// benchWorld is n Services, each with an EndpointSlice, announced over L2 and BGP.
func benchWorld(n int) plan.World {
	var svcs []corev1.Service
	var slices []discoveryv1.EndpointSlice
	ip := netip.MustParseAddr("198.51.100.10")
	ready := true
	for i := range n {
		name := fmt.Sprintf("svc-%05d", i)
		svcs = append(svcs, plantest.LBService(name, ip.String()))
		node := plantest.NodeNames[i%len(plantest.NodeNames)]
		slices = append(slices, discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.1"}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		})
		ip = ip.Next()
	}
	w := plantest.World(svcs...)
	w.Pools[0].Spec.Addresses = []v1alpha1.AddressRange{"198.51.0.0/16"}
	w.EndpointSlices = slices
	for i := range w.Nodes {
		w.Nodes[i].Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.0.%d", i+1)}}
	}
	w.BGPPeers = []v1alpha1.BGPPeer{{ObjectMeta: metav1.ObjectMeta{Name: "router"}, Spec: v1alpha1.BGPPeerSpec{MyASN: 64500, PeerASN: 64501, PeerAddress: "192.168.0.254"}}}
	// Pools chosen by label, as in the BGP bench: a selector to evaluate for every address.
	w.BGPAds = []v1alpha1.BGPAdvertisement{{ObjectMeta: metav1.ObjectMeta{Name: "all"}, Spec: v1alpha1.BGPAdvertisementSpec{
		IPAddressPoolSelectors: []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "advertise", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"no"}}}}}}}}
	return w
}
