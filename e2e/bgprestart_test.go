package e2e

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
)

// routeWatch follows the router's route to prefix through a planned restart of node's speaker:
// it polls, every 20 ms, whether the router holds node's path (holds) and its kernel the next hop,
// and it records every change of the kernel's routes (ip monitor), which no poll can miss: an
// ECMP route that lost node's next hop for a millisecond (bird does so when the new session's
// OPEN lacks the Forwarding State bit) shows there alone.
type routeWatch struct {
	prefix     netip.Prefix
	stop, done chan struct{}
	mu         sync.Mutex
	polls      int
	missing    []string // what each poll without node's path saw, and when
	events     <-chan ipEvent
	endMonitor func()
}

// birdHolds is a routeWatch check: bird holds a path to prefix learned over protocol.
func birdHolds(b *netlab.Router, prefix netip.Prefix, protocol string) func() (string, bool) {
	return func() (string, bool) {
		out, err := b.Birdc("show", "route", prefix.String(), "protocol", protocol)
		return "bird has no path from " + protocol + ": " + strings.TrimSpace(out), err == nil && strings.Contains(out, prefix.String())
	}
}

func watchRoute(t *testing.T, ns string, prefix netip.Prefix, hop netip.Addr, holds func() (string, bool)) *routeWatch {
	w := &routeWatch{prefix: prefix, stop: make(chan struct{}), done: make(chan struct{})}
	w.events, w.endMonitor = ipMonitor(t, ns, "route")
	start := time.Now()
	go func() {
		defer close(w.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			why, held := holds()
			gw, gerr := netlab.Gateways(ns, prefix)
			w.mu.Lock()
			w.polls++
			switch {
			case !held:
				w.missing = append(w.missing, time.Since(start).Round(time.Millisecond).String()+": "+why)
			case gerr != nil || !slices.Contains(gw, hop):
				w.missing = append(w.missing, time.Since(start).Round(time.Millisecond).String()+": kernel next hops "+joinAddrs(gw)+" lack "+hop.String())
			}
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// end stops the watch and fails t if the route changed meanwhile: a poll without node's path,
// or any kernel change to the route.
func (w *routeWatch) end(t *testing.T) {
	t.Helper()
	close(w.stop)
	<-w.done
	w.endMonitor()
	var changes []string
	touched := false
	for ev := range w.events {
		changes = append(changes, ev.at.Format("15:04:05.000000")+" "+ev.line)
		touched = touched || strings.HasPrefix(strings.TrimPrefix(ev.line, "Deleted "), w.prefix.Addr().String()+" ")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if touched || len(w.missing) > 0 {
		first := ""
		if len(w.missing) > 0 {
			first = "; first: " + w.missing[0]
		}
		t.Fatalf("the router's route to %v changed during a planned restart (%d of %d polls without node-c%s); its kernel route changes:\n%s",
			w.prefix, len(w.missing), w.polls, first, strings.Join(changes, "\n"))
	}
	t.Logf("node-c's route at the router and in its kernel's ECMP route in every one of %d polls (every 20 ms), and no kernel change to it", w.polls)
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}

// sessionSince is when node's session with peer began, as its Speaker status says (nil: none).
func (e *l2Env) sessionSince(node, peer string) *metav1.Time { return e.sessions(node)[peer].Since }

// waitFreshSession waits for node's session with peer to be Established in a session that began
// after before (sessionSince, read before the speaker stopped). Since has a one-second
// resolution, but a restart takes longer than a second (GoBGP's first attempt alone waits 1-2
// s), so the new session's second is always a later one.
func (e *l2Env) waitFreshSession(node, peer string, before *metav1.Time) {
	e.t.Helper()
	waitFor(e.t, node+"'s new "+peer+" session Established", 30*time.Second, func() bool {
		s := e.sessions(node)[peer]
		return s.State == "Established" && s.Since != nil && (before == nil || s.Since.After(before.Time))
	})
}

// advertiseWeb advertises the Service web's address, 203.0.113.10, from every node to every
// peer, and returns its route once router routes it via the nodes named.
func (e *l2Env) advertiseWeb(router string, nodes []string) netip.Prefix {
	e.t.Helper()
	e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "all"}})
	route := netip.MustParsePrefix("203.0.113.10/32")
	e.createService("web", []netip.Prefix{netip.MustParsePrefix("203.0.113.0/28")}, false, route.Addr())
	e.expectRoute(router, route, e.nodeIPs(false, nodes...), 10*time.Second)
	return route
}

// birdGRConfig is birdConfig with graceful restart on (bird is a helper either way; "on" also
// makes it a restarting speaker itself, as routers configured for it are).
func birdGRConfig(e *l2Env) string {
	return strings.Replace(birdConfig(e.Routers[0].IPv4.Addr(), e.Nodes, clusterASN, ""), "direct;", "direct;\n  graceful restart on;", 1)
}

// TestBGPPlannedRestartKeepsRoutes: with graceful restart, a speaker stopped with SIGTERM on a
// node that stays (a DaemonSet rolling update) leaves bird its route: polled every 20 ms from
// the SIGTERM until the new speaker's session is up and the route fresh, bird always has node-c's
// path and the kernel's ECMP route always has node-c's next hop. The same SIGTERM on a cordoned
// node (a drain), or once the speakers' DaemonSet is deleted (an uninstall), withdraws the route
// at once; and a SIGKILLed speaker that does not come back has its route kept for the restart
// time, then swept.
func TestBGPPlannedRestartKeepsRoutes(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		all := []string{"node-a", "node-b", "node-c"}
		bird := e.Routers[0].NS
		b := startBird(t, bird, birdGRConfig(e))
		peer := bgpPeer("tor", e.Routers[0].IPv4.Addr(), clusterASN, routerASN)
		// 15 s: long enough for a planned restart on a loaded machine, short enough for the
		// crash subtest to wait for the sweep.
		const restartTime = 15 * time.Second
		peer.Spec.EnableGracefulRestart, peer.Spec.GracefulRestartTime = true, &metav1.Duration{Duration: restartTime}
		e.createObject(peer)
		e.waitEstablished("tor", 30*time.Second, all...)
		route := e.advertiseWeb(bird, all)
		nodeC := e.nodeIPs(false, "node-c")[0]

		t.Run("planned restart keeps the route", func(t *testing.T) {
			e.t = t
			// A second Service, deleted while node-c's speaker is away: node-c's path to it stays
			// at bird, stale, until the new speaker's End-of-RIB sweeps it; that its path goes
			// then shows the route bird keeps for web was refreshed, not merely left.
			gone := netip.MustParseAddr("203.0.113.11")
			svc := e.createService("gone", []netip.Prefix{netip.MustParsePrefix("203.0.113.0/28")}, false, gone)
			e.expectRoute(bird, netip.PrefixFrom(gone, 32), e.nodeIPs(false, all...), 10*time.Second)
			w := watchRoute(t, bird, route, nodeC, birdHolds(b, route, "node_c"))
			e.kill("node-c", syscall.SIGTERM)
			t.Cleanup(func() {
				if _, running := e.speakers["node-c"]; !running {
					e.startSpeaker("node-c") // for the next subtests, after a failure here
				}
			})
			waitFor(t, "bird sees node-c's session down", 10*time.Second, func() bool {
				out, err := b.Birdc("show", "protocols", "node_c")
				return err == nil && !strings.Contains(out, "Established")
			})
			must(t, e.c.Delete(context.Background(), svc))
			// node-a and node-b withdraw theirs; node-c's stays while it is away.
			e.expectRoute(bird, netip.PrefixFrom(gone, 32), []netip.Addr{nodeC}, 10*time.Second)
			out, _ := b.Birdc("show", "protocols", "all", "node_c")
			t.Logf("bird while node-c restarts:\n%s", out)
			e.startSpeaker("node-c")
			e.waitEstablished("tor", 30*time.Second, "node-c")
			took := e.expectRoute(bird, netip.PrefixFrom(gone, 32), nil, 10*time.Second)
			t.Logf("node-c's stale path to the deleted Service swept %v after its session was up", took.Round(time.Millisecond))
			w.end(t)
			e.expectRoute(bird, route, e.nodeIPs(false, all...), 10*time.Second)
			if log := e.speakerLog("node-c"); !strings.Contains(log, `"msg":"stopping for a restart`) {
				t.Fatal("node-c's speaker did not log that it stopped for a restart")
			}
		})

		t.Run("a drained node withdraws at once", func(t *testing.T) {
			e.t = t
			e.setNode("node-c", false, func(n *corev1.Node) { n.Spec.Unschedulable = true })
			waitFor(t, "node-c's path carries GRACEFUL_SHUTDOWN", 10*time.Second, func() bool {
				shut, _ := gracefulShutdownBy(t, b, route)
				return shut[nodeC]
			})
			e.kill("node-c", syscall.SIGTERM)
			took := e.expectRoute(bird, route, e.nodeIPs(false, "node-a", "node-b"), 5*time.Second)
			t.Logf("node-c's route gone %v after SIGTERM returned", took.Round(time.Millisecond))
			if log := e.speakerLog("node-c"); !strings.Contains(log, `"msg":"stopping for good: every BGP route withdrawn, every session closed","node":"node-c","reason":"cordoned"`) {
				t.Fatal("node-c's speaker did not log that it stopped for good because its node is cordoned")
			}
			e.setNode("node-c", false, func(n *corev1.Node) { n.Spec.Unschedulable = false })
			e.startSpeaker("node-c")
			e.expectRoute(bird, route, e.nodeIPs(false, all...), 30*time.Second)
		})

		t.Run("an uninstall withdraws at once", func(t *testing.T) {
			e.t = t
			ds := e.speakerDaemonSet()
			t.Cleanup(func() { e.extraArgs = nil })
			restarted := e.sessionSince("node-c", "tor")
			e.kill("node-c", syscall.SIGTERM)
			e.startSpeaker("node-c")
			e.waitFreshSession("node-c", "tor", restarted)
			e.expectRoute(bird, route, e.nodeIPs(false, all...), 10*time.Second)
			must(t, e.c.Delete(context.Background(), ds))
			e.kill("node-c", syscall.SIGTERM)
			took := e.expectRoute(bird, route, e.nodeIPs(false, "node-a", "node-b"), 5*time.Second)
			t.Logf("node-c's route gone %v after SIGTERM returned", took.Round(time.Millisecond))
			if log := e.speakerLog("node-c"); !strings.Contains(log, `"reason":"uninstall"`) {
				t.Fatal("node-c's speaker did not log that it stopped for good because of an uninstall")
			}
			e.extraArgs = nil
			e.startSpeaker("node-c")
			e.expectRoute(bird, route, e.nodeIPs(false, all...), 30*time.Second)
		})

		t.Run("a crashed speaker's route is kept for the restart time, then swept", func(t *testing.T) {
			e.t = t
			e.expectRoute(bird, route, e.nodeIPs(false, all...), 10*time.Second)
			e.kill("node-c", syscall.SIGKILL)
			killed := time.Now()
			waitFor(t, "bird sees node-c's session down", 10*time.Second, func() bool {
				out, err := b.Birdc("show", "protocols", "node_c")
				return err == nil && !strings.Contains(out, "Established")
			})
			if gw := gateways(t, bird, route); !slices.Contains(gw, nodeC) {
				t.Fatalf("right after node-c's speaker was killed the router routes %v via %v; graceful restart should keep node-c", route, gw)
			}
			e.expectRoute(bird, route, e.nodeIPs(false, "node-a", "node-b"), 30*time.Second)
			if lived := time.Since(killed); lived < restartTime {
				t.Fatalf("node-c's stale route went %v after the kill, before its %v restart time", lived.Round(time.Millisecond), restartTime)
			}
			e.startSpeaker("node-c")
			e.expectRoute(bird, route, e.nodeIPs(false, all...), 30*time.Second)
		})
	})
}

// TestBGPPlannedRestartWithBFD: a planned restart of a speaker whose session BFD watches keeps
// the route when the router treats a BFD Down as a graceful restart (bird's "bfd graceful"; the
// speaker's BFD shares fate with its BGP, its C bit clear, RFC 5880 §4.1). With "bfd on" bird
// 2.0.12 takes the session down hard on the stopping speaker's AdminDown and drops the route in
// every poll (docs/speaker-bgp.md, "What survives which move", says what to choose).
func TestBGPPlannedRestartWithBFD(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		all := []string{"node-a", "node-b", "node-c"}
		bird := e.Routers[0].NS
		cfg := strings.Replace(birdBFDConfig(e.Routers[0].IPv4.Addr(), e.Nodes), "bfd on;", "bfd graceful;\n  graceful restart on;", 1)
		b := startBird(t, bird, cfg)
		e.createBFDProfile("fast", 100, 5)
		peer := bgpPeer("tor", e.Routers[0].IPv4.Addr(), clusterASN, routerASN)
		peer.Spec.EnableGracefulRestart, peer.Spec.BFDProfile = true, "fast"
		e.createObject(peer)
		e.waitEstablished("tor", 30*time.Second, all...)
		waitFor(t, "BFD Up with every node", 30*time.Second, func() bool { return bfdUp(t, b, e.nodeIPs(false, all...)...) })
		route := e.advertiseWeb(bird, all)
		nodeC := e.nodeIPs(false, "node-c")[0]

		w := watchRoute(t, bird, route, nodeC, birdHolds(b, route, "node_c"))
		restarted := e.sessionSince("node-c", "tor")
		e.kill("node-c", syscall.SIGTERM)
		waitFor(t, "bird sees node-c's session down", 10*time.Second, func() bool {
			out, err := b.Birdc("show", "protocols", "node_c")
			return err == nil && !strings.Contains(out, "Established")
		})
		// Longer than BFD's detection time (500 ms): a router that took the session down for
		// BFD would have dropped the route by now.
		waitFor(t, "bird's BFD session with node-c no longer Up", 10*time.Second, func() bool {
			out, err := b.Birdc("show", "bfd", "sessions")
			return err == nil && !strings.Contains(lineWith(out, nodeC.String()), "Up")
		})
		e.startSpeaker("node-c")
		e.waitFreshSession("node-c", "tor", restarted)
		waitFor(t, "BFD Up with node-c again", 30*time.Second, func() bool { return bfdUp(t, b, nodeC) })
		e.expectRoute(bird, route, e.nodeIPs(false, all...), 10*time.Second)
		w.end(t)
	})
}

// lineWith is the first line of out that contains s, or "".
func lineWith(out, s string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

// TestBGPPlannedRestartFRR: the planned restart against FRR, a graceful restart helper by
// default (nothing configured for it): node-c's path stays in FRR's BGP table and its next hop
// in the kernel's ECMP route, unchanged, through the restart.
func TestBGPPlannedRestartFRR(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		all := []string{"node-a", "node-b", "node-c"}
		ns, addr := e.Routers[0].NS, e.Routers[0].IPv4.Addr()
		f := netlab.StartFRR(t, ns, frrConfig(addr, e.Nodes))
		t.Cleanup(func() {
			if t.Failed() {
				out, _ := f.Vtysh("show bgp neighbors")
				t.Logf("FRR:\n%s\n%s", out, f.Log())
			}
		})
		peer := bgpPeer("tor", addr, clusterASN, 64520)
		peer.Spec.EnableGracefulRestart = true
		e.createObject(peer)
		e.waitEstablished("tor", 30*time.Second, all...)
		route := e.advertiseWeb(ns, all)
		nodeC := e.nodeIPs(false, "node-c")[0]
		w := watchRoute(t, ns, route, nodeC, func() (string, bool) {
			out, err := f.Vtysh("show ip bgp " + route.String())
			return "FRR has no path via " + nodeC.String() + ": " + strings.TrimSpace(out), err == nil && strings.Contains(out, nodeC.String())
		})
		restarted := e.sessionSince("node-c", "tor")
		e.kill("node-c", syscall.SIGTERM)
		e.startSpeaker("node-c")
		e.waitFreshSession("node-c", "tor", restarted)
		waitFor(t, "FRR's path via node-c fresh (not stale)", 30*time.Second, func() bool {
			out, err := f.Vtysh("show ip bgp " + route.String())
			return err == nil && strings.Contains(out, nodeC.String()) && !strings.Contains(strings.ToLower(out), "stale")
		})
		w.end(t)
	})
}
