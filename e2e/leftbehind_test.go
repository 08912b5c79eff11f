package e2e

import (
	"context"
	"net/netip"
	"slices"
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
// the speakers' DaemonSet deleted; the node's Node deleted), when the next speaker runs no
// hand-off (a rolling update to the chart's speaker.forwardGuard=false: no NET_ADMIN to remove
// it with), and when a speaker starts with --l2-handoff-grace=0; and a starting speaker prunes
// what an earlier version left. Each time, hand-off state exists first: an address moved while
// connections were open through its owner.
func TestNothingLeftBehind(t *testing.T) {
	inHandoffLab(t, func(t *testing.T, e *l2Env, pod labPod) {
		stop, err := netlab.ServeEcho(pod.NS, echoPort)
		must(t, err)
		t.Cleanup(func() { _ = stop() })
		ds := e.speakerDaemonSet()
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
			// node-a may hand something off by now (an address it took back as it started), so
			// what is checked is that the earlier version's rules and route are gone.
			waitFor(t, "node-a's speaker prunes them", 10*time.Second, func() bool {
				left := strings.Join(netlab.HandoffRouting(ns), "\n")
				return !strings.Contains(left, "0x2000/0x2000") && !strings.Contains(left, "0x30000/0xff0000") && !strings.Contains(left, "table 3583")
			})
		})

		t.Run("--l2-handoff-grace=0 removes what an earlier run left", func(t *testing.T) {
			e.t = t
			taker, s := e.handOff(t)
			defer s.stop()
			e.kill(taker, syscall.SIGTERM) // a restart: it leaves everything to the next speaker
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
			waitFor(t, taker+"'s speaker sees its Node gone", 10*time.Second, func() bool { return e.stopReason(taker) == "node-gone" })
			e.kill(taker, syscall.SIGTERM)
			e.leftNothing(taker, true)
			node = corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: taker, Labels: node.Labels}}
			must(t, e.c.Create(ctx, &node))
			node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: e.node(taker).IPv4.Addr().String()}}
			must(t, e.c.Status().Update(ctx, &node))
			e.restartSpeaker(taker)
		})

		t.Run("a rolling update to speakers without the hand-off removes it", func(t *testing.T) {
			e.t = t
			taker, s := e.handOff(t)
			defer s.stop()
			// The chart's speaker.forwardGuard=false (config/no-forward-guard): the next
			// speaker has no NET_ADMIN and no hand-off, and can neither adopt nor remove it.
			full, shipped := e.Security, ds.Spec.Template.DeepCopy()
			withoutHandoff(&ds.Spec.Template.Spec.Containers[0])
			must(t, e.c.Update(context.Background(), ds))
			e.kill(taker, syscall.SIGTERM)
			e.Security.Capabilities = slices.DeleteFunc(slices.Clone(full.Capabilities), func(c string) bool { return c == "NET_ADMIN" })
			e.extraArgs = append(e.extraArgs, "--forward-guard=false", "--l2-handoff-grace=0s")
			defer func() {
				e.Security, e.extraArgs, ds.Spec.Template = full, e.extraArgs[:len(e.extraArgs)-2], *shipped
				must(t, e.c.Update(context.Background(), ds))
				e.restartSpeaker(taker)
			}()
			logged := e.logOffsets()
			e.startSpeaker(taker)
			e.waitJoined(taker, logged)
			e.leftNothing(taker, true)
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
		return len(netlab.HandoffRouting(ns)) > 0 && netlab.MarkedEntries(ns, 0x2000) > 0
	})
	logged := e.logOffsets()
	e.startSpeaker(owner)
	e.waitJoined(owner, logged)
	return next, s
}

// leftNothing waits until node's namespace holds nothing of Portico's (netlab.HandoffState;
// the guard's table too once its speaker has stopped: guard).
func (e *l2Env) leftNothing(node string, guard bool) {
	e.t.Helper()
	ns := e.node(node).NS
	var left string
	if !pollUntil(10*time.Second, func() bool { left = netlab.HandoffState(ns, guard); return left == "" }) {
		e.t.Errorf("%s keeps Portico's state:\n%s", node, left)
	}
}

// speakerDaemonSet creates the speakers' DaemonSet as shipped in default, as an object alone
// (no controller runs it here), and has the speakers started from now on read it as they stop.
func (e *l2Env) speakerDaemonSet() *appsv1.DaemonSet {
	ds := shippedDaemonSet(e.t)
	ds.Namespace = "default"
	must(e.t, e.c.Create(context.Background(), ds))
	e.extraArgs = []string{"--namespace=default", "--daemonset=portico-speaker"}
	return ds
}

// stopReason is what a stop of node's speaker would be now, as its metric
// portico_bgp_stop_keeps_routes says ("": not read).
func (e *l2Env) stopReason(node string) string {
	m, err := scrapeMetrics(context.Background(), e.node(node).IPv4.Addr().String()+":7474")
	if err != nil || m["portico_bgp_stop_keeps_routes"] == nil {
		return ""
	}
	for _, metric := range m["portico_bgp_stop_keeps_routes"].Metric {
		for _, l := range metric.Label {
			if l.GetName() == "reason" {
				return l.GetValue()
			}
		}
	}
	return ""
}

// withoutHandoff makes the speaker container c as the chart's speaker.forwardGuard=false does:
// the guard and the hand-off off, NET_ADMIN not granted.
func withoutHandoff(c *corev1.Container) {
	for i, arg := range c.Args {
		switch {
		case arg == "--forward-guard=true":
			c.Args[i] = "--forward-guard=false"
		case strings.HasPrefix(arg, "--l2-handoff-grace="):
			c.Args[i] = "--l2-handoff-grace=0s"
		}
	}
	caps := c.SecurityContext.Capabilities
	caps.Add = slices.DeleteFunc(caps.Add, func(c corev1.Capability) bool { return c == "NET_ADMIN" })
}
