package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

// TestBGPRouterIDsIPv6Only: three nodes whose Node objects have IPv6 InternalIPs only peer
// with bird over IPv6, each with a router ID of its own (node-a's from its
// portico.dev/bgp-router-id label, the others derived from their names), and bird installs
// the Service's route over the three of them. A label that is no dotted quad, and a label
// naming an older node's ID, are reported in the node's Speaker status while its session
// and route stay.
func TestBGPRouterIDsIPv6Only(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		ctx := context.Background()
		all := []string{"node-a", "node-b", "node-c"}
		for _, n := range e.Nodes {
			var node corev1.Node
			must(t, e.c.Get(ctx, clientKey(n.Name), &node))
			node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.IPv6.Addr().String()}}
			must(t, e.c.Status().Update(ctx, &node))
		}
		e.labelNode("node-a", v1alpha1.LabelBGPRouterID, "10.255.0.11")
		router := e.Routers[0]
		bird := startBird(t, router.NS, birdPeering(netip.MustParseAddr("10.255.0.1"), router.IPv6.Addr(), e.Nodes, routerASN, ""))
		e.createObject(bgpPeer("bird", router.IPv6.Addr(), routerASN, routerASN))
		e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "v6only"},
			Spec: v1alpha1.BGPAdvertisementSpec{IPAddressPools: []v1alpha1.Name{"v6only"}}})
		vip := netip.MustParseAddr("2001:db8:ff::10")
		e.createService("v6only", []netip.Prefix{netip.MustParsePrefix("2001:db8:ff::/120")}, false, vip)
		route := netip.PrefixFrom(vip, 128)

		neighborID := regexp.MustCompile(`Neighbor ID:\s+(\S+)`)
		neighborIDs := func() map[string]string {
			ids := map[string]string{}
			for _, n := range all {
				out, err := bird.Birdc("show", "protocols", "all", strings.ReplaceAll(n, "-", "_"))
				if err != nil {
					return nil
				}
				if m := neighborID.FindStringSubmatch(out); m != nil {
					ids[n] = m[1]
				}
			}
			return ids
		}
		var nodes corev1.NodeList
		must(t, e.c.List(ctx, &nodes))
		chosen := rules.RouterIDs(nodes.Items)
		want := map[string]string{}
		for _, n := range all {
			want[n] = chosen[n].ID.String()
		}
		if want["node-a"] != "10.255.0.11" || want["node-b"] == want["node-c"] {
			t.Fatalf("router IDs chosen: %v", chosen)
		}
		var seen map[string]string
		waitFor(t, "bird sees three router IDs, node-a's from its label", 40*time.Second, func() bool {
			seen = neighborIDs()
			return maps.Equal(seen, want)
		})
		t.Logf("router IDs at bird: %v", seen)
		e.expectRoute(router.NS, route, e.nodeIPs(true, all...), 30*time.Second)

		t.Run("a label that is no dotted quad", func(t *testing.T) {
			e.t = t
			e.labelNode("node-c", v1alpha1.LabelBGPRouterID, "rack-3")
			problem := fmt.Sprintf(`BGP router ID: node label portico.dev/bgp-router-id="rack-3" is not an IPv4 address in dotted-quad form (such as 10.255.0.11); using %s (derived from the node's name) instead`, want["node-c"])
			waitFor(t, "node-c's Speaker status names the bad label", 20*time.Second, func() bool {
				return slices.Contains(e.speakerProblems("node-c"), problem)
			})
			e.waitEstablished("bird", 30*time.Second, all...)
			e.expectRoute(router.NS, route, e.nodeIPs(true, all...), 15*time.Second)
		})

		t.Run("a label naming an older node's ID", func(t *testing.T) {
			e.t = t
			e.labelNode("node-b", v1alpha1.LabelBGPRouterID, "10.255.0.11")
			problem := fmt.Sprintf(`BGP router ID: node label portico.dev/bgp-router-id=10.255.0.11 is node-a's router ID already; using %s (derived from the node's name) instead`, want["node-b"])
			waitFor(t, "node-b's Speaker status names the taken ID", 20*time.Second, func() bool {
				return slices.Contains(e.speakerProblems("node-b"), problem)
			})
			e.waitEstablished("bird", 30*time.Second, all...)
			if ids := neighborIDs(); !maps.Equal(ids, want) {
				t.Fatalf("router IDs at bird %v, want %v", ids, want)
			}
			e.expectRoute(router.NS, route, e.nodeIPs(true, all...), 15*time.Second)
		})
	})
}
