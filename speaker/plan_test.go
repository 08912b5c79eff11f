package speaker

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules/election"
)

var nodeNames = []string{"node-a", "node-b", "node-c"}

func world(svcs ...corev1.Service) World {
	w := World{Services: svcs}
	for _, n := range nodeNames {
		w.Nodes = append(w.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"zone": n}}})
	}
	w.Pools = []v1alpha1.IPAddressPool{{ObjectMeta: metav1.ObjectMeta{Name: "lab", Labels: map[string]string{"l2": "yes"}},
		Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"198.51.100.0/24", "2001:db8:1::/64"}}}}
	w.Advertisements = []v1alpha1.L2Advertisement{{ObjectMeta: metav1.ObjectMeta{Name: "all"}}}
	return w
}

func lbService(name, ip string) corev1.Service {
	s := corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	return s
}

func allAlive(string) bool { return true }

// owners runs MakePlan as every node would and returns who claims each address.
func owners(w World, alive func(string) bool) map[netip.Addr][]string {
	out := map[netip.Addr][]string{}
	for _, n := range nodeNames {
		for ip := range MakePlan(w, n, v1alpha1.DefaultLoadBalancerClass, alive).Mine {
			out[ip] = append(out[ip], n)
		}
	}
	return out
}

// TestExactlyOneOwner: every node computes the plan alone, and together they claim each address
// exactly once, the owner election names.
func TestExactlyOneOwner(t *testing.T) {
	var svcs []corev1.Service
	ip := netip.MustParseAddr("198.51.100.10")
	for i := 0; i < 30; i++ {
		svcs = append(svcs, lbService("s"+ip.String(), ip.String()))
		ip = ip.Next()
	}
	svcs = append(svcs, lbService("v6", "2001:db8:1::10"))
	got := owners(world(svcs...), allAlive)
	if len(got) != 31 {
		t.Fatalf("%d addresses claimed, want 31", len(got))
	}
	for ip, who := range got {
		want, _ := election.Owner(ip, nodeNames)
		if !slices.Equal(who, []string{want}) {
			t.Errorf("%v claimed by %v, want %s", ip, who, want)
		}
	}
}

func TestWhatIsNotAnnounced(t *testing.T) {
	other := "other.example/lb"
	classed := lbService("classed", "198.51.100.20")
	classed.Spec.LoadBalancerClass = &other
	cluster := lbService("clusterip", "198.51.100.21")
	cluster.Spec.Type = corev1.ServiceTypeClusterIP
	outside := lbService("outside", "203.0.113.9")
	w := world(classed, cluster, outside, lbService("hostname", ""))
	got := owners(w, allAlive)
	if len(got) != 0 {
		t.Fatalf("claimed %v, want nothing", got)
	}
	p := MakePlan(w, "node-a", v1alpha1.DefaultLoadBalancerClass, allAlive)
	if len(p.Problems) != 1 || !strings.Contains(p.Problems[0], "ns/outside: address 203.0.113.9 is in no IPAddressPool") {
		t.Fatalf("problems %q", p.Problems)
	}
}

func TestAdvertisementScoping(t *testing.T) {
	ip := netip.MustParseAddr("198.51.100.30")
	w := world(lbService("web", ip.String()))
	// No advertisement: nobody answers.
	w.Advertisements = nil
	if got := owners(w, allAlive); len(got) != 0 {
		t.Fatalf("claimed %v without an advertisement", got)
	}
	// Another pool's advertisement: nobody answers.
	w.Advertisements = []v1alpha1.L2Advertisement{{Spec: v1alpha1.L2AdvertisementSpec{IPAddressPools: []v1alpha1.Name{"other"}}}}
	if got := owners(w, allAlive); len(got) != 0 {
		t.Fatalf("claimed %v with another pool's advertisement", got)
	}
	// Selected by pool label, limited to node-b by nodeSelectors, on eth1 and eth0.
	w.Advertisements = []v1alpha1.L2Advertisement{{Spec: v1alpha1.L2AdvertisementSpec{
		IPAddressPoolSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"l2": "yes"}}},
		NodeSelectors:          []metav1.LabelSelector{{MatchLabels: map[string]string{"zone": "node-b"}}},
		Interfaces:             []v1alpha1.InterfaceName{"eth1", "eth0"},
	}}}
	p := MakePlan(w, "node-b", v1alpha1.DefaultLoadBalancerClass, allAlive)
	if c, ok := p.Mine[ip]; !ok || !slices.Equal(c.Interfaces, []string{"eth0", "eth1"}) || !slices.Equal(c.Services, []string{"ns/web"}) {
		t.Fatalf("node-b plan %+v", p.Mine)
	}
	// serviceSelectors that do not match the Service: nobody answers.
	w.Advertisements[0].Spec.ServiceSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"expose": "l2"}}}
	if got := owners(w, allAlive); len(got) != 0 {
		t.Fatalf("claimed %v although serviceSelectors do not match", got)
	}
}

func TestLocalPolicyAndLiveness(t *testing.T) {
	ip := netip.MustParseAddr("198.51.100.40")
	svc := lbService("local", ip.String())
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	w := world(svc)
	if got := owners(w, allAlive); len(got) != 0 {
		t.Fatalf("claimed %v with no endpoints at all", got)
	}
	node, notReady := "node-c", false
	other := "node-a"
	w.EndpointSlices = []discoveryv1.EndpointSlice{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "local-1", Labels: map[string]string{discoveryv1.LabelServiceName: "local"}},
		Endpoints:  []discoveryv1.Endpoint{{NodeName: &node}, {NodeName: &other, Conditions: discoveryv1.EndpointConditions{Ready: &notReady}}},
	}}
	if got := owners(w, allAlive); !slices.Equal(got[ip], []string{"node-c"}) {
		t.Fatalf("claimed by %v, want node-c (the only ready endpoint)", got[ip])
	}
	// node-c's speaker dies: nobody else may take a Local address.
	if got := owners(w, func(n string) bool { return n != "node-c" }); len(got) != 0 {
		t.Fatalf("claimed %v after the only endpoint node died", got)
	}
}

// TestIgnoreExcludeLabel: on a cluster whose every node carries the exclude label (a
// single-node or control-plane-only cluster), nothing is announced over L2 or BGP unless the
// speakers run with --ignore-exclude-lb-label; then the label changes nothing.
func TestIgnoreExcludeLabel(t *testing.T) {
	w := world(lbService("web", "198.51.100.30"))
	w.BGPPeers = []v1alpha1.BGPPeer{{ObjectMeta: metav1.ObjectMeta{Name: "tor"}, Spec: v1alpha1.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "198.51.100.1"}}}
	w.BGPAds = []v1alpha1.BGPAdvertisement{{ObjectMeta: metav1.ObjectMeta{Name: "all"}}}
	for i := range w.Nodes {
		w.Nodes[i].Labels[v1alpha1.LabelExcludeFromExternalLoadBalancers] = ""
		w.Nodes[i].Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100." + string(rune('1'+i)) + "1"}}
	}
	routed := func(w World) (n int) {
		for _, node := range nodeNames {
			n += len(MakePlan(w, node, v1alpha1.DefaultLoadBalancerClass, allAlive).Routed)
		}
		return n
	}
	if got := owners(w, allAlive); len(got) != 0 {
		t.Fatalf("excluded nodes claim %v", got)
	}
	if n := routed(w); n != 0 {
		t.Fatalf("excluded nodes advertise %d routes over BGP", n)
	}
	w.IgnoreExcludeLabel = true
	ip := netip.MustParseAddr("198.51.100.30")
	want, _ := election.Owner(ip, nodeNames)
	if got := owners(w, allAlive); !slices.Equal(got[ip], []string{want}) {
		t.Fatalf("with the label ignored, %v claimed by %v, want %s", ip, got[ip], want)
	}
	if n := routed(w); n != len(nodeNames) {
		t.Fatalf("with the label ignored, %d nodes advertise %v over BGP, want %d", n, ip, len(nodeNames))
	}
}

// TestIgnoreClassless: with --ignore-classless the speakers leave a Service without a class to
// another load balancer, over L2, and still answer for one of their class.
func TestIgnoreClassless(t *testing.T) {
	classed := lbService("classed", "198.51.100.41")
	classed.Spec.LoadBalancerClass = ptr.To(v1alpha1.DefaultLoadBalancerClass)
	w := world(lbService("classless", "198.51.100.40"), classed)
	w.IgnoreClassless = true
	got := owners(w, allAlive)
	if _, claimed := got[netip.MustParseAddr("198.51.100.40")]; claimed || len(got) != 1 {
		t.Fatalf("claimed %v, want only 198.51.100.41 (the classless Service is another load balancer's)", got)
	}
}
