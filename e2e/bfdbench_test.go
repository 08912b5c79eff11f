package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
)

// BenchmarkBFDFailover measures the time from a node's failure to its route leaving the
// router's kernel table, with BFD (100 ms × 3 both ways) and without (BGP hold time 9 s), for
// two failures: the node's link cut at the bridge, and its speaker frozen with SIGSTOP; against
// bird 2 and against FRR 8.4 (bgpd and bfdd). Only node-a peers, so its failure deletes the
// route. It logs a Markdown table; it ignores b.N.
func BenchmarkBFDFailover(b *testing.B) {
	runs := envSize(b, "PORTICO_BENCH_BFD_RUNS", 5, 1)
	inBGPLab(b, 1, func(b *testing.B, e *l2Env) {
		router := e.Routers[0]
		only := e.Nodes[:1]
		e.createBFDProfile("fast", 100, 3)
		peer := bgpPeer("tor", router.IPv4.Addr(), clusterASN, routerASN)
		peer.Spec.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": "node-a"}}}
		e.createObject(peer)
		e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "bench"},
			Spec: v1alpha1.BGPAdvertisementSpec{IPAddressPools: []v1alpha1.Name{"bench"}}})
		vip := netip.MustParseAddr("203.0.113.20")
		e.createService("bench", []netip.Prefix{netip.MustParsePrefix("203.0.113.16/28")}, false, vip)
		route := netip.PrefixFrom(vip, 32)

		var rep strings.Builder
		fmt.Fprintf(&rep, "Measured %s on %d CPUs (shared), %d runs each: node failure → route gone from the router's kernel table (polled every 10 ms).\n\n",
			time.Now().UTC().Format("2006-01-02"), runtimeCPUs(), runs)
		rep.WriteString("| router | failure | BFD | median | min | max |\n|---|---|---|---|---|---|\n")
		for _, kind := range []string{"bird", "frr"} {
			for _, withBFD := range []bool{true, false} {
				r, peerASN, bfdReady := startBenchRouter(b, kind, router, only, withBFD)
				var p v1alpha1.BGPPeer
				must(b, e.c.Get(b.Context(), client.ObjectKey{Name: "tor"}, &p))
				p.Spec.BFDProfile, p.Spec.PeerASN = "", peerASN
				if withBFD {
					p.Spec.BFDProfile = "fast"
				}
				must(b, e.c.Update(b.Context(), &p))
				ready := func() {
					e.waitEstablished("tor", 30*time.Second, "node-a")
					e.expectRoute(router.NS, route, e.nodeIPs(false, "node-a"), 30*time.Second)
					if withBFD {
						waitFor(b, kind+"'s BFD session with node-a Up", 15*time.Second, bfdReady)
					}
				}
				for _, blow := range []string{"link cut", "SIGSTOP"} {
					var took []time.Duration
					for range runs {
						ready()
						var heal func()
						switch blow {
						case "link cut":
							_, heal = e.hurt("node-a", blow)
						default:
							heal = e.freeze("node-a")
						}
						took = append(took, e.expectRoute(router.NS, route, nil, 30*time.Second))
						heal()
					}
					fmt.Fprintf(&rep, "| %s | %s | %v | %s | %s | %s |\n", kind, blow, withBFD, ms(median(took)), ms(slices.Min(took)), ms(slices.Max(took)))
				}
				r.Stop()
			}
		}
		b.Logf("BFD failover:\n%s", rep.String())
	})
}

// startBenchRouter starts bird or FRR in router's namespace peering with nodes, with BFD at
// 100 ms × 3 or without, and returns it, its AS and a check that its BFD session is Up.
func startBenchRouter(b *testing.B, kind string, router netlab.Host, nodes []labNode, withBFD bool) (*netlab.Router, uint32, func() bool) {
	a := router.IPv4.Addr()
	if kind == "bird" {
		config := birdConfig(a, nodes, clusterASN, "")
		if withBFD {
			config = strings.Replace(birdBFDConfig(a, nodes), "multiplier 5", "multiplier 3", 1)
		}
		r := netlab.StartBird(b, router.NS, config)
		return r, routerASN, func() bool { return bfdUp(b, r, nodes[0].IPv4.Addr()) }
	}
	config := frrConfig(a, nodes)
	if withBFD {
		config = strings.Replace(frrBFDConfig(a, nodes, false), "detect-multiplier 5", "detect-multiplier 3", 1)
	}
	r := netlab.StartFRR(b, router.NS, config)
	return r, 64520, func() bool {
		out, _ := r.Vtysh("show bfd peers")
		return strings.Contains(out, "Status: up")
	}
}
