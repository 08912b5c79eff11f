package e2e

import (
	"context"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
)

// birdBFDConfig is birdConfig with BFD on every node session: 100 ms × 5 on the router's side
// (a multiplier of 5 rather than 3 so a test machine that starves a process for 300 ms does
// not flap the sessions).
func birdBFDConfig(local netip.Addr, nodes []labNode) string {
	cfg := birdConfig(local, nodes, clusterASN, "")
	cfg = strings.Replace(cfg, "  direct;\n", "  direct;\n  bfd on;\n", 1)
	return cfg + `protocol bfd { interface "eth0" { min rx interval 100 ms; min tx interval 100 ms; multiplier 5; }; }` + "\n"
}

// bfdUp reports whether bird lists an Up BFD session with every address in want.
func bfdUp(t testing.TB, b *netlab.Router, want ...netip.Addr) bool {
	out, err := b.Birdc("show", "bfd", "sessions")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range want {
		if !hasLine(out, a.String(), " Up ") {
			return false
		}
	}
	return true
}

// hasLine reports whether some line of out contains every one of parts.
func hasLine(out string, parts ...string) bool {
	for line := range strings.Lines(out) {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// createBFDProfile creates a BFDProfile with both intervals at ms and the given multiplier.
func (e *l2Env) createBFDProfile(name string, ms, mult uint32) {
	e.createObject(&v1alpha1.BFDProfile{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.BFDProfileSpec{ReceiveInterval: &ms, TransmitInterval: &ms, DetectMultiplier: &mult}})
}

// advertiseBFDService advertises a Service's address over BGP (to the named peers, or to all)
// from every node in all and returns its route once the router in routerNS has it via all of
// them.
func (e *l2Env) advertiseBFDService(routerNS string, all []string, peers ...v1alpha1.Name) netip.Prefix {
	e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "bfd"},
		Spec: v1alpha1.BGPAdvertisementSpec{IPAddressPools: []v1alpha1.Name{"bfd"}, Peers: peers}})
	vip := netip.MustParseAddr("203.0.113.10")
	e.createService("bfd", []netip.Prefix{netip.MustParsePrefix("203.0.113.0/28")}, false, vip)
	route := netip.PrefixFrom(vip, 32)
	e.expectRoute(routerNS, route, e.nodeIPs(false, all...), 15*time.Second)
	return route
}

// freezeNodeA advertises a Service's address from every node in all, freezes node-a's speaker
// and its BGP process with SIGSTOP (a node that dies silently) and returns once the router in
// routerNS has only the other nodes' paths: the route, what wakes them (also at cleanup) and how
// long it took.
func (e *l2Env) freezeNodeA(routerNS string, all []string) (route netip.Prefix, thaw func(), took time.Duration) {
	t := e.t
	route = e.advertiseBFDService(routerNS, all)

	thaw = e.freeze("node-a")
	t0 := time.Now()
	t.Cleanup(thaw)
	e.expectRoute(routerNS, route, e.nodeIPs(false, "node-b", "node-c"), 15*time.Second)
	return route, thaw, time.Since(t0)
}

// birdWithBFD starts bird in the first router's namespace with BFD (100 ms × 5) on its
// sessions with the nodes, and a BGPPeer "tor" with a BFDProfile of ms × 5; it returns once the
// nodes in all have their BGP sessions Established.
func (e *l2Env) birdWithBFD(all []string, ms uint32) *netlab.Router {
	router := e.Routers[0]
	b := startBird(e.t, router.NS, birdBFDConfig(router.IPv4.Addr(), e.Nodes))
	e.createBFDProfile("fast", ms, 5)
	peer := bgpPeer("tor", router.IPv4.Addr(), clusterASN, routerASN)
	peer.Spec.BFDProfile = "fast"
	e.createObject(peer)
	e.waitEstablished("tor", 30*time.Second, all...)
	return b
}

// TestBFD peers three speakers with bird2 over BGP watched by BFD (100 ms × 5, BGP hold time
// 9 s). The BFD sessions come Up on both sides; then one speaker is frozen with SIGSTOP (a
// node that dies silently: no FIN, no NOTIFICATION). bird's BFD declares it down and its route
// leaves bird's kernel table while the BGP hold timer is still running: bird's protocol gives
// "BFD session down" as the reason, not the hold timer. Then bird is frozen, and the speakers'
// BFD resets their BGP sessions without waiting for the hold timer.
func TestBFD(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		all := []string{"node-a", "node-b", "node-c"}
		router := e.Routers[0]
		b := e.birdWithBFD(all, 100)
		waitFor(t, "bird's BFD sessions with the three nodes Up", 15*time.Second, func() bool {
			return bfdUp(t, b, e.nodeIPs(false, all...)...)
		})
		waitFor(t, "node-b's BFD session Up in its metrics", 10*time.Second, func() bool {
			m, err := scrapeMetrics(context.Background(), e.node("node-b").IPv4.Addr().String()+":7474")
			return err == nil && sum(m, "portico_bfd_session_up", map[string]string{"peer": "tor"}) == 1
		})

		route, thaw, took := e.freezeNodeA(router.NS, all)
		// The ordering that matters: when the route left, bird's BGP session with node-a had
		// been closed by BFD, not by its hold timer.
		out, err := b.Birdc("show", "protocols", "all", "node_a")
		must(t, err)
		if !strings.Contains(out, "BFD session down") {
			t.Fatalf("node-a's route left bird, but not because of BFD:\n%s", out)
		}
		t.Logf("SIGSTOP of node-a's speaker to its route leaving bird's kernel table: %v (BGP hold time 9s)", took)

		thaw()
		e.expectRoute(router.NS, route, e.nodeIPs(false, all...), 30*time.Second)
		waitFor(t, "bird's BFD session with node-a Up again", 15*time.Second, func() bool {
			return bfdUp(t, b, e.node("node-a").IPv4.Addr())
		})

		// The other way round: bird frozen. node-b's BFD detects it and resets the BGP session
		// at once instead of waiting out GoBGP's 9 s hold timer.
		b.Signal(syscall.SIGSTOP)
		t.Cleanup(func() { b.Signal(syscall.SIGCONT) })
		waitFor(t, "node-b's BGP session reset by BFD", 15*time.Second, func() bool {
			return strings.Contains(e.speakerLog("node-b"), `"msg":"BFD session down: resetting the BGP session"`) &&
				e.sessions("node-b")["tor"].State != "Established"
		})
		b.Signal(syscall.SIGCONT)
		e.waitEstablished("tor", 30*time.Second, all...)
		e.expectRoute(router.NS, route, e.nodeIPs(false, all...), 30*time.Second)
	})
}

// frrBFDConfig is frrConfig with BFD on every neighbour, 100 ms × 5 as in TestBFD; with
// multihop the neighbours are ebgp-multihop, so FRR runs multihop BFD (RFC 5883) with them.
func frrBFDConfig(addr netip.Addr, nodes []labNode, multihop bool) string {
	cfg := frrConfig(addr, nodes)
	for _, n := range nodes {
		a := n.IPv4.Addr().String()
		extra := " neighbor " + a + " bfd profile fast\n"
		if multihop {
			extra += " neighbor " + a + " ebgp-multihop 255\n"
		}
		cfg = strings.Replace(cfg, " neighbor "+a+" timers connect 1\n", " neighbor "+a+" timers connect 1\n"+extra, 1)
	}
	return cfg + "bfd\n profile fast\n  detect-multiplier 5\n  receive-interval 100\n  transmit-interval 100\n exit\n!\nexit\n"
}

// TestBFDFRR is TestBFD's first half against FRR 8.4's bfdd: the sessions come Up in
// "show bfd peers", and a SIGSTOPped speaker's route leaves FRR's kernel table because bgpd
// reset the session for BFD (Cease/BFD Down), not because its 9 s hold timer expired.
func TestBFDFRR(t *testing.T) { bfdWithFRR(t, false) }

// TestBFDMultihopFRR is TestBFDFRR with ebgpMultiHop BGPPeers on both sides, so the speakers
// and FRR's bfdd run multihop BFD (RFC 5883, UDP port 4784): FRR lists the sessions as
// multihop and Up, and a frozen speaker's route leaves by BFD Down.
func TestBFDMultihopFRR(t *testing.T) { bfdWithFRR(t, true) }

func bfdWithFRR(t *testing.T, multihop bool) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		all := []string{"node-a", "node-b", "node-c"}
		router := e.Routers[0]
		frr := netlab.StartFRR(t, router.NS, frrBFDConfig(router.IPv4.Addr(), e.Nodes, multihop))
		e.createBFDProfile("fast", 100, 5)
		peer := bgpPeer("frr", router.IPv4.Addr(), clusterASN, 64520)
		peer.Spec.BFDProfile, peer.Spec.EBGPMultiHop = "fast", multihop
		e.createObject(peer)
		e.waitEstablished("frr", 30*time.Second, all...)
		var peers string
		defer func() {
			if t.Failed() {
				t.Logf("FRR's BFD peers:\n%s", peers)
			}
		}()
		waitFor(t, "FRR's BFD sessions with the three nodes up", 15*time.Second, func() bool {
			peers, _ = frr.Vtysh("show bfd peers")
			for _, a := range e.nodeIPs(false, all...) {
				// FRR 8.4: "peer 198.51.100.11 [multihop ]local-address ..." then "Status: up".
				if !strings.Contains(peers, "peer "+a.String()+" ") {
					return false
				}
			}
			return strings.Count(peers, "Status: up") == len(all) && strings.Count(peers, " multihop ") == map[bool]int{true: len(all)}[multihop]
		})
		route, thaw, took := e.freezeNodeA(router.NS, all)
		out, err := frr.Vtysh("show bgp neighbors " + e.node("node-a").IPv4.Addr().String())
		must(t, err)
		if !strings.Contains(out, "Cease/BFD Down") { // FRR 8.4: "Last reset ..., Notification sent (Cease/BFD Down)"
			t.Fatalf("node-a's route left FRR, but not because of BFD:\n%s", out)
		}
		t.Logf("SIGSTOP of node-a's speaker to its route leaving FRR's kernel table: %v (BGP hold time 9s, multihop BFD %v)", took, multihop)
		thaw()
		e.expectRoute(router.NS, route, e.nodeIPs(false, all...), 30*time.Second)
	})
}
