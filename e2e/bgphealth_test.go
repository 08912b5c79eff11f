package e2e

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/internal/netlab"
)

// gracefulShutdownBy are the next hops whose path to prefix carries GRACEFUL_SHUTDOWN (65535,0)
// in bird's table, and whether bird holds any path at all.
func gracefulShutdownBy(t testing.TB, b *netlab.Router, prefix netip.Prefix) (shut map[netip.Addr]bool, paths int) {
	t.Helper()
	out, err := b.Birdc("show", "route", prefix.String(), "all")
	must(t, err)
	shut = map[netip.Addr]bool{}
	var hop netip.Addr
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case strings.Contains(line, "unicast ["):
			paths++
			hop = netip.Addr{}
		case len(f) == 2 && f[0] == "BGP.next_hop:":
			hop, _ = netip.ParseAddr(f[1])
		case len(f) > 0 && f[0] == "BGP.community:" && strings.Contains(line, "(65535,0)"):
			shut[hop] = true
		}
	}
	return shut, paths
}

// setNode edits a Node (spec, or status when status is true) through the apiserver.
func (e *l2Env) setNode(name string, status bool, edit func(*corev1.Node)) {
	e.t.Helper()
	ctx := context.Background()
	var n corev1.Node
	must(e.t, e.c.Get(ctx, clientKey(name), &n))
	edit(&n)
	if status {
		must(e.t, e.c.Status().Update(ctx, &n))
	} else {
		must(e.t, e.c.Update(ctx, &n))
	}
}

// setReady sets the node's Ready condition, as a kubelet (or the node lifecycle controller) would.
func setReady(n *corev1.Node, status corev1.ConditionStatus) {
	c := corev1.NodeCondition{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i] = c
			return
		}
	}
	n.Status.Conditions = append(n.Status.Conditions, c)
}

// TestBGPNodeHealth: a node's fitness decides its BGP routes as it decides its L2 answers.
// Cordoned (kubectl drain's first step), node-b keeps its route with GRACEFUL_SHUTDOWN
// (65535,0) so that the router can move traffic away while the route still exists, then
// withdraws it after the speakers' default --bgp-drain-grace; uncordoned, the plain route
// returns. Not Ready, node-c withdraws at once; Ready again, its route returns.
func TestBGPNodeHealth(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		all := []string{"node-a", "node-b", "node-c"}
		bird := e.Routers[0].NS
		b := startBird(t, bird, birdConfig(e.Routers[0].IPv4.Addr(), e.Nodes, clusterASN, ""))
		e.createObject(bgpPeer("tor", netip.MustParseAddr("198.51.100.3"), clusterASN, routerASN))
		e.waitEstablished("tor", 30*time.Second, all...)
		route := e.advertiseWeb(bird, all)
		nodeB := e.nodeIPs(false, "node-b")[0]

		e.setNode("node-b", false, func(n *corev1.Node) { n.Spec.Unschedulable = true })
		waitFor(t, "node-b's path carries (65535,0) while every node's route exists", 10*time.Second, func() bool {
			shut, paths := gracefulShutdownBy(t, b, route)
			return paths == 3 && len(shut) == 1 && shut[nodeB]
		})
		e.expectRoute(bird, route, e.nodeIPs(false, "node-a", "node-c"), time.Duration(2)*time.Minute)

		e.setNode("node-b", false, func(n *corev1.Node) { n.Spec.Unschedulable = false })
		e.expectRoute(bird, route, e.nodeIPs(false, all...), 10*time.Second)
		if shut, _ := gracefulShutdownBy(t, b, route); len(shut) > 0 {
			t.Fatalf("uncordoned, paths still carry GRACEFUL_SHUTDOWN: %v", shut)
		}

		e.setNode("node-c", true, func(n *corev1.Node) { setReady(n, corev1.ConditionFalse) })
		e.expectRoute(bird, route, e.nodeIPs(false, "node-a", "node-b"), 10*time.Second)
		e.setNode("node-c", true, func(n *corev1.Node) { setReady(n, corev1.ConditionTrue) })
		e.expectRoute(bird, route, e.nodeIPs(false, all...), 10*time.Second)
	})
}
