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
	vip   = netip.MustParseAddr("10.0.0.200")
	pods  = netip.MustParsePrefix("10.244.1.0/24")
	podIP = netip.MustParseAddr("10.244.1.2")
)

const port = 7000

// lab is a client and two nodes on one LAN, old and new, each with a stand-in for kube-proxy
// (the address DNATed to a pod behind old and masqueraded, as for externalTrafficPolicy:
// Cluster). The client's neighbour entry for the address is set by hand, as a speaker's ARP
// answer would set it.
type lab struct {
	l                *netlab.Lab
	client, old, new netlab.Host
}

func newLab(t *testing.T) *lab {
	netlab.Require(t, "nft")
	l := netlab.New(t)
	lb := &lab{l: l,
		client: l.AddHost("client", "02:00:00:00:00:01", "10.0.0.1/24", "2001:db8::1/64"),
		old:    l.AddHost("old", "02:00:00:00:00:0a", "10.0.0.11/24", "2001:db8::11/64"),
		new:    l.AddHost("new", "02:00:00:00:00:0b", "10.0.0.12/24", "2001:db8::12/64")}
	l.AddPodNetwork(lb.old, pods)
	pod := l.AddPod(lb.old, pods, "pod", podIP)
	l.MustRun("ip", "netns", "exec", lb.new.NS, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	l.MustRun("ip", "-n", lb.new.NS, "route", "add", pods.String(), "via", lb.old.IPv4.Addr().String())
	for _, n := range []netlab.Host{lb.old, lb.new} {
		nft(t, n.NS, fmt.Sprintf(`table ip kubeproxy {
	chain prerouting { type nat hook prerouting priority dstnat; ip daddr %s tcp dport %d dnat to %s:%d; }
	chain postrouting { type nat hook postrouting priority srcnat; ct status dnat masquerade; }
}`, vip, port, podIP, port))
	}
	echo(t, pod)
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
	lb.l.MustRun("ip", "-n", lb.client.NS, "neigh", "replace", vip.String(), "lladdr", n.MAC.String(), "dev", "eth0", "nud", "permanent")
}

// echo answers every line with the same line, in namespace ns, until the test ends.
func echo(t *testing.T, ns string) {
	var l net.Listener
	if err := netlab.In(ns, func() (err error) {
		l, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadBytes('\n')
					if err != nil {
						return
					}
					if _, err := c.Write(line); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// dial opens n connections from the client to the address.
func (lb *lab) dial(t *testing.T, n int) []net.Conn {
	var conns []net.Conn
	err := netlab.In(lb.client.NS, func() error {
		for range n {
			c, err := net.DialTimeout("tcp4", netip.AddrPortFrom(vip, port).String(), 5*time.Second)
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
	t.Run("without the hand-off the move resets the connections", func(t *testing.T) {
		lb := newLab(t)
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
		lb := newLab(t)
		conns := lb.dial(t, 5)
		if errs := exchange(conns, 0); len(errs) > 0 {
			t.Fatal(errs)
		}
		h := open(t, lb.new.NS)
		in(t, lb.new.NS, func() error { return h.Set(vip, lb.old.IPv4.Addr(), time.Minute) })
		lb.answer(lb.new)
		for round := 1; round <= 3; round++ {
			if errs := exchange(conns, round); len(errs) > 0 {
				t.Log(run(lb.new.NS, "nft", "list", "ruleset"), run(lb.new.NS, "ip", "rule"),
					run(lb.new.NS, "ip", "route", "show", "table", "all"))
				t.Fatalf("round %d: %v", round, errs)
			}
		}
		// A new connection is the new node's own.
		fresh := lb.dial(t, 1)
		if errs := exchange(fresh, 0); len(errs) > 0 {
			t.Fatal(errs)
		}
		var flows, packets uint64
		in(t, lb.new.NS, func() (err error) { flows, packets, err = h.Counts(); return err })
		if flows != 5 || packets < 15 {
			t.Errorf("counted %d flows and %d packets handed off, want 5 and at least 15", flows, packets)
		}

		// The speaker stops (a rolling update) and its successor starts: the flows go on, and
		// the successor finds the entry.
		in(t, lb.new.NS, h.Release)
		if errs := exchange(conns, 4); len(errs) > 0 {
			t.Fatalf("after the speaker's stop: %v", errs)
		}
		h = open(t, lb.new.NS)
		adopted := h.Adopted()
		if len(adopted) != 1 || adopted[0].Addr != vip || adopted[0].Via != lb.old.IPv4.Addr() ||
			time.Until(adopted[0].Expires) <= 0 || time.Until(adopted[0].Expires) > time.Minute {
			t.Fatalf("adopted %+v, want %v via %v expiring within a minute", adopted, vip, lb.old.IPv4.Addr())
		}
		if errs := exchange(conns, 5); len(errs) > 0 {
			t.Fatalf("after the successor's start: %v", errs)
		}

		// Cleared (the hand-off switched off), nothing is left.
		in(t, lb.new.NS, h.Clear)
		for what, out := range map[string]string{
			"table": run(lb.new.NS, "nft", "list", "tables"), "rule": run(lb.new.NS, "ip", "rule"),
			"IPv6 rule": run(lb.new.NS, "ip", "-6", "rule"), "route": run(lb.new.NS, "ip", "route", "show", "table", "3580")} {
			if strings.Contains(out, "portico-handoff") || strings.Contains(out, "3580") || strings.Contains(out, vip.String()) {
				t.Errorf("%s left after Clear: %s", what, out)
			}
		}
	})
}

func run(ns string, args ...string) string {
	out, _ := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	return string(out)
}
