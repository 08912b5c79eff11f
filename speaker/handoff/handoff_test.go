package handoff_test

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/speaker/handoff"
)

var (
	pods  = netip.MustParsePrefix("10.244.1.0/24")
	podIP = netip.MustParseAddr("10.244.1.2")
	// The pod's IPv6 network, beside the IPv4 one netlab makes.
	pods6  = netip.MustParsePrefix("fd00:244:1::/64")
	podIP6 = netip.MustParseAddr("fd00:244:1::2")
)

const port = 7000

// lab is a client and two nodes on one LAN, old and new, each with a stand-in for kube-proxy
// (the address DNATed to a pod behind old and masqueraded, as for externalTrafficPolicy:
// Cluster). The client's neighbour entry for the address is set by hand, as a speaker's ARP
// answer would set it.
type lab struct {
	l                *netlab.Lab
	client, old, new netlab.Host
	vip              netip.Addr // 10.0.0.200, or 2001:db8::200
}

// oldAddr is the old node's address of the address's family.
func (lb *lab) oldAddr() netip.Addr {
	if lb.vip.Is4() {
		return lb.old.IPv4.Addr()
	}
	return lb.old.IPv6.Addr()
}

func newLab(t *testing.T, v6 bool) *lab {
	netlab.Require(t, "nft")
	l := netlab.New(t)
	lb := &lab{l: l,
		client: l.AddHost("client", "02:00:00:00:00:01", "10.0.0.1/24", "2001:db8::1/64"),
		old:    l.AddHost("old", "02:00:00:00:00:0a", "10.0.0.11/24", "2001:db8::11/64"),
		new:    l.AddHost("new", "02:00:00:00:00:0b", "10.0.0.12/24", "2001:db8::12/64"),
		vip:    netip.MustParseAddr("10.0.0.200")}
	l.AddPodNetwork(lb.old, pods)
	pod := l.AddPod(lb.old, pods, "pod", podIP)
	l.MustRun("ip", "-n", lb.old.NS, "addr", "add", netip.PrefixFrom(pods6.Addr().Next(), 64).String(), "dev", "cni0", "nodad")
	l.MustRun("ip", "-n", pod, "addr", "add", netip.PrefixFrom(podIP6, 64).String(), "dev", "eth0", "nodad")
	l.MustRun("ip", "-n", pod, "-6", "route", "add", "default", "via", pods6.Addr().Next().String())
	for _, n := range []netlab.Host{lb.old, lb.new} {
		l.MustRun("ip", "netns", "exec", n.NS, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	}
	l.MustRun("ip", "-n", lb.new.NS, "route", "add", pods.String(), "via", lb.old.IPv4.Addr().String())
	l.MustRun("ip", "-n", lb.new.NS, "-6", "route", "add", pods6.String(), "via", lb.old.IPv6.Addr().String())
	dnat := fmt.Sprintf("ip daddr %s tcp dport %d dnat to %s:%d", lb.vip, port, podIP, port)
	if v6 {
		lb.vip = netip.MustParseAddr("2001:db8::200")
		dnat = fmt.Sprintf("ip6 daddr %s tcp dport %d dnat to [%s]:%d", lb.vip, port, podIP6, port)
	}
	for _, n := range []netlab.Host{lb.old, lb.new} {
		nft(t, n.NS, fmt.Sprintf(`table inet kubeproxy {
	chain prerouting { type nat hook prerouting priority dstnat; %s; }
	chain postrouting { type nat hook postrouting priority srcnat; ct status dnat masquerade; }
}`, dnat))
	}
	stop, err := netlab.ServeEcho(pod, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	lb.answer(lb.old)
	return lb
}

func nft(t *testing.T, ns, ruleset string) {
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, out)
	}
}

// answer points the client's entry for the address at node n.
func (lb *lab) answer(n netlab.Host) {
	lb.l.MustRun("ip", "-n", lb.client.NS, "neigh", "replace", lb.vip.String(), "lladdr", n.MAC.String(), "dev", "eth0", "nud", "permanent")
}

// dial opens n connections from the client to the address.
func (lb *lab) dial(t *testing.T, n int) []net.Conn {
	var conns []net.Conn
	err := netlab.In(lb.client.NS, func() error {
		for range n {
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(lb.vip, port).String(), 5*time.Second)
			if err != nil {
				return err
			}
			conns = append(conns, c)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	return conns
}

// exchange sends one line on every connection and reads its echo; it returns the failures.
func exchange(conns []net.Conn, round int) []error {
	var errs []error
	for i, c := range conns {
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		msg := fmt.Sprintf("%d %d\n", i, round)
		_, err := c.Write([]byte(msg))
		if err == nil {
			var line string
			line, err = bufio.NewReader(c).ReadString('\n')
			if err == nil && line != msg {
				err = fmt.Errorf("echo %q", line)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("connection %d: %w", i, err))
		}
	}
	return errs
}

// open opens the hand-off in namespace ns; its methods that touch routes must run there too.
func open(t *testing.T, ns string) *handoff.Handoff {
	var h *handoff.Handoff
	if err := netlab.In(ns, func() (err error) {
		h, err = handoff.Open(handoff.Defaults)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return h
}

func in(t *testing.T, ns string, fn func() error) {
	t.Helper()
	if err := netlab.In(ns, fn); err != nil {
		t.Fatal(err)
	}
}

// TestHandoff: connections opened through the old node survive the address's move to the new
// node when the new node hands them off; without it the new node's proxy resets them.
func TestHandoff(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "IPv4", true: "IPv6"}[v6], func(t *testing.T) { testHandoff(t, v6) })
	}
}

func testHandoff(t *testing.T, v6 bool) {
	t.Run("without the hand-off the move resets the connections", func(t *testing.T) {
		lb := newLab(t, v6)
		conns := lb.dial(t, 5)
		if errs := exchange(conns, 0); len(errs) > 0 {
			t.Fatal(errs)
		}
		lb.answer(lb.new)
		errs := exchange(conns, 1)
		if len(errs) != len(conns) || !strings.Contains(errs[0].Error(), "connection reset by peer") {
			t.Fatalf("want every connection reset, got %v", errs)
		}
	})
	t.Run("with the hand-off they survive", func(t *testing.T) {
		lb := newLab(t, v6)
		conns := lb.dial(t, 5)
		if errs := exchange(conns, 0); len(errs) > 0 {
			t.Fatal(errs)
		}
		h := open(t, lb.new.NS)
		in(t, lb.new.NS, func() error { return h.Set(lb.vip, lb.oldAddr(), time.Minute) })
		lb.answer(lb.new)
		for round := 1; round <= 3; round++ {
			if errs := exchange(conns, round); len(errs) > 0 {
				t.Log(run(lb.new.NS, "nft", "list", "ruleset"), run(lb.new.NS, "ip", "rule"),
					run(lb.new.NS, "ip", "route", "show", "table", "all"))
				t.Fatalf("round %d: %v", round, errs)
			}
		}
		lb.freshIsNewNodes(t, h.Counts)

		// The speaker stops (a rolling update) and its successor starts: the flows go on, and
		// the successor finds the entry.
		in(t, lb.new.NS, h.Release)
		if errs := exchange(conns, 4); len(errs) > 0 {
			t.Fatalf("after the speaker's stop: %v", errs)
		}
		h = open(t, lb.new.NS)
		adopted := h.Adopted()
		if len(adopted) != 1 || adopted[0].Addr != lb.vip || adopted[0].Via != lb.oldAddr() ||
			time.Until(adopted[0].Expires) <= 0 || time.Until(adopted[0].Expires) > time.Minute {
			t.Fatalf("adopted %+v, want %v via %v expiring within a minute", adopted, lb.vip, lb.oldAddr())
		}
		if errs := exchange(conns, 5); len(errs) > 0 {
			t.Fatalf("after the successor's start: %v", errs)
		}
		// One rule, of the address's family: the other has nothing handed off, so no rule.
		for _, family := range []string{"-4", "-6"} {
			want := 0
			if (family == "-4") == lb.vip.Is4() {
				want = 1
			}
			if rules := run(lb.new.NS, "ip", family, "rule"); strings.Count(rules, "lookup 3580") != want {
				t.Errorf("ip %s rule after the successor's start, want %d hand-off rules:\n%s", family, want, rules)
			}
		}

		// Cleared (the hand-off switched off), nothing is left.
		in(t, lb.new.NS, h.Clear)
		leftNothing(t, lb.new.NS, "3580", lb.vip.String())
	})
}

func run(ns string, args ...string) string {
	out, _ := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	return string(out)
}

// TestFlowHandoff: the flows the old node holds (HeldFlows), listed at the new node for the
// old one (SetFlows), survive the client's move to the new node: the per-flow hand-off flow
// sharing uses over BGP, where one address's flows go to different nodes.
func TestFlowHandoff(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "IPv4", true: "IPv6"}[v6], func(t *testing.T) { testFlowHandoff(t, v6) })
	}
}

func testFlowHandoff(t *testing.T, v6 bool) {
	lb := newLab(t, v6)
	conns := lb.dial(t, 5)
	if errs := exchange(conns, 0); len(errs) > 0 {
		t.Fatal(errs)
	}
	old := open(t, lb.old.NS)
	var held map[netip.Addr][]handoff.Flow
	in(t, lb.old.NS, func() (err error) { held, err = old.HeldFlows([]netip.Addr{lb.vip}, 100); return err })
	if len(held[lb.vip]) != 5 {
		t.Fatalf("the old node holds %v, want the 5 connections to %v", held, lb.vip)
	}
	h := open(t, lb.new.NS)
	var listed int
	in(t, lb.new.NS, func() (err error) { listed, err = h.SetFlows(lb.oldAddr(), held[lb.vip], time.Minute); return err })
	if listed != 5 {
		t.Fatalf("listed %d flows, want 5", listed)
	}
	lb.answer(lb.new)
	for round := 1; round <= 3; round++ {
		if errs := exchange(conns, round); len(errs) > 0 {
			t.Log(run(lb.new.NS, "nft", "list", "ruleset"), run(lb.new.NS, "ip", "rule"), run(lb.new.NS, "ip", "route", "show", "table", "all"))
			t.Fatalf("round %d: %v", round, errs)
		}
	}
	lb.freshIsNewNodes(t, h.FlowCounts)

	// The speaker stops and its successor starts: the flows go on by their slot.
	in(t, lb.new.NS, h.Release)
	h = open(t, lb.new.NS)
	if slots := h.Slots(); len(slots) != 1 || slots[1] != lb.oldAddr() {
		t.Fatalf("the successor adopted slots %v, want 1: %v", slots, lb.oldAddr())
	}
	if errs := exchange(conns, 4); len(errs) > 0 {
		t.Fatalf("after the successor's start: %v", errs)
	}

	// A slot goes back only once no listed flow refers to it: the successor's maps start empty,
	// so the old node's flows listed again, and a second node address (the client's, for the
	// test) with one flow listed for a second.
	in(t, lb.new.NS, func() error { _, err := h.SetFlows(lb.oldAddr(), held[lb.vip], time.Minute); return err })
	clientAddr := lb.client.IPv4.Addr()
	if v6 {
		clientAddr = lb.client.IPv6.Addr()
	}
	gone := handoff.Flow{Client: netip.AddrPortFrom(clientAddr, 9), Service: netip.AddrPortFrom(lb.vip, port)}
	in(t, lb.new.NS, func() error { _, err := h.SetFlows(clientAddr, []handoff.Flow{gone}, time.Second); return err })
	in(t, lb.new.NS, func() error {
		if err := h.RemoveSlot(lb.oldAddr()); err == nil {
			return fmt.Errorf("gave back the slot of %v while 5 listed flows refer to it", lb.oldAddr())
		}
		return nil
	})
	netlab.WaitFor(t, "the second slot given back once its flow expired", 30*time.Second, func() bool {
		var err error
		in(t, lb.new.NS, func() error { err = h.RemoveSlot(clientAddr); return nil })
		return err == nil
	})
	if slots := h.Slots(); len(slots) != 1 || slots[1] != lb.oldAddr() {
		t.Fatalf("slots %v after giving the second back, want 1: %v", slots, lb.oldAddr())
	}
	family := "-4"
	if v6 {
		family = "-6"
	}
	if out := run(lb.new.NS, "ip", family, "rule") + run(lb.new.NS, "ip", family, "route", "show", "table", "3582"); strings.Contains(out, "3582") || strings.Contains(out, "via") {
		t.Errorf("the second slot's rule or route left:\n%s", out)
	}
	if errs := exchange(conns, 5); len(errs) > 0 {
		t.Fatalf("after the second slot went: %v", errs)
	}

	in(t, lb.new.NS, h.Clear)
	leftNothing(t, lb.new.NS, "3581", "via")
}

// freshIsNewNodes checks that a new connection is the new node's own (answered), and that
// counts, read at the new node, counted the 5 connections handed off and 3 rounds of their
// packets at least, not the new one.
func (lb *lab) freshIsNewNodes(t *testing.T, counts func() (flows, packets uint64, err error)) {
	t.Helper()
	if errs := exchange(lb.dial(t, 1), 0); len(errs) > 0 {
		t.Fatal(errs)
	}
	var flows, packets uint64
	in(t, lb.new.NS, func() (err error) { flows, packets, err = counts(); return err })
	if flows != 5 || packets < 15 {
		t.Errorf("counted %d flows and %d packets handed off, want 5 and at least 15", flows, packets)
	}
}

// leftNothing fails t if ns has the hand-off's table, a rule or route of routing table table,
// or a route with what in it, after Clear.
func leftNothing(t *testing.T, ns, table, what string) {
	t.Helper()
	for name, out := range map[string]string{
		"table": run(ns, "nft", "list", "tables"), "rule": run(ns, "ip", "rule"),
		"IPv6 rule": run(ns, "ip", "-6", "rule"), "route": run(ns, "ip", "route", "show", "table", table),
		"IPv6 route": run(ns, "ip", "-6", "route", "show", "table", table)} {
		if strings.Contains(out, "portico-handoff") || strings.Contains(out, table) || strings.Contains(out, what) {
			t.Errorf("%s left after Clear: %s", name, out)
		}
	}
}
