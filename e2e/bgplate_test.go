package e2e

import (
	"net/netip"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestBGPDrainRouterApplyingLate: a router applies a drained node's update a moment after it
// arrives, and connections opened through the node in that moment are in neither flow-sharing
// round, the one before the change nor the one right after it; once the router rehashes they
// reach nodes that list them nowhere. Here bird is frozen (SIGSTOP) from before node-c is
// cordoned until 24 connections have been opened after the second round, so the moment lasts;
// the late round (--bgp-share-flows-late, 3 s here to leave the test room) must list them, and
// none may break when bird thaws and its route leaves node-c. With no drain grace the cordon
// withdraws node-c's route at once: one change, three rounds (bird, as configured here,
// ignores the GRACEFUL_SHUTDOWN a grace would advertise first).
func TestBGPDrainRouterApplyingLate(t *testing.T) {
	vip := netip.MustParseAddr("203.0.113.10")
	inHandoffLabWith(t, 1, vip, func(t *testing.T, e *l2Env, pod labPod) {
		router, route, bird := drainLab(t, e, pod, vip, "--bgp-drain-grace=0s", "--bgp-share-flows-late=3s")
		rounds := func() float64 { return sharesBy(t, e, "node-c", "") }
		before := rounds()

		bird.Signal(syscall.SIGSTOP)
		thawed := false
		t.Cleanup(func() {
			if !thawed {
				bird.Signal(syscall.SIGCONT)
			}
		})
		e.setNode("node-c", false, func(n *corev1.Node) { n.Spec.Unschedulable = true })
		t.Cleanup(func() { e.setNode("node-c", false, func(n *corev1.Node) { n.Spec.Unschedulable = false }) })
		waitFor(t, "node-c's rounds before its change and right after it", 10*time.Second, func() bool { return rounds() >= before+2 })

		const connections = 24
		s := openStreams(t, router, netip.AddrPortFrom(vip, echoPort), connections)
		t.Cleanup(s.stop)
		onC := establishedTo(t, e.node("node-c").NS, vip)
		if onC == 0 {
			t.Fatal("no connection opened after the second round landed on node-c: the router does not spread them")
		}
		if rounds() >= before+3 {
			t.Fatal("the late round came before the connections were open: the test did not set up its moment")
		}
		bird.Signal(syscall.SIGCONT)
		thawed = true
		took := e.expectRoute(router, route, e.nodeIPs(false, "node-a", "node-b"), 30*time.Second)
		s.window()
		sent, resets, errs, worst := s.everyOne(t, "50 echoes on every connection after the route left node-c")
		t.Logf("%d of %d connections on node-c; route left it %v after bird thawed; %d echoes, %d resets, %d broken, longest echo %v",
			onC, connections, took.Round(time.Millisecond), sent, resets, len(errs), worst.Round(time.Millisecond))
		if len(errs) > 0 {
			t.Errorf("%d of %d connections opened before the router applied the drain broke: %v", len(errs), connections, errs)
		}
		if r := rounds(); r < before+3 {
			t.Errorf("node-c's flow-sharing rounds since the cordon: %.0f, want 3 (before, right after, late)", r-before)
		}
	})
}
