package guard_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/speaker/guard"
)

var (
	lbIP  = netip.MustParseAddr("10.0.0.200")
	pods  = netip.MustParsePrefix("10.244.1.0/24")
	podIP = netip.MustParseAddr("10.244.1.2")
)

// lab is a client and a node on one LAN, the node forwarding to a pod that serves HTTP on 8080.
// The client's neighbour entry sends lbIP to the node, as the speaker's ARP answer would.
type lab struct {
	l            *netlab.Lab
	client, node netlab.Host
}

func newLab(t *testing.T) *lab {
	netlab.Require(t, "nft")
	l := netlab.New(t)
	client := l.AddHost("client", "02:00:00:00:00:01", "10.0.0.1/24", "2001:db8::1/64")
	node := l.AddHost("node", "02:00:00:00:00:0a", "10.0.0.11/24", "2001:db8::11/64")
	l.AddPodNetwork(node, pods)
	pod := l.AddPod(node, pods, "pod", podIP)
	stop, err := netlab.ServePod(pod, "web", 8080)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	l.MustRun("ip", "-n", client.NS, "neigh", "replace", lbIP.String(), "lladdr", node.MAC.String(), "dev", "eth0", "nud", "permanent")
	// The node's service proxy runs (its chains, and so connection tracking, are there) but has
	// no rule for this Service yet.
	nft(t, node.NS, `table ip proxy {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
		ct state invalid drop
	}
}`)
	return &lab{l: l, client: client, node: node}
}

func nft(t *testing.T, ns, ruleset string) {
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, out)
	}
}

// proxyRule is the proxy's rule for the Service, late: lbIP:80 translated to the pod.
func (lb *lab) proxyRule(t *testing.T) {
	nft(t, lb.node.NS, "add rule ip proxy prerouting ip daddr "+lbIP.String()+" tcp dport 80 dnat to "+podIP.String()+":8080")
}

// untranslated reports whether the node's connection tracking holds a flow to lbIP that was
// not translated (its reply would come from lbIP itself).
func (lb *lab) untranslated() bool {
	flows, _ := netlab.UntranslatedFlows(lb.node.NS, lbIP)
	return len(flows) > 0
}

// connect dials lbIP:80 from the client once, for as long as within (the kernel retransmits
// the SYN meanwhile, after 1 s and 3 s), and returns the pod's answer.
func (lb *lab) connect(within time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		var conn net.Conn
		err := netlab.In(lb.client.NS, func() (err error) {
			ctx, cancel := context.WithTimeout(context.Background(), within)
			defer cancel()
			conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", netip.AddrPortFrom(lbIP, 80).String())
			return err
		})
		if err != nil {
			done <- err
			return
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, "GET / HTTP/1.0\r\n\r\n")
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(conn)
		if !strings.Contains(string(b), "web ") {
			done <- errors.New("no answer from the pod: " + string(b))
			return
		}
		done <- nil
	}()
	return done
}

// Without the guard, a SYN that reaches the node before the proxy's rule is routed on
// untranslated, and the retransmissions of that connection stay untranslated after the rule
// exists: the client never connects. This is what the guard is for; the test shows the lab
// reproduces it.
func TestWithoutGuardRetransmissionsStayUntranslated(t *testing.T) {
	lb := newLab(t)
	done := lb.connect(5 * time.Second)
	netlab.WaitFor(t, "the first SYN tracked untranslated", 5*time.Second, lb.untranslated)
	lb.proxyRule(t)
	if err := <-done; err == nil {
		t.Fatal("the client connected: the retransmissions were translated without the guard, so this lab does not show the problem")
	}
}

// With the guard, the same SYN is dropped before it is tracked, and the retransmission after
// the proxy's rule is translated: the client connects, one retransmission late.
func TestGuardLetsRetransmissionsBeTranslated(t *testing.T) {
	lb := newLab(t)
	var g *guard.Guard
	if err := netlab.In(lb.node.NS, func() (err error) {
		g, err = guard.Open(0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Add([]netip.Addr{lbIP, netip.MustParseAddr("2001:db8::200")}); err != nil {
		t.Fatal(err)
	}
	done := lb.connect(5 * time.Second)
	netlab.WaitFor(t, "the guard dropping the first SYN", 5*time.Second, func() bool {
		n, err := g.Dropped()
		return err == nil && n > 0
	})
	if lb.untranslated() {
		t.Fatal("the dropped SYN left an untranslated flow in connection tracking")
	}
	lb.proxyRule(t)
	if err := <-done; err != nil {
		t.Fatalf("the client did not connect after the proxy's rule: %v", err)
	}
	// Translated traffic to a guarded address passes: a second connection goes straight through.
	if err := <-lb.connect(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	dropped, _ := g.Dropped()
	if err := g.Remove([]netip.Addr{lbIP}); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if out := lb.l.MustRun("ip", "netns", "exec", lb.node.NS, "nft", "list", "tables"); strings.Contains(out, guard.TableName) {
		t.Fatalf("the table outlived Close:\n%s", out)
	}
	t.Logf("%d packet(s) dropped", dropped)
}

// Open replaces what an earlier run left, so a restarted speaker starts from an empty set: the
// second Open's table holds none of the first one's addresses and one rule per family, not the
// leftover's beside its own; its Close then leaves nothing.
func TestOpenReplacesALeftover(t *testing.T) {
	lb := newLab(t)
	var reopened string
	err := netlab.In(lb.node.NS, func() error {
		first, err := guard.Open(0)
		if err != nil {
			return err
		}
		if err := first.Add([]netip.Addr{lbIP}); err != nil {
			return err
		}
		if out := netlab.NFTTable(lb.node.NS, "inet", guard.TableName); !strings.Contains(out, "elements = { "+lbIP.String()+" }") {
			return errors.New("the first table lacks the address it was given, so the test cannot tell a leftover:\n" + out)
		}
		// The first speaker dies without Close; the next one opens the table again.
		second, err := guard.Open(0)
		if err != nil {
			return err
		}
		reopened = netlab.NFTTable(lb.node.NS, "inet", guard.TableName)
		return second.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(reopened, lbIP.String()) {
		t.Errorf("the reopened table still guards the leftover's %s:\n%s", lbIP, reopened)
	}
	if n := strings.Count(reopened, " drop"); n != 2 {
		t.Errorf("the reopened table has %d drop rules, want 2 (one per family):\n%s", n, reopened)
	}
	if out := lb.l.MustRun("ip", "netns", "exec", lb.node.NS, "nft", "list", "tables"); strings.Contains(out, guard.TableName) {
		t.Fatalf("a table is left:\n%s", out)
	}
}

// nft itself reads the table back as the rules and elements the package documents, for both
// families (the IPv6 rule is not exercised by traffic above).
func TestTableAsNftReadsIt(t *testing.T) {
	lb := newLab(t)
	v6 := netip.MustParseAddr("2001:db8::200")
	err := netlab.In(lb.node.NS, func() error {
		g, err := guard.Open(0)
		if err != nil {
			return err
		}
		return g.Add([]netip.Addr{lbIP, v6, netip.AddrFrom16(lbIP.As16())}) // the mapped form is lbIP
	})
	if err != nil {
		t.Fatal(err)
	}
	out := netlab.NFTTable(lb.node.NS, "inet", guard.TableName)
	for _, want := range []string{
		"hook forward priority filter",
		"ip daddr @announced4 ct status ! dnat counter packets 0 bytes 0 drop",
		"ip6 daddr @announced6 ct status ! dnat counter packets 0 bytes 0 drop",
		"elements = { " + lbIP.String() + " }",
		"elements = { " + v6.String() + " }",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("nft list table inet %s lacks %q:\n%s", guard.TableName, want, out)
		}
	}
}
