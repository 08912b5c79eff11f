package speaker

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/plan/plantest"
)

// macs returns n distinct MACs, sorted as the prober reports them.
func macs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff)
	}
	return out
}

// TestSelfCheckMACsAreCapped: a stranger answering a probe with many MACs gets the lowest
// MaxSelfCheckMACs listed and the rest counted; an ordinary answer is listed whole.
func TestSelfCheckMACsAreCapped(t *testing.T) {
	flooded, normal := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8")
	now := metav1.NewTime(time.Unix(1000, 0))
	r := selfCheckResults(map[netip.Addr][]string{flooded: macs(5000), normal: macs(1)}, nil, now)
	if len(r.checks) != 2 || r.omitted != 0 {
		t.Fatalf("%d entries, %d omitted; want 2 and 0", len(r.checks), r.omitted)
	}
	got := r.checks[0]
	if got.IP != flooded.String() || len(got.MACs) != v1alpha1.MaxSelfCheckMACs || got.OmittedMACs != 5000-v1alpha1.MaxSelfCheckMACs {
		t.Errorf("flooded entry: %s lists %d MACs, omits %d; want %d listed, %d omitted",
			got.IP, len(got.MACs), got.OmittedMACs, v1alpha1.MaxSelfCheckMACs, 5000-v1alpha1.MaxSelfCheckMACs)
	}
	if got.MACs[0] != "02:00:00:00:00:00" || got.MACs[3] != "02:00:00:00:00:03" {
		t.Errorf("flooded entry lists %v, want the four lowest", got.MACs)
	}
	if n := r.checks[1]; len(n.MACs) != 1 || n.OmittedMACs != 0 {
		t.Errorf("ordinary entry: %v, %d omitted", n.MACs, n.OmittedMACs)
	}

	// The same flood in the next round keeps its time: nothing to write.
	later := metav1.NewTime(now.Add(10 * time.Second))
	again := selfCheckResults(map[netip.Addr][]string{flooded: macs(5000), normal: macs(1)}, r.checks, later)
	if !again.checks[0].Time.Equal(&now) {
		t.Errorf("an unchanged truncated answer got a new time %v", again.checks[0].Time)
	}
	// One more MAC beyond the listed ones is a change.
	more := selfCheckResults(map[netip.Addr][]string{flooded: macs(5001), normal: macs(1)}, r.checks, later)
	if !more.checks[0].Time.Equal(&later) {
		t.Errorf("a change in the omitted count kept the old time %v", more.checks[0].Time)
	}
}

// TestSelfChecksAreCapped: over MaxSelfChecks results, the problems (no answer, several) are
// all kept, the clean answers fill the rest in address order, and the others are counted.
func TestSelfChecksAreCapped(t *testing.T) {
	results := map[netip.Addr][]string{}
	ip := netip.MustParseAddr("2001:db8::1")
	for range v1alpha1.MaxSelfChecks + 100 {
		results[ip] = macs(1)
		ip = ip.Next()
	}
	// Problems at the end of the address order, which a plain cut would drop.
	last := ip.Prev()
	results[last] = nil
	results[last.Prev()] = macs(2)
	r := selfCheckResults(results, nil, metav1.Now())
	if len(r.checks) != v1alpha1.MaxSelfChecks || r.omitted != 100 {
		t.Fatalf("%d entries, %d omitted; want %d and 100", len(r.checks), r.omitted, v1alpha1.MaxSelfChecks)
	}
	kept := map[string]bool{}
	for _, c := range r.checks {
		kept[c.IP] = true
	}
	for _, want := range []netip.Addr{last, last.Prev(), netip.MustParseAddr("2001:db8::1")} {
		if !kept[want.String()] {
			t.Errorf("%s left out", want)
		}
	}
	for i := 1; i < len(r.checks); i++ {
		if r.checks[i-1].IP >= r.checks[i].IP {
			t.Fatalf("entries not sorted by IP: %s before %s", r.checks[i-1].IP, r.checks[i].IP)
		}
	}
}

// TestOneProberPerAddress: of three nodes, exactly one probes each address, never its owner,
// also when the owner is the only eligible node (externalTrafficPolicy Local with one
// endpoint): a new address costs one self-check entry, not one per other node.
func TestOneProberPerAddress(t *testing.T) {
	var svcs []corev1.Service
	ip := netip.MustParseAddr("198.51.100.10")
	for range 30 {
		svcs = append(svcs, plantest.LBService("s"+ip.String(), ip.String()))
		ip = ip.Next()
	}
	local := plantest.LBService("local", "198.51.100.99")
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	node, ready := "node-b", true
	w := plantest.World(append(svcs, local)...)
	w.EndpointSlices = []discoveryv1.EndpointSlice{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "local-x", Labels: map[string]string{discoveryv1.LabelServiceName: "local"}},
		Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.1"}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}}
	probers := map[netip.Addr][]string{}
	for _, n := range plantest.NodeNames {
		for _, ip := range selfCheckAddrs(w, n, v1alpha1.DefaultLoadBalancerClass, plantest.AllAlive, plantest.NodeNames) {
			probers[ip] = append(probers[ip], n)
		}
	}
	owned := plantest.Owners(w, plantest.AllAlive)
	if len(probers) != len(owned) || len(owned) != 31 {
		t.Fatalf("%d addresses probed, %d owned; want 31 each", len(probers), len(owned))
	}
	for ip, who := range probers {
		if len(who) != 1 || who[0] == owned[ip][0] {
			t.Errorf("%v probed by %v, owned by %v: want one prober, not the owner", ip, who, owned[ip])
		}
	}
}
