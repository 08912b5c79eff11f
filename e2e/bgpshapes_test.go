package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/plugin"
	"github.com/portico-lb/portico/plugin/routes"
)

// rackLabel holds each node's rack AS in TestBGPPeeringShapes.
const rackLabel = "topology.portico.io/asn"

// leafConfig is FRR (AS 64520) at addr peering with each node in its rack's AS.
func leafConfig(addr netip.Addr, nodeASN map[netip.Addr]uint32) string {
	var b strings.Builder
	fmt.Fprintf(&b, "frr defaults traditional\nhostname leaf\nlog stdout informational\nrouter bgp 64520\n bgp router-id %s\n no bgp ebgp-requires-policy\n bgp bestpath as-path multipath-relax\n", addr)
	for _, a := range slices.SortedFunc(func(yield func(netip.Addr) bool) {
		for a := range nodeASN {
			yield(a)
		}
	}, netip.Addr.Compare) {
		fmt.Fprintf(&b, " neighbor %s remote-as %d\n neighbor %s timers 3 9\n neighbor %s timers connect 1\n", a, nodeASN[a], a, a)
	}
	b.WriteString(" address-family ipv4 unicast\n  maximum-paths 8\n exit-address-family\n")
	return b.String()
}

// unnumberedConfig is FRR (AS 64530) peering unnumbered over its interface ifname, with
// whatever AS the node has (remote-as external).
func unnumberedConfig(routerID netip.Addr, ifname string) string {
	return fmt.Sprintf(`frr defaults traditional
hostname unnumbered
log stdout informational
router bgp 64530
 bgp router-id %s
 no bgp ebgp-requires-policy
 neighbor %s interface remote-as external
 neighbor %s timers 3 9
 neighbor %s timers connect 1
 address-family ipv6 unicast
  neighbor %s activate
 exit-address-family
`, routerID, ifname, ifname, ifname, ifname)
}

// labelNode sets (or, with value "", removes) a label on a Node.
func (e *l2Env) labelNode(name, key, value string) {
	e.t.Helper()
	var n corev1.Node
	must(e.t, e.c.Get(context.Background(), clientKey(name), &n))
	if value == "" {
		delete(n.Labels, key)
	} else {
		n.Labels[key] = value
	}
	must(e.t, e.c.Update(context.Background(), &n))
}

// speakerProblems is node's Speaker status.configErrors.
func (e *l2Env) speakerProblems(node string) []string {
	var sp v1alpha1.Speaker
	if err := e.c.Get(context.Background(), clientKey(node), &sp); err != nil {
		return nil
	}
	return sp.Status.ConfigErrors
}

// TestBGPPeeringShapes runs the peering shapes of leaf-spine fabrics against real routers:
//   - one BGPPeer "leaf" for every rack: each node's AS from its label, the router's AS learned
//     (dynamicASN external), against FRR that expects each node in its rack's AS; a node whose
//     label is no AS number opens no session, says why, and keeps its other session;
//   - "spine": iBGP by dynamicASN internal, against bird, with another local AS than "leaf" on
//     the same nodes (a per-peer myASN), local-pref arriving; switched to dynamicASN external,
//     the sessions are refused (bird is in the nodes' own AS) with the reason, and come back;
//   - "unnumbered": node-a peers with a second FRR over a point-to-point link by interface
//     name, IPv6 link-local addresses only, and its IPv6 route arrives via node-a's link-local.
func TestBGPPeeringShapes(t *testing.T) {
	inBGPLab(t, 3, func(t *testing.T, e *l2Env) {
		all := []string{"node-a", "node-b", "node-c"}
		leaf, spine, unnum := e.Routers[0], e.Routers[1], e.Routers[2]
		rackASN := map[string]uint32{"node-a": 64601, "node-b": 64602, "node-c": 64603}
		byAddr := map[netip.Addr]uint32{}
		for _, n := range e.Nodes {
			byAddr[n.IPv4.Addr()] = rackASN[n.Name]
			value := fmt.Sprint(rackASN[n.Name])
			if n.Name == "node-c" {
				value = "rack-3" // a label that is no AS number
			}
			e.labelNode(n.Name, rackLabel, value)
		}
		frr := netlab.StartFRR(t, leaf.NS, leafConfig(leaf.IPv4.Addr(), byAddr))
		bird := startBird(t, spine.NS, birdConfig(spine.IPv4.Addr(), e.Nodes, routerASN, ""))
		defer func() {
			if t.Failed() {
				out, _ := frr.Vtysh("show bgp summary")
				t.Logf("leaf FRR:\n%s", out)
			}
		}()

		byLabel := bgpPeer("leaf", leaf.IPv4.Addr(), 0, 0)
		byLabel.Spec.MyASNFromNodeLabel, byLabel.Spec.DynamicASN = rackLabel, v1alpha1.DynamicASNExternal
		e.createObject(byLabel)
		internal := bgpPeer("spine", spine.IPv4.Addr(), routerASN, 0)
		internal.Spec.DynamicASN = v1alpha1.DynamicASNInternal
		e.createObject(internal)
		pref := uint32(300)
		e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "fabric"}, Spec: v1alpha1.BGPAdvertisementSpec{
			IPAddressPools: []v1alpha1.Name{"fabric"}, Peers: []v1alpha1.Name{"leaf", "spine"}, LocalPref: &pref,
			Communities: []v1alpha1.Community{"65000:100", "large:64512:1:2"}}})
		vip := netip.MustParseAddr("203.0.113.10")
		e.createService("fabric", []netip.Prefix{netip.MustParsePrefix("203.0.113.0/28")}, false, vip)
		route := netip.PrefixFrom(vip, 32)

		t.Run("rack ASNs from node labels, the router's AS learned", func(t *testing.T) {
			e.t = t
			e.expectRoute(leaf.NS, route, e.nodeIPs(false, "node-a", "node-b"), 30*time.Second)
			want := `BGPPeer leaf: myASNFromNodeLabel: node label topology.portico.io/asn="rack-3" is not an AS number (1 to 4294967295), so no session`
			waitFor(t, "node-c's Speaker status says why it has no leaf session", 10*time.Second, func() bool {
				return slices.Contains(e.speakerProblems("node-c"), want)
			})
			if _, ok := e.sessions("node-c")["leaf"]; ok {
				t.Fatal("node-c opened a leaf session without an AS number")
			}
			// Nothing else lost: node-c's spine session and route stay.
			e.waitEstablished("spine", 30*time.Second, all...)
			e.expectRoute(spine.NS, route, e.nodeIPs(false, all...), 15*time.Second)

			e.labelNode("node-c", rackLabel, "64603")
			e.expectRoute(leaf.NS, route, e.nodeIPs(false, all...), 30*time.Second)
			out, err := frr.Vtysh("show bgp neighbors " + e.node("node-c").IPv4.Addr().String())
			must(t, err)
			if !strings.Contains(out, "remote AS 64603") || !strings.Contains(out, "BGP state = Established") {
				t.Fatalf("FRR's session with node-c, want Established with AS 64603:\n%s", out)
			}
		})

		t.Run("dynamicASN internal: iBGP with another local AS on the same nodes", func(t *testing.T) {
			e.t = t
			out, err := bird.Birdc("show", "route", route.String(), "all")
			must(t, err)
			if !strings.Contains(out, "BGP.local_pref: 300") {
				t.Fatalf("bird's iBGP route for %v, want local-pref 300:\n%s", route, out)
			}
		})

		t.Run("dynamicASN external refuses a router in our own AS", func(t *testing.T) {
			e.t = t
			ctx := context.Background()
			setDynamic := func(d v1alpha1.DynamicASN) {
				var p v1alpha1.BGPPeer
				must(t, e.c.Get(ctx, clientKey("spine"), &p))
				p.Spec.DynamicASN = d
				must(t, e.c.Update(ctx, &p))
			}
			setDynamic(v1alpha1.DynamicASNExternal) // bird is in 64512, the spine peer's myASN
			want := "refused: the router is in AS 64512, this node's own, and the BGPPeer's dynamicASN is external"
			waitFor(t, "node-b's spine session refused with the reason", 30*time.Second, func() bool {
				return e.sessions("node-b")["spine"].Message == want
			})
			e.expectRoute(spine.NS, route, nil, 15*time.Second)
			setDynamic(v1alpha1.DynamicASNInternal)
			e.waitEstablished("spine", 30*time.Second, all...)
			e.expectRoute(spine.NS, route, e.nodeIPs(false, all...), 15*time.Second)
		})

		t.Run("unnumbered over node-a's uplink", func(t *testing.T) {
			e.t = t
			nodeLL, routerLL := netip.MustParseAddr("fe80::a"), netip.MustParseAddr("fe80::1")
			netlab.PointToPoint(t, e.node("node-a").NS, "uplink0", nodeLL, unnum.NS, "down-a", routerLL)
			frr2 := netlab.StartFRR(t, unnum.NS, unnumberedConfig(unnum.IPv4.Addr(), "down-a"))
			defer func() {
				if t.Failed() {
					out, _ := frr2.Vtysh("show bgp neighbors down-a")
					t.Logf("unnumbered FRR:\n%s", out)
				}
			}()
			p := bgpPeer("unnumbered", netip.Addr{}, 64701, 0)
			p.Spec.PeerAddress, p.Spec.Interface, p.Spec.DynamicASN = "", "uplink0", v1alpha1.DynamicASNExternal
			p.Spec.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": "node-a"}}}
			e.createObject(p)
			e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "unnumbered"}, Spec: v1alpha1.BGPAdvertisementSpec{
				IPAddressPools: []v1alpha1.Name{"unnumbered"}, Peers: []v1alpha1.Name{"unnumbered"}}})
			v6 := netip.MustParseAddr("2001:db8:ff::10")
			e.createService("unnumbered", []netip.Prefix{netip.MustParsePrefix("2001:db8:ff::/120")}, false, v6)
			e.waitEstablished("unnumbered", 30*time.Second, "node-a")
			e.expectRoute(unnum.NS, netip.PrefixFrom(v6, 128), []netip.Addr{nodeLL}, 15*time.Second)
			out, err := frr2.Vtysh("show bgp neighbors down-a")
			must(t, err)
			if !strings.Contains(out, "remote AS 64701") {
				t.Fatalf("FRR's unnumbered session, want node-a in AS 64701:\n%s", out)
			}

			// Still inside the unnumbered subtest, whose objects go when it ends. What the speakers
			// report, as kubectl portico routes prints it: per node and peer the
			// AS numbers in use (a label's, a learned one), the router's address (the link-local
			// one found on the interface) and each route's local-pref and communities, each
			// route to a peer listed by the first node sending it there (node-b's and node-c's
			// routes are node-a's to list).
			t.Run("kubectl portico routes", func(t *testing.T) {
				e.t = t
				want := [][]string{
					{"node-a", "leaf", "198.51.100.3", "64601", "64520", "203.0.113.10/32", "-", "-", "65000:100,large:64512:1:2"},
					{"node-c", "leaf", "198.51.100.3", "64603", "64520", "(none", "listed", "by", "this", "node)"},
					{"node-a", "spine", "198.51.100.4", "64512", "64512", "203.0.113.10/32", "-", "300", "65000:100,large:64512:1:2"},
					{"node-b", "spine", "198.51.100.4", "64512", "64512", "(none", "listed", "by", "this", "node)"},
					{"node-a", "unnumbered", "fe80::1%uplink0", "64701", "64530", "2001:db8:ff::10/128", "-", "-", "-"},
				}
				var out bytes.Buffer
				defer func() {
					if t.Failed() {
						t.Logf("kubectl portico routes printed:\n%s", out.String())
					}
				}()
				waitFor(t, "kubectl portico routes shows every node's peers and routes", 30*time.Second, func() bool {
					out.Reset()
					must(t, routes.Run(context.Background(), &plugin.Env{Client: e.c, Out: &out}, ""))
					for _, w := range want {
						if !slices.ContainsFunc(strings.Split(out.String(), "\n"), func(line string) bool {
							return slices.Equal(strings.Fields(line)[:min(len(w), len(strings.Fields(line)))], w)
						}) {
							return false
						}
					}
					return true
				})
				t.Logf("kubectl portico routes:\n%s", out.String())
				out.Reset()
				must(t, routes.Run(context.Background(), &plugin.Env{Client: e.c, Out: &out}, "node-b"))
				if strings.Contains(out.String(), "node-a") || !strings.Contains(out.String(), "node-b") {
					t.Fatalf("routes --node node-b:\n%s", out.String())
				}
			})
		})

	})
}
