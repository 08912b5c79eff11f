package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/internal/netlab"
)

// TestNothingLeftBehind: what the hand-off made in a node's kernel (its nftables table, its
// policy-routing rules, the routes of its routing tables, the connection-tracking entries it
// marked) and the forwarding guard's table go when no speaker follows on the node (an uninstall:
// the speakers' DaemonSet deleted; the node's Node deleted), and when a speaker starts with
// --l2-handoff-grace=0; and a starting speaker prunes what an earlier version left. Each time,
// hand-off state exists first: an address moved while connections were open through its owner.
func TestNothingLeftBehind(t *testing.T) {
	inHandoffLab(t, func(t *testing.T, e *l2Env, pod labPod) {
		stop, err := netlab.ServeEcho(pod.NS, echoPort)
		must(t, err)
		t.Cleanup(func() { _ = stop() })
		// The speakers' DaemonSet, as an object alone (no controller runs it here): the
		// speakers read it as they stop.
		labels := map[string]string{"app": "portico-speaker"}
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "portico-speaker"}, Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "speaker", Image: "portico"}}}}}}
		must(t, e.c.Create(context.Background(), ds))
		e.extraArgs = []string{"--namespace=default", "--daemonset=portico-speaker"}
		for _, n := range e.Nodes {
			e.restartSpeaker(n.Name)
		}
		e.create(scenario{name: "left-behind", ip: handoffVIP})

		t.Run("a starting speaker prunes an earlier version's rules and routes", func(t *testing.T) {
			e.t = t
			ns := e.node("node-a").NS
			for _, cmd := range [][]string{
				{"rule", "add", "pref", "3580", "fwmark", "0x2000/0x2000", "lookup", "3580"},    // by address, before
				{"rule", "add", "pref", "3580", "fwmark", "0x30000/0xff0000", "lookup", "3583"}, // a slot, before
				{"route", "add", "default", "via", e.node("node-b").IPv4.Addr().String(), "table", "3583"},
			} {
				run(t, "ip", append([]string{"-n", ns}, cmd...)...)
			}
			e.restartSpeaker("node-a")
			waitFor(t, "node-a's speaker prunes them", 10*time.Second, func() bool { return porticoRouting(ns) == "" })
		})

		t.Run("--l2-handoff-grace=0 removes what an earlier run left", func(t *testing.T) {
			e.t = t
			taker, s := e.handOff(t)
			defer s.stop()
			e.kill(taker, syscall.SIGKILL) // leaves everything
			e.extraArgs = append(e.extraArgs, "--l2-handoff-grace=0")
			defer func() { e.extraArgs = e.extraArgs[:len(e.extraArgs)-1]; e.restartSpeaker(taker) }()
			logged := e.logOffsets()
			e.startSpeaker(taker)
			e.waitJoined(taker, logged)
			e.leftNothing(taker, false)
		})

		t.Run("a speaker whose Node is deleted removes it all", func(t *testing.T) {
			e.t = t
			taker, s := e.handOff(t)
			defer s.stop()
			ctx := context.Background()
			var node corev1.Node
			must(t, e.c.Get(ctx, clientKey(taker), &node))
			must(t, e.c.Delete(ctx, &node))
			e.kill(taker, syscall.SIGTERM)
			e.leftNothing(taker, true)
			node = corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: taker, Labels: node.Labels}}
			must(t, e.c.Create(ctx, &node))
			node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: e.node(taker).IPv4.Addr().String()}}
			must(t, e.c.Status().Update(ctx, &node))
			e.restartSpeaker(taker)
		})

		t.Run("an uninstall removes it all on every node", func(t *testing.T) {
			e.t = t
			_, s := e.handOff(t)
			defer s.stop()
			must(t, e.c.Delete(context.Background(), ds))
			for _, n := range e.Nodes {
				e.kill(n.Name, syscall.SIGTERM)
			}
			for _, n := range e.Nodes {
				e.leftNothing(n.Name, true)
			}
		})
	})
}

// restartSpeaker stops node's speaker (SIGTERM) and starts it again, and waits until it and the
// others have seen each other join.
func (e *l2Env) restartSpeaker(node string) {
	logged := e.logOffsets()
	e.kill(node, syscall.SIGTERM)
	e.startSpeaker(node)
	e.waitJoined(node, logged)
}

// handOff opens streams to handoffVIP through the node holding it, stops that node's speaker
// (SIGTERM: a restart) so the address moves, waits until the taker hands the streams off (its
// table, rule, route and marked entries exist), starts the stopped speaker again, and returns
// the taker and the streams.
func (e *l2Env) handOff(t *testing.T) (taker string, s *streams) {
	owner, next := e.heldBy(handoffVIP)
	s = openStreams(t, e.Client.NS, netip.AddrPortFrom(handoffVIP, echoPort), 5)
	waitFor(t, "the streams echo through "+owner, 10*time.Second, func() bool { sent, _, _, _ := s.window(); return sent > 0 })
	e.kill(owner, syscall.SIGTERM)
	listsHandoff(t, e, next, handoffVIP, owner)
	ns := e.node(next).NS
	waitFor(t, next+" holds hand-off state: routing and marked entries", 10*time.Second, func() bool {
		return porticoRouting(ns) != "" && markedEntries(ns) > 0
	})
	logged := e.logOffsets()
	e.startSpeaker(owner)
	e.waitJoined(owner, logged)
	return next, s
}

// leftNothing waits until node's namespace holds nothing of Portico's: no nftables table of
// its own (the guard's too, once its speaker has stopped: guard), no policy-routing rule or
// route of the hand-off's routing tables, no connection-tracking entry with the hand-off bit.
func (e *l2Env) leftNothing(node string, guard bool) {
	e.t.Helper()
	ns := e.node(node).NS
	var left string
	if !pollUntil(10*time.Second, func() bool {
		left = porticoKernelState(ns)
		if tables, _ := exec.Command("ip", "netns", "exec", ns, "nft", "list", "tables").CombinedOutput(); guard && strings.Contains(string(tables)+"\n", "inet portico\n") {
			left += "\nnft list tables: " + string(tables)
		}
		if n := markedEntries(ns); n > 0 {
			left += fmt.Sprintf("\n%d connection-tracking entries with the mark 0x2000", n)
		}
		return left == ""
	}) {
		e.t.Errorf("%s keeps Portico's state:\n%s", node, left)
	}
}

// markedEntries counts ns's connection-tracking entries whose mark has the hand-off bit.
func markedEntries(ns string) int {
	out, err := exec.Command("ip", "netns", "exec", ns, "conntrack", "-L", "--mark", "0x2000/0x2000").Output()
	if err != nil {
		return -1
	}
	return strings.Count(string(out), "\n")
}
