package rules

import (
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// TestBGPEligibilityReasons: one node, changed one way at a time, and what BGPEligibilityOf
// says of it: each reason a node gives for not advertising, in the rule's order.
func TestBGPEligibilityReasons(t *testing.T) {
	base := func() Cluster {
		return Cluster{
			Nodes: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"rack": "r1"}},
				Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.10"}}}}},
			Pools: []v1alpha1.IPAddressPool{{ObjectMeta: metav1.ObjectMeta{Name: "p"},
				Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"203.0.113.0/29", "2001:db8::/125"}}}},
			BGPPeers:          []v1alpha1.BGPPeer{{ObjectMeta: metav1.ObjectMeta{Name: "tor"}, Spec: v1alpha1.BGPPeerSpec{PeerAddress: "198.51.100.1"}}},
			BGPAdvertisements: []v1alpha1.BGPAdvertisement{{ObjectMeta: metav1.ObjectMeta{Name: "ad"}}},
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	v4, v6 := netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("2001:db8::1")
	rack := []metav1.LabelSelector{{MatchLabels: map[string]string{"rack": "r2"}}}
	for _, tc := range []struct {
		name   string
		change func(c *Cluster, svc *corev1.Service)
		ip     netip.Addr
		want   string // the advertiser, or why none
	}{
		{"advertises", func(*Cluster, *corev1.Service) {}, v4, "n1>tor"},
		{"an IPv6 address over an IPv4 session needs an IPv6 InternalIP", func(*Cluster, *corev1.Service) {}, v6,
			"no node may advertise (no InternalIP of the address's family for the next hop over its sessions: n1)"},
		{"no BGPPeer selects it", func(c *Cluster, _ *corev1.Service) { c.BGPPeers[0].Spec.NodeSelectors = rack }, v4,
			"no node may advertise (no BGP session (no BGPPeer selects it): n1)"},
		{"the advertisement selects other nodes", func(c *Cluster, _ *corev1.Service) { c.BGPAdvertisements[0].Spec.NodeSelectors = rack }, v4,
			"no node may advertise (not matched by the BGPAdvertisements' nodeSelectors: n1)"},
		{"the advertisement names another peer", func(c *Cluster, _ *corev1.Service) { c.BGPAdvertisements[0].Spec.Peers = []v1alpha1.Name{"other"} }, v4,
			"no node may advertise (the BGPAdvertisements' peers name none of its sessions: n1)"},
		{"excluded", func(c *Cluster, _ *corev1.Service) {
			c.Nodes[0].Labels[v1alpha1.LabelExcludeFromExternalLoadBalancers] = ""
		}, v4,
			"no node may advertise (labelled node.kubernetes.io/exclude-from-external-load-balancers: n1); speakers run with --ignore-exclude-lb-label announce from labelled nodes"},
		{"not Ready", func(c *Cluster, _ *corev1.Service) {
			c.Nodes[0].Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		}, v4, "no node may advertise (not Ready: n1)"},
		{"out of service, Ready", func(c *Cluster, _ *corev1.Service) {
			c.Nodes[0].Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
			c.Nodes[0].Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
		}, v4, "no node may advertise (tainted node.kubernetes.io/out-of-service: n1)"},
		{"cordoned, the only node: kept", func(c *Cluster, _ *corev1.Service) {
			c.Nodes[0].Spec.Unschedulable = true
			c.Drain = Drain{Known: true, Now: time.Unix(100, 0), CordonedSince: map[string]time.Time{"n1": time.Unix(0, 0)}, Grace: time.Second}
		}, v4, "n1>tor"},
		{"Local without an endpoint", func(_ *Cluster, svc *corev1.Service) {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}, v4, "no node may advertise (no ready local endpoint (externalTrafficPolicy Local): n1)"},
		{"Local with an endpoint", func(c *Cluster, svc *corev1.Service) {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			node := "n1"
			c.EndpointSlices = []discoveryv1.EndpointSlice{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
				Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.1"}, NodeName: &node}}}}
		}, v4, "n1>tor"},
	} {
		c, s := base(), svc.DeepCopy()
		tc.change(&c, s)
		e := BGPEligibilityOf(c, s, tc.ip, func(string) bool { return true })
		got := e.WhyNone
		if len(e.Advertisers) > 0 {
			got = e.Advertisers[0].Node + ">" + e.Advertisers[0].Peers[0]
		}
		if got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
