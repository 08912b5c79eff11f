package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
)

// vrfBirdConfig is bird (AS 64512) at local, peering over eBGP with one node at node.
func vrfBirdConfig(local, node netip.Addr) string {
	return fmt.Sprintf(`log stderr all;
router id %s;
protocol device { scan time 10; }
protocol kernel { ipv4 { import none; export all; }; }
protocol bgp red_a {
  local %s as %d; neighbor %s as %d; direct;
  hold time 9; keepalive time 3; connect retry time 1; error wait time 1, 10;
  ipv4 { import all; export none; };
}
`, local, local, routerASN, node, clusterASN)
}

// TestBGPThroughVRF peers node-a with bird over a link that belongs to a Linux VRF on the node
// (vrf-red, table 10): the router is reachable only through that VRF. The BGPPeer with vrf
// comes up and its route arrives via the VRF interface's address; a BGPPeer without vrf to the
// same address never comes up, since the default VRF has no route there. node-b, also selected,
// has no vrf-red: it opens no session and says why, until the device appears.
func TestBGPThroughVRF(t *testing.T) {
	if os.Getenv(labEnv) == "" {
		netlab.RequireVRF(t)
	}
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		r1 := e.Routers[0]
		nodeA := e.node("node-a").NS
		routerAddr, vrfAddr := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
		run(t, "ip", "-n", nodeA, "link", "add", "vrf-red", "type", "vrf", "table", "10")
		run(t, "ip", "-n", nodeA, "link", "set", "vrf-red", "up")
		run(t, "ip", "-n", nodeA, "link", "add", "red0", "type", "veth", "peer", "name", "to-a", "netns", r1.NS)
		run(t, "ip", "-n", nodeA, "link", "set", "red0", "master", "vrf-red")
		run(t, "ip", "-n", nodeA, "addr", "add", vrfAddr.String()+"/30", "dev", "red0")
		run(t, "ip", "-n", nodeA, "link", "set", "red0", "up")
		run(t, "ip", "-n", r1.NS, "addr", "add", routerAddr.String()+"/30", "dev", "to-a")
		run(t, "ip", "-n", r1.NS, "link", "set", "to-a", "up")
		// The premise: only the VRF routes to the router.
		if out, err := exec.Command("ip", "-n", nodeA, "route", "get", routerAddr.String()).CombinedOutput(); err == nil {
			t.Fatalf("node-a's default VRF routes to %v, so the test would prove nothing:\n%s", routerAddr, out)
		}
		run(t, "ip", "-n", nodeA, "route", "get", routerAddr.String(), "vrf", "vrf-red")
		b := startBird(t, r1.NS, vrfBirdConfig(routerAddr, vrfAddr))

		red := bgpPeer("red", routerAddr, clusterASN, routerASN)
		red.Spec.VRF = "vrf-red"
		red.Spec.NodeSelectors = []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/hostname", Operator: metav1.LabelSelectorOpIn, Values: []string{"node-a", "node-b"}}}}}
		plain := bgpPeer("plain", routerAddr, clusterASN, routerASN)
		plain.Spec.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": "node-a"}}}
		e.createObject(red)
		e.createObject(plain)
		e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "red"}, Spec: v1alpha1.BGPAdvertisementSpec{
			IPAddressPools: []v1alpha1.Name{"red"}}})
		ip := netip.MustParseAddr("203.0.113.50")
		e.createService("red", []netip.Prefix{netip.MustParsePrefix("203.0.113.48/29")}, false, ip)

		e.waitEstablished("red", 30*time.Second, "node-a")
		e.expectRoute(r1.NS, netip.PrefixFrom(ip, 32), []netip.Addr{vrfAddr}, 15*time.Second)
		out, err := b.Birdc("show", "protocols")
		must(t, err)
		if strings.Count(out, "Established") != 1 {
			t.Fatalf("bird should hold exactly one session (node-a's through vrf-red):\n%s", out)
		}
		// The same router without vrf: by the time the VRF session carried its route, the plain
		// one (created with it, same timers) had tried several times; it never reaches the router.
		if s := e.sessions("node-a")["plain"]; s.State == "Established" {
			t.Fatalf("the session without vrf came up: %+v", s)
		} else {
			t.Logf("node-a's session without vrf: %s, %q", s.State, s.Message)
		}

		want := "BGPPeer red: vrf vrf-red: this node has no VRF device of that name (ip link add vrf-red type vrf table N), so no session"
		waitFor(t, "node-b reports its missing vrf-red", 15*time.Second, func() bool {
			return slices.Contains(e.speakerProblems("node-b"), want)
		})
		if _, ok := e.sessions("node-b")["red"]; ok {
			t.Fatal("node-b opened a session through a VRF it does not have")
		}
		run(t, "ip", "-n", e.node("node-b").NS, "link", "add", "vrf-red", "type", "vrf", "table", "10")
		waitFor(t, "node-b sees vrf-red appear and opens the session", 45*time.Second, func() bool {
			_, ok := e.sessions("node-b")["red"]
			return ok && !slices.Contains(e.speakerProblems("node-b"), want)
		})
	})
}

// TestBGPVRFDeviceMissing runs where the kernel has no VRF devices too: a BGPPeer naming a VRF
// the nodes lack opens no session on them, and each says why in its Speaker status, while a
// BGPPeer without vrf on the same nodes comes up.
func TestBGPVRFDeviceMissing(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		r1 := e.Routers[0]
		startBird(t, r1.NS, birdConfig(r1.IPv4.Addr(), e.Nodes, clusterASN, ""))
		onA := []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": "node-a"}}}
		red := bgpPeer("red", r1.IPv4.Addr(), clusterASN, routerASN)
		red.Spec.VRF, red.Spec.NodeSelectors = "vrf-red", onA
		tor := bgpPeer("tor", r1.IPv4.Addr(), clusterASN, routerASN)
		tor.Spec.NodeSelectors = onA
		e.createObject(red)
		e.createObject(tor)
		e.waitEstablished("tor", 30*time.Second, "node-a")
		want := "BGPPeer red: vrf vrf-red: this node has no VRF device of that name (ip link add vrf-red type vrf table N), so no session"
		waitFor(t, "node-a reports its missing vrf-red", 15*time.Second, func() bool {
			return slices.Contains(e.speakerProblems("node-a"), want)
		})
		if s, ok := e.sessions("node-a")["red"]; ok {
			t.Fatalf("node-a opened a session through a VRF it does not have: %+v", s)
		}
	})
}
