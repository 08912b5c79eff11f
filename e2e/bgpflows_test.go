package e2e

import (
	"context"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
)

// TestBGPDrainKeepsConnections: every node advertises the address to bird, whose kernel route
// spreads flows over the three next hops by their ports (fib_multipath_hash_policy 1, plain
// hash-threshold ECMP, no resilient hashing); 24 long-lived connections from the router, each
// echoing every 10 ms, land on all three nodes, whose service proxy (nftables, as
// TestL2ConnectionsSurviveMove's) DNATs them to one pod and masquerades them. node-c is
// cordoned until its path is withdrawn, then uncordoned until it is back; then, with 24 more
// connections opened since, its speaker is stopped and started again (the router does no
// graceful restart, so its path goes and comes back). Each change of the ECMP set remaps flows
// to nodes with no conntrack entry for them, which a node must pass on to the node that has
// it. No connection may break.
func TestBGPDrainKeepsConnections(t *testing.T) {
	vip := netip.MustParseAddr("203.0.113.10")
	inHandoffLabWith(t, 1, vip, func(t *testing.T, e *l2Env, pod labPod) {
		all := []string{"node-a", "node-b", "node-c"}
		router, route, _ := drainLab(t, e, pod, vip)

		const connections = 24
		s := openStreams(t, router, netip.AddrPortFrom(vip, echoPort), connections)
		s.after(t, "50 echoes per connection before the drain")
		landed := map[string]int{}
		for _, n := range all {
			landed[n] = establishedTo(t, e.node(n).NS, vip)
		}
		t.Logf("connections per node before the drain: %v", landed)
		for _, n := range all {
			if landed[n] == 0 {
				t.Fatalf("no connection landed on %s (%v): the router does not spread them", n, landed)
			}
		}

		// change applies a change of node-c's place in the ECMP set, waits for the router's route
		// via the nodes named, and fails t if a connection broke meanwhile.
		open := []*streams{s}
		change := func(what string, do func(), via ...string) {
			do()
			e.expectRoute(router, route, e.nodeIPs(false, via...), 30*time.Second)
			for i, s := range open {
				sent, resets, errs, worst := s.after(t, "50 echoes per connection after "+what)
				t.Logf("%s, connections opened %s: %d echoes, %d resets, %d broken connections, longest echo %v",
					what, []string{"first", "after the uncordon"}[i], sent, resets, len(errs), worst.Round(time.Millisecond))
				if len(errs) > 0 {
					t.Errorf("%d of %d connections broke when %s: %v", len(errs), connections, what, errs)
				}
			}
		}
		uncordoned := false
		t.Cleanup(func() {
			if !uncordoned {
				e.setNode("node-c", false, func(n *corev1.Node) { n.Spec.Unschedulable = false })
			}
		})
		change("node-c was drained", func() { e.setNode("node-c", false, func(n *corev1.Node) { n.Spec.Unschedulable = true }) }, "node-a", "node-b")
		change("node-c was uncordoned", func() {
			e.setNode("node-c", false, func(n *corev1.Node) { n.Spec.Unschedulable = false })
			uncordoned = true
		}, all...)

		// The mechanism, not luck: node-c asked before each change and every ack came, and the
		// nodes passed flows on.
		if shares := sharesBy(t, e, "node-c", "complete"); shares < 2 {
			t.Errorf("node-c's flow-sharing rounds that got every ack: %.0f, want one before the drain and one before the uncordon at least", shares)
		}
		handedOff := 0.0
		for _, n := range all {
			m, err := scrapeMetrics(context.Background(), e.node(n).IPv4.Addr().String()+":7474")
			must(t, err)
			flows, packets := sum(m, "portico_bgp_flow_handoff_flows_total", nil), sum(m, "portico_bgp_flow_handoff_packets_total", nil)
			// The forwarding guard lets the flows passed on through (it would hold each one up
			// by a retransmission: their NAT binding translates nothing).
			if dropped := sum(m, "portico_speaker_guard_dropped_packets_total", nil); dropped > 0 {
				t.Errorf("%s's forwarding guard dropped %.0f packets", n, dropped)
			}
			t.Logf("%s: listed %.0f flows of the others, passed %.0f flows (%.0f packets) on, shares asked %.0f complete, %.0f incomplete",
				n, sum(m, "portico_bgp_flows_listed_total", nil), flows, packets, sharesBy(t, e, n, "complete"), sharesBy(t, e, n, "incomplete"))
			handedOff += flows
		}
		if handedOff == 0 {
			t.Error("no node passed a flow on to its holder")
		}
		waitFor(t, "node-c's Speaker status shows its latest flow-sharing round, complete among 3", 10*time.Second, func() bool {
			var sp v1alpha1.Speaker
			if e.c.Get(context.Background(), clientKey("node-c"), &sp) != nil {
				return false
			}
			f := sp.Status.FlowShare
			return f != nil && f.Complete && f.Members == 3 && f.Reason == "bgp-standing"
		})

		// A speaker restarted where the router does no graceful restart takes the node's routes
		// away and back, the same changes: it shares as it stops, and as it starts. Connections
		// opened since the last share are listed nowhere yet.
		s2 := openStreams(t, router, netip.AddrPortFrom(vip, echoPort), connections)
		s2.after(t, "50 echoes per new connection")
		open = append(open, s2)
		change("node-c's speaker stopped", func() { e.kill("node-c", syscall.SIGTERM) }, "node-a", "node-b")
		change("node-c's speaker started again", func() { e.startSpeaker("node-c") }, all...)
		s.stop()
		s2.stop()
		log := e.speakerLog("node-c")
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, "flows") {
				t.Log(line)
			}
		}
		if !strings.Contains(log, `"msg":"members shared their flows","node":"node-c","why":"stopping-restart"`) {
			t.Error("node-c's speaker did not log that the members shared their flows as it stopped")
		}
		if shares := sharesBy(t, e, "node-c", "complete"); shares < 1 {
			t.Error("node-c's new speaker had no flow-sharing round with every ack before it advertised")
		}
	})
}

// sharesBy is node's count of flow-sharing rounds with result ("": every round).
func sharesBy(t *testing.T, e *l2Env, node, result string) float64 {
	m, err := scrapeMetrics(context.Background(), e.node(node).IPv4.Addr().String()+":7474")
	must(t, err)
	labels := map[string]string{"result": result}
	if result == "" {
		labels = nil
	}
	return sum(m, "portico_bgp_flow_shares_total", labels)
}

// establishedTo counts the established connections to ip:echoPort in ns's connection tracking
// that the node translated itself (not those it passes on to another node).
func establishedTo(t *testing.T, ns string, ip netip.Addr) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/nf_conntrack").Output()
	must(t, err)
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "ESTABLISHED") && strings.Contains(line, "dst="+ip.String()+" ") &&
			strings.Contains(line, "dport=7000 ") && strings.Contains(line, "[ASSURED]") {
			n++
		}
	}
	return n
}

// drainLab serves echo on the pod (netlab.ServeEcho: it closes first after "bye"), restarts the
// speakers with a short drain grace (the withdrawal follows the cordon within a test's
// patience) and args, peers them with bird on the router, and has every node advertise vip: it
// returns the router's namespace, the route and bird. The router forwards (so it takes no ICMP
// redirect from a node that passes a flow on) and hashes flows by their ports.
func drainLab(t *testing.T, e *l2Env, pod labPod, vip netip.Addr, args ...string) (router string, route netip.Prefix, bird *netlab.Router) {
	stop, err := netlab.ServeEcho(pod.NS, echoPort)
	must(t, err)
	t.Cleanup(func() { _ = stop() })
	all := []string{"node-a", "node-b", "node-c"}
	e.extraArgs = append([]string{"--bgp-drain-grace=3s"}, args...)
	for _, n := range all {
		e.kill(n, syscall.SIGTERM)
		e.startSpeaker(n)
	}
	router = e.Routers[0].NS
	run(t, "ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.fib_multipath_hash_policy=1")
	bird = startBird(t, router, birdConfig(e.Routers[0].IPv4.Addr(), e.Nodes, clusterASN, ""))
	e.createObject(bgpPeer("tor", e.Routers[0].IPv4.Addr(), clusterASN, routerASN))
	e.waitEstablished("tor", 30*time.Second, all...)
	route = e.advertiseWeb(router, all)
	if route.Addr() != vip {
		t.Fatalf("advertiseWeb advertises %v, not %v", route, vip)
	}
	return router, route, bird
}
