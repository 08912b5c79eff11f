package e2e

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
)

// TestBGPWeightedECMP: a weightByEndpoints advertisement of an externalTrafficPolicy Local
// Service with ready endpoints 2:1 on node-a and node-b (none on node-c) makes FRR, doing
// eBGP multipath with the link-bandwidth community, install the kernel route with next-hop
// weights 2:1, and a client's connections through the router land on the nodes about 2:1.
func TestBGPWeightedECMP(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		routerNS, routerAddr := e.Routers[0].NS, e.Routers[0].IPv4.Addr()
		f := netlab.StartFRR(t, routerNS, frrConfig(routerAddr, e.Nodes))
		t.Cleanup(func() {
			if t.Failed() {
				out, _ := f.Vtysh("show bgp ipv4 unicast 203.0.113.80/32")
				t.Logf("FRR:\n%s\n%s", out, f.Log())
			}
		})
		all := []string{"node-a", "node-b", "node-c"}
		e.createObject(bgpPeer("frr", routerAddr, clusterASN, 64520))
		e.waitEstablished("frr", 30*time.Second, all...)

		ip := netip.MustParseAddr("203.0.113.80")
		prefix := netip.PrefixFrom(ip, 32)
		e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "weighted"}, Spec: v1alpha1.BGPAdvertisementSpec{
			IPAddressPools: []v1alpha1.Name{"weighted"}, WeightByEndpoints: true}})
		svc := e.createService("weighted", []netip.Prefix{prefix}, true, ip)
		ready := true
		endpoint := func(addr, node string) discoveryv1.Endpoint {
			return discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}
		}
		es := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: svc.Name + "-1", Namespace: svc.Namespace,
				Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{endpoint("10.244.0.5", "node-a"), endpoint("10.244.0.6", "node-a"), endpoint("10.244.1.5", "node-b")},
		}
		e.createObject(es)

		// node-c has no endpoint and withdraws; the other two are weighted by their endpoints.
		var weights map[netip.Addr]int
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("last seen next-hop weights: %v", weights)
			}
		})
		waitFor(t, "FRR installs 203.0.113.80/32 via node-a and node-b weighted 2:1", 20*time.Second, func() bool {
			weights = nextHopWeights(t, routerNS, prefix)
			a, b := weights[e.node("node-a").IPv4.Addr()], weights[e.node("node-b").IPv4.Addr()]
			return len(weights) == 2 && b > 0 && math.Abs(float64(a)/float64(b)-2) < 0.1
		})
		t.Logf("kernel next-hop weights in the router: %v", weights)

		// One endpoint more on node-b: 2:2, so equal weights.
		es.Endpoints = append(es.Endpoints, endpoint("10.244.1.6", "node-b"))
		must(t, e.c.Update(context.Background(), es))
		waitFor(t, "FRR weighs node-a and node-b 1:1", 20*time.Second, func() bool {
			weights = nextHopWeights(t, routerNS, prefix)
			a, b := weights[e.node("node-a").IPv4.Addr()], weights[e.node("node-b").IPv4.Addr()]
			return len(weights) == 2 && a > 0 && a == b
		})
		es.Endpoints = es.Endpoints[:3]
		must(t, e.c.Update(context.Background(), es))
		waitFor(t, "FRR weighs node-a and node-b 2:1 again", 20*time.Second, func() bool {
			weights = nextHopWeights(t, routerNS, prefix)
			a, b := weights[e.node("node-a").IPv4.Addr()], weights[e.node("node-b").IPv4.Addr()]
			return len(weights) == 2 && b > 0 && math.Abs(float64(a)/float64(b)-2) < 0.1
		})

		// The data plane: each node answers on the address (kube-proxy's part, played by a
		// listener on the node itself), and the router hashes flows by ports (policy 1), so one
		// client's connections spread over the weighted next hops.
		run(t, "ip", "netns", "exec", routerNS, "sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1")
		for _, name := range []string{"node-a", "node-b"} {
			ns := e.node(name).NS
			run(t, "ip", "-n", ns, "addr", "add", prefix.String(), "dev", "lo")
			stop, err := netlab.ServePod(ns, name, 8080)
			must(t, err)
			t.Cleanup(stop)
		}
		const connections = 3000
		client := netlab.HTTPClient(routerNS, 5*time.Second)
		// What is measured is where connections land: one the starved machine times out (make
		// test saw one of 3000 wait past 5 s with the route in place) is counted and left out,
		// a few of them tell nothing of the split, and more than 1 % fails the test.
		landed, failed := map[string]int{}, 0
		for range connections {
			node, err := landedOn(client, fmt.Sprintf("http://%s:8080/", ip))
			if err != nil {
				if failed++; failed > connections/100 {
					t.Fatalf("%d of %d connections failed, the last: %v", failed, connections, err)
				}
				t.Logf("a connection failed: %v", err)
				continue
			}
			landed[node]++
		}
		t.Logf("%d connections: node-a %d, node-b %d, ratio %.3f; %d failed", connections, landed["node-a"], landed["node-b"],
			float64(landed["node-a"])/float64(landed["node-b"]), failed)
		// Each node's count within 10 % of its 2:1 share (2000 and 1000). The hash spreads flows
		// like coin flips: node-b's standard deviation is about 26, so the band is nearly 4 of
		// them wide on each side and a correct split fails it about once in 10000 runs; an even
		// split (1500 each) is far outside it.
		for node, share := range map[string]float64{"node-a": 2.0 / 3, "node-b": 1.0 / 3} {
			if want := share * float64(connections-failed); math.Abs(float64(landed[node])-want) > 0.10*want {
				t.Fatalf("connections landed %v, want node-a:node-b within 10%% of 2:1", landed)
			}
		}
	})
}

// landedOn GETs url on a new connection and returns the node that answered (the first word).
func landedOn(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || len(strings.Fields(string(body))) == 0 {
		return "", fmt.Errorf("reading %s: %q, %v", url, body, err)
	}
	return strings.Fields(string(body))[0], nil
}

// nextHopWeights is netlab.NextHopWeights, failing the test when ip cannot tell.
func nextHopWeights(t testing.TB, ns string, prefix netip.Prefix) map[netip.Addr]int {
	t.Helper()
	w, err := netlab.NextHopWeights(ns, prefix)
	must(t, err)
	return w
}
