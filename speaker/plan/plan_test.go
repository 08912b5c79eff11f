package plan_test

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
	"github.com/portico-lb/portico/speaker/plan"
	"github.com/portico-lb/portico/speaker/plan/plantest"
)

// TestExactlyOneOwner: every node computes the plan alone, and together they claim each address
// exactly once, the owner election names.
func TestExactlyOneOwner(t *testing.T) {
	var svcs []corev1.Service
	ip := netip.MustParseAddr("198.51.100.10")
	for i := 0; i < 30; i++ {
		svcs = append(svcs, plantest.LBService("s"+ip.String(), ip.String()))
		ip = ip.Next()
	}
	svcs = append(svcs, plantest.LBService("v6", "2001:db8:1::10"))
	got := plantest.Owners(plantest.World(svcs...), plantest.AllAlive)
	if len(got) != 31 {
		t.Fatalf("%d addresses claimed, want 31", len(got))
	}
	for ip, who := range got {
		want, _ := election.Owner(ip, plantest.NodeNames)
		if !slices.Equal(who, []string{want}) {
			t.Errorf("%v claimed by %v, want %s", ip, who, want)
		}
	}
}

func TestWhatIsNotAnnounced(t *testing.T) {
	other := "other.example/lb"
	classed := plantest.LBService("classed", "198.51.100.20")
	classed.Spec.LoadBalancerClass = &other
	cluster := plantest.LBService("clusterip", "198.51.100.21")
	cluster.Spec.Type = corev1.ServiceTypeClusterIP
	outside := plantest.LBService("outside", "203.0.113.9")
	w := plantest.World(classed, cluster, outside, plantest.LBService("hostname", ""))
	got := plantest.Owners(w, plantest.AllAlive)
	if len(got) != 0 {
		t.Fatalf("claimed %v, want nothing", got)
	}
	p := plan.Make(w, "node-a", v1alpha1.DefaultLoadBalancerClass, plantest.AllAlive)
	if len(p.Problems) != 1 || !strings.Contains(p.Problems[0], "ns/outside: address 203.0.113.9 is in no IPAddressPool") {
		t.Fatalf("problems %q", p.Problems)
	}
}

func TestAdvertisementScoping(t *testing.T) {
	ip := netip.MustParseAddr("198.51.100.30")
	w := plantest.World(plantest.LBService("web", ip.String()))
	// No advertisement: nobody answers.
	w.Advertisements = nil
	if got := plantest.Owners(w, plantest.AllAlive); len(got) != 0 {
		t.Fatalf("claimed %v without an advertisement", got)
	}
	// Another pool's advertisement: nobody answers.
	w.Advertisements = []v1alpha1.L2Advertisement{{Spec: v1alpha1.L2AdvertisementSpec{IPAddressPools: []v1alpha1.Name{"other"}}}}
	if got := plantest.Owners(w, plantest.AllAlive); len(got) != 0 {
		t.Fatalf("claimed %v with another pool's advertisement", got)
	}
	// Selected by pool label, limited to node-b by nodeSelectors, on eth1 and eth0.
	w.Advertisements = []v1alpha1.L2Advertisement{{Spec: v1alpha1.L2AdvertisementSpec{
		IPAddressPoolSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"l2": "yes"}}},
		NodeSelectors:          []metav1.LabelSelector{{MatchLabels: map[string]string{"zone": "node-b"}}},
		Interfaces:             []v1alpha1.InterfaceName{"eth1", "eth0"},
	}}}
	p := plan.Make(w, "node-b", v1alpha1.DefaultLoadBalancerClass, plantest.AllAlive)
	if c, ok := p.Mine[ip]; !ok || !slices.Equal(c.Interfaces, []string{"eth0", "eth1"}) || !slices.Equal(c.Services, []string{"ns/web"}) {
		t.Fatalf("node-b plan %+v", p.Mine)
	}
	// serviceSelectors that do not match the Service: nobody answers.
	w.Advertisements[0].Spec.ServiceSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"expose": "l2"}}}
	if got := plantest.Owners(w, plantest.AllAlive); len(got) != 0 {
		t.Fatalf("claimed %v although serviceSelectors do not match", got)
	}
}

func TestLocalPolicyAndLiveness(t *testing.T) {
	ip := netip.MustParseAddr("198.51.100.40")
	svc := plantest.LBService("local", ip.String())
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	w := plantest.World(svc)
	if got := plantest.Owners(w, plantest.AllAlive); len(got) != 0 {
		t.Fatalf("claimed %v with no endpoints at all", got)
	}
	node, notReady := "node-c", false
	other := "node-a"
	w.EndpointSlices = []discoveryv1.EndpointSlice{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "local-1", Labels: map[string]string{discoveryv1.LabelServiceName: "local"}},
		Endpoints:  []discoveryv1.Endpoint{{NodeName: &node}, {NodeName: &other, Conditions: discoveryv1.EndpointConditions{Ready: &notReady}}},
	}}
	if got := plantest.Owners(w, plantest.AllAlive); !slices.Equal(got[ip], []string{"node-c"}) {
		t.Fatalf("claimed by %v, want node-c (the only ready endpoint)", got[ip])
	}
	// node-c's speaker dies: nobody else may take a Local address.
	if got := plantest.Owners(w, func(n string) bool { return n != "node-c" }); len(got) != 0 {
		t.Fatalf("claimed %v after the only endpoint node died", got)
	}
}

// TestIgnoreExcludeLabel: on a cluster whose every node carries the exclude label (a
// single-node or control-plane-only cluster), nothing is announced over L2 or BGP unless the
// speakers run with --ignore-exclude-lb-label; then the label changes nothing.
func TestIgnoreExcludeLabel(t *testing.T) {
	w := plantest.World(plantest.LBService("web", "198.51.100.30"))
	w.BGPPeers = []v1alpha1.BGPPeer{{ObjectMeta: metav1.ObjectMeta{Name: "tor"}, Spec: v1alpha1.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "198.51.100.1"}}}
	w.BGPAds = []v1alpha1.BGPAdvertisement{{ObjectMeta: metav1.ObjectMeta{Name: "all"}}}
	for i := range w.Nodes {
		w.Nodes[i].Labels[v1alpha1.LabelExcludeFromExternalLoadBalancers] = ""
		w.Nodes[i].Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100." + string(rune('1'+i)) + "1"}}
	}
	routed := func(w plan.World) (n int) {
		for _, node := range plantest.NodeNames {
			n += len(plan.Make(w, node, v1alpha1.DefaultLoadBalancerClass, plantest.AllAlive).Routed)
		}
		return n
	}
	if got := plantest.Owners(w, plantest.AllAlive); len(got) != 0 {
		t.Fatalf("excluded nodes claim %v", got)
	}
	if n := routed(w); n != 0 {
		t.Fatalf("excluded nodes advertise %d routes over BGP", n)
	}
	w.IgnoreExcludeLabel = true
	ip := netip.MustParseAddr("198.51.100.30")
	want, _ := election.Owner(ip, plantest.NodeNames)
	if got := plantest.Owners(w, plantest.AllAlive); !slices.Equal(got[ip], []string{want}) {
		t.Fatalf("with the label ignored, %v claimed by %v, want %s", ip, got[ip], want)
	}
	if n := routed(w); n != len(plantest.NodeNames) {
		t.Fatalf("with the label ignored, %d nodes advertise %v over BGP, want %d", n, ip, len(plantest.NodeNames))
	}
}

// TestIgnoreClassless: with --ignore-classless the speakers leave a Service without a class to
// another load balancer, over L2, and still answer for one of their class.
func TestIgnoreClassless(t *testing.T) {
	classed := plantest.LBService("classed", "198.51.100.41")
	classed.Spec.LoadBalancerClass = ptr.To(v1alpha1.DefaultLoadBalancerClass)
	w := plantest.World(plantest.LBService("classless", "198.51.100.40"), classed)
	w.IgnoreClassless = true
	got := plantest.Owners(w, plantest.AllAlive)
	if _, claimed := got[netip.MustParseAddr("198.51.100.40")]; claimed || len(got) != 1 {
		t.Fatalf("claimed %v, want only 198.51.100.41 (the classless Service is another load balancer's)", got)
	}
}
