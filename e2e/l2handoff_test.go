package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
)

// handoffEnv carries the hand-off lab from the outer test process to the inner one.
const handoffEnv = "PORTICO_E2E_HANDOFF_LAB"

// handoffLab is the L2 lab with a pod network behind every node and one backend pod behind
// node-c, and on every node a stand-in for kube-proxy in nftables: the Service's address DNATed
// to the pod and masqueraded, as kube-proxy does for externalTrafficPolicy: Cluster.
type handoffLab struct {
	l2Lab
	Pod labPod
}

// handoffVIP is the address the connections go to; the pod echoes on echoPort.
var handoffVIP = netip.MustParseAddr("198.51.100.210")

const echoPort = 7000

// inHandoffLab builds the lab in the root process and runs body in the control plane's
// namespace with the control plane and a speaker on every node.
func inHandoffLab(t *testing.T, body func(t *testing.T, e *l2Env, pod labPod)) {
	inHandoffLabWith(t, 0, handoffVIP, body)
}

// inHandoffLabWith is inHandoffLab with routers (r1, ...: as inBGPLab's) on the LAN, and the
// service proxy's rules for vip.
func inHandoffLabWith(t *testing.T, routers int, vip netip.Addr, body func(t *testing.T, e *l2Env, pod labPod)) {
	if raw := os.Getenv(handoffEnv); raw != "" {
		var lab handoffLab
		if err := json.Unmarshal([]byte(raw), &lab); err != nil {
			t.Fatal(err)
		}
		body(t, startEnv(t, &lab.l2Lab), lab.Pod)
		return
	}
	tools := []string{"arping", "setpriv", "nft"}
	if routers > 0 {
		tools = append(tools, "bird", "birdc")
	}
	netlab.Require(t, tools...)
	parallel(t)
	l := netlab.New(t)
	lab := handoffLab{l2Lab: newL2Lab(t, l, 3)}
	lab.addRouters(l, routers)
	var hosts []netlab.Host
	var cidrs []netip.Prefix
	for i, n := range lab.Nodes {
		cidr := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i + 1), 0}), 24)
		l.AddPodNetwork(n.Host, cidr)
		hosts, cidrs = append(hosts, n.Host), append(cidrs, cidr)
	}
	l.RoutePods(hosts, cidrs)
	lab.Pod = labPod{Name: "echo", Node: "node-c", IP: netip.MustParseAddr("10.244.3.10")}
	lab.Pod.NS = l.AddPod(hosts[2], cidrs[2], lab.Pod.Name, lab.Pod.IP)
	rules := fmt.Sprintf(`table ip kubeproxy {
	chain prerouting { type nat hook prerouting priority dstnat; ip daddr %s tcp dport %d dnat to %s:%d; }
	chain postrouting { type nat hook postrouting priority srcnat; ct status dnat masquerade; }
}`, vip, echoPort, lab.Pod.IP, echoPort)
	for _, n := range lab.Nodes {
		l.MustRun("ip", "netns", "exec", n.NS, "sh", "-c", "echo '"+rules+"' | nft -f -")
	}
	reexecIn(t, lab.CP.NS, handoffEnv, lab)
}

// streams are long-lived TCP connections from the client, each sending a line every 10 ms and
// waiting for its echo.
type streams struct {
	mu      sync.Mutex
	conns   []net.Conn
	resets  int
	errs    []string
	worst   time.Duration // the longest wait for one echo
	sent    int
	each    []int  // echoes per connection, since the last window
	ended   []bool // connections broken
	stopped chan struct{}
	wg      sync.WaitGroup
	// patience is how long a connection waits for an echo before it counts as broken.
	patience time.Duration
}

func openStreams(t *testing.T, ns string, to netip.AddrPort, n int) *streams {
	return openStreamsFrom(t, ns, to, make([]int, n), 15*time.Second)
}

// openStreamsFrom opens a stream from each of the client ports (0: any), each connection
// broken once an echo takes longer than patience.
func openStreamsFrom(t *testing.T, ns string, to netip.AddrPort, ports []int, patience time.Duration) *streams {
	s := &streams{stopped: make(chan struct{}), patience: patience}
	must(t, netlab.In(ns, func() error {
		for _, port := range ports {
			d := net.Dialer{Timeout: 5 * time.Second}
			if port != 0 {
				d.LocalAddr = &net.TCPAddr{Port: port}
			}
			c, err := d.Dial("tcp4", to.String())
			if err != nil {
				return err
			}
			s.conns = append(s.conns, c)
		}
		return nil
	}))
	s.each, s.ended = make([]int, len(s.conns)), make([]bool, len(s.conns))
	for i, c := range s.conns {
		s.wg.Add(1)
		go s.run(i, c)
	}
	t.Cleanup(s.stop)
	return s
}

func (s *streams) run(i int, c net.Conn) {
	defer s.wg.Done()
	r := bufio.NewReader(c)
	for seq := 0; ; seq++ {
		select {
		case <-s.stopped:
			return
		case <-time.After(10 * time.Millisecond):
		}
		start := time.Now()
		_ = c.SetDeadline(start.Add(s.patience))
		msg := fmt.Sprintf("%d %d\n", i, seq)
		_, err := c.Write([]byte(msg))
		var line string
		if err == nil {
			line, err = r.ReadString('\n')
		}
		if err == nil && line != msg {
			err = fmt.Errorf("echo %q for %q", line, msg)
		}
		s.mu.Lock()
		if err != nil {
			if errors.Is(err, syscall.ECONNRESET) {
				s.resets++
			}
			s.errs = append(s.errs, fmt.Sprintf("connection %d: %v", i, err))
			s.ended[i] = true
			s.mu.Unlock()
			return
		}
		s.sent++
		s.each[i]++
		s.worst = max(s.worst, time.Since(start))
		s.mu.Unlock()
	}
}

// window reports and clears what the streams saw since the last call.
func (s *streams) window() (sent, resets int, errs []string, worst time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sent, resets, errs, worst = s.sent, s.resets, s.errs, s.worst
	s.sent, s.resets, s.errs, s.worst = 0, 0, nil, 0
	clear(s.each)
	sort.Strings(errs)
	return sent, resets, errs, worst
}

// listsHandoff waits until node's Speaker status lists the hand-off of ip's connections to from.
func listsHandoff(t *testing.T, e *l2Env, node string, ip netip.Addr, from string) {
	waitFor(t, node+"'s Speaker lists the hand-off of "+ip.String()+" to "+from, 10*time.Second, func() bool {
		var sp v1alpha1.Speaker
		if e.c.Get(context.Background(), clientKey(node), &sp) != nil {
			return false
		}
		return slices.ContainsFunc(sp.Status.Handoffs, func(h v1alpha1.Handoff) bool {
			return h.IP == ip.String() && h.Node == from && h.Via == e.node(from).IPv4.Addr().String() && h.PickupUntil != nil
		})
	})
}

// handedOff reads node's hand-off counters: flows and packets (0 while its speaker is down).
func handedOff(t *testing.T, e *l2Env, node string) (flows, packets float64) {
	m, err := scrapeMetrics(context.Background(), e.node(node).IPv4.Addr().String()+":7474")
	if err != nil {
		return 0, 0
	}
	return sum(m, "portico_l2_handoff_flows_total", nil), sum(m, "portico_l2_handoff_packets_total", nil)
}

// after waits until the streams still open have echoed 50 times each, on average, since the
// last window, and returns the window.
func (s *streams) after(t *testing.T, what string) (sent, resets int, errs []string, worst time.Duration) {
	waitFor(t, what, 30*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.sent >= 50*(len(s.conns)-len(s.errs))
	})
	return s.window()
}

// everyOne is after for every connection on its own: each one echoes 50 times, or breaks.
func (s *streams) everyOne(t *testing.T, what string) (sent, resets int, errs []string, worst time.Duration) {
	waitFor(t, what, 30*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, n := range s.each {
			if n < 50 && !s.ended[i] {
				return false
			}
		}
		return true
	})
	return s.window()
}

func (s *streams) stop() {
	select {
	case <-s.stopped:
		return
	default:
	}
	close(s.stopped)
	s.wg.Wait()
	for _, c := range s.conns {
		c.Close()
	}
}

// addressMove is one way of moving an address off its owner while the owner's node stays up,
// and of moving it back.
type addressMove struct {
	name       string
	move, back func(e *l2Env, owner string)
}

var (
	restartSpeaker = func(e *l2Env, owner string) { e.startSpeaker(owner) }
	stopSpeaker    = addressMove{"SIGTERM", func(e *l2Env, owner string) { e.kill(owner, syscall.SIGTERM) }, restartSpeaker}
	killSpeaker    = addressMove{"SIGKILL", func(e *l2Env, owner string) { e.kill(owner, syscall.SIGKILL) }, restartSpeaker}
	cordonOwner    = addressMove{"cordon", cordoned(true), cordoned(false)}
)

func cordoned(on bool) func(e *l2Env, owner string) {
	return func(e *l2Env, owner string) {
		e.setNode(owner, false, func(n *corev1.Node) { n.Spec.Unschedulable = on })
	}
}

// TestL2ConnectionsSurviveMove opens long-lived connections through the address's owner, moves
// the address away while the owner's node stays up (its speaker stopped, or the node cordoned
// as kubectl drain does first) and back (the speaker started again, as in a rolling update, or
// the node uncordoned), and counts the connections that broke.
func TestL2ConnectionsSurviveMove(t *testing.T) {
	inHandoffLab(t, func(t *testing.T, e *l2Env, pod labPod) {
		stop, err := netlab.ServeEcho(pod.NS, echoPort)
		must(t, err)
		t.Cleanup(func() { _ = stop() })
		for _, m := range []addressMove{stopSpeaker, killSpeaker, cordonOwner} {
			t.Run(m.name, func(t *testing.T) {
				e.t = t
				e.create(scenario{name: "handoff-" + strings.ToLower(m.name), ip: handoffVIP})
				owner, next := ownerAndNext(handoffVIP)
				e.expectOwner(handoffVIP, owner)
				survivesMoveAndBack(t, e, netip.AddrPortFrom(handoffVIP, echoPort), owner, next, m, false)
			})
		}
	})
}

// survivesMoveAndBack opens 20 streams to addr through owner, moves the address to next and
// back (the same move dealt to next once the owner is back), with 20 more streams opened
// through next before the move back, and fails when any stream breaks, or when the new owner
// did not hand the streams off each time (alone, or with others when the test opens more
// connections to addr meanwhile: alsoOpening).
func survivesMoveAndBack(t *testing.T, e *l2Env, addr netip.AddrPort, owner, next string, m addressMove, alsoOpening bool) {
	wrongCount := func(flows float64) bool { return flows != 20 && !(alsoOpening && flows > 20) }
	ip := addr.Addr()
	s := openStreams(t, e.Client.NS, addr, 20)
	quiet := func(s *streams, what string) { // every stream answers a few times in a row
		waitFor(t, what, 20*time.Second, func() bool {
			sent, _, errs, _ := s.window()
			return sent > 0 && len(errs) == 0
		})
	}
	quiet(s, "the streams echo through "+owner)
	s.window()
	flowsBefore, packetsBefore := handedOff(t, e, next)
	start := time.Now()
	m.move(e, owner)
	backed := false
	t.Cleanup(func() { // a failure below leaves the owner moved off, not the next subtest
		if !backed {
			m.back(e, owner)
		}
	})
	waitFor(t, "client's entry moves to "+next, 20*time.Second, func() bool {
		return netlab.Neighbour(e.Client.NS, ip) == e.macOf(next)
	})
	moved := time.Since(start)
	sent, resets, errs, worst := s.after(t, "50 echoes per connection after the move")
	t.Logf("%s %s -> %s: client's entry moved after %v; %d echoes, %d resets, %d broken connections, longest echo %v",
		m.name, owner, next, moved.Round(time.Millisecond), sent, resets, len(errs), worst.Round(time.Millisecond))
	if len(errs) > 0 {
		t.Fatalf("%d of 20 connections broke when the address moved from %s to %s: %v", len(errs), owner, next, errs)
	}
	listsHandoff(t, e, next, ip, owner)
	flows, packets := handedOff(t, e, next)
	t.Logf("%s handed off %.0f flows, %.0f packets", next, flows-flowsBefore, packets-packetsBefore)
	if wrongCount(flows - flowsBefore) {
		t.Errorf("%s handed off %.0f flows, want the 20 connections", next, flows-flowsBefore)
	}
	// Connections opened through next meanwhile must survive the move back too: the returning
	// owner hands them off to next. The owner back (its speaker started again, or uncordoned)
	// takes nothing back (placement is sticky), so the same blow dealt to next moves the
	// address back: among the others the hash's choice is the owner.
	s2 := openStreams(t, e.Client.NS, addr, 20)
	quiet(s2, "the new streams echo through "+next)
	flowsBefore, _ = handedOff(t, e, owner) // 0 from a stopped speaker; a new one counts from 0
	logged := e.logOffsets()
	m.back(e, owner)
	backed = true
	if m.name != cordonOwner.name {
		e.waitJoined(owner, logged)
	}
	m.move(e, next)
	nextHealed := false
	heal := func() {
		if !nextHealed {
			nextHealed = true
			m.back(e, next)
		}
	}
	t.Cleanup(heal)
	waitFor(t, "client's entry back to "+owner+" and its Speaker lists "+ip.String(), 20*time.Second, func() bool {
		// Until the taker's status lists the address, a killed speaker's stale claim is
		// the latest, and next started again would take it back.
		return netlab.Neighbour(e.Client.NS, ip) == e.macOf(owner) && slices.Contains(e.announcers(ip), owner)
	})
	for _, st := range []struct {
		what string
		s    *streams
	}{{"opened through " + owner, s}, {"opened through " + next, s2}} {
		sent, resets, errs, worst = st.s.after(t, "50 echoes per connection after the move back")
		t.Logf("back to %s, connections %s: %d echoes, %d resets, %d broken connections, longest echo %v",
			owner, st.what, sent, resets, len(errs), worst.Round(time.Millisecond))
		if len(errs) > 0 {
			t.Errorf("%d of 20 connections %s broke when the address moved back to %s: %v", len(errs), st.what, owner, errs)
		}
	}
	logged = e.logOffsets()
	heal() // next up again, as after a rolling update: its hand-off state goes once it sees the owner
	listsHandoff(t, e, owner, ip, next)
	waitFor(t, owner+" hands off the connections opened through "+next, 10*time.Second, func() bool {
		flows, _ = handedOff(t, e, owner)
		return flows-flowsBefore >= 20
	})
	if wrongCount(flows - flowsBefore) {
		t.Errorf("%s handed off %.0f flows, want the 20 connections opened through %s", owner, flows-flowsBefore, next)
	}
	if m.name != cordonOwner.name {
		e.waitJoined(next, logged) // a restart takes seconds under load; the linger starts at its first plan
	}
	waitFor(t, next+" hands nothing of "+ip.String()+" off once "+owner+" answers again", labHandoffLinger+10*time.Second, func() bool {
		out, err := exec.Command("ip", "-n", e.node(next).NS, "route", "show", "table", "3580").Output()
		return err == nil && !strings.Contains(string(out), ip.String()+" ")
	})
	s.stop()
	s2.stop()
}

// TestDataplaneConnectionsSurviveMove is TestL2ConnectionsSurviveMove with the real
// kube-proxy (nftables mode) and real Services: the echo Service's connections spread over the
// three pods, one per node, and kube-proxy picks the pod of a picked-up flow afresh.
func TestDataplaneConnectionsSurviveMove(t *testing.T) {
	inDataplaneLab(t, func(t *testing.T, e *dpEnv) {
		e.serveEcho(t)
		for _, m := range []addressMove{stopSpeaker, killSpeaker, cordonOwner} {
			t.Run(m.name, func(t *testing.T) {
				e.t = t
				svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo-" + strings.ToLower(m.name), Namespace: "default"},
					Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "gitea"},
						Ports: []corev1.ServicePort{{Name: "echo", Port: echoPort, TargetPort: intstr.FromInt32(echoPort)}}}}
				ip := e.served(svc)
				owner, next := ownerAndNext(ip)
				e.expectOwner(ip, owner)
				survivesMoveAndBack(t, e.l2Env, netip.AddrPortFrom(ip, echoPort), owner, next, m, false)
			})
		}
	})
}

// serveEcho has every pod of the lab echo on echoPort until the test ends.
func (e *dpEnv) serveEcho(t *testing.T) {
	for _, p := range e.lab.Pods {
		stop, err := netlab.ServeEcho(p.NS, echoPort)
		must(t, err)
		t.Cleanup(func() { _ = stop() })
	}
}
