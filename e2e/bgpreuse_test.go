package e2e

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-lb/portico/internal/netlab"
)

// TestBGPDrainReusedClientPorts: a client reuses its ports (busy clients run through them in
// minutes; clients behind NAT share them). A short connection from port P, closed by the
// server, leaves its node N1 a conntrack entry in TIME_WAIT for two minutes. With node-c
// drained, P hashes to another node N2, and a long-lived connection from P lands there. At the
// uncordon the router hashes it back to N1, which lists it as N2's flow; but N1's entry of the
// earlier connection catches its packets (not `ct state new`, so not picked up): before the
// fix they went nowhere and the connection stalled for as long as the entry lived. Every
// connection must keep echoing, none waiting a second for an echo (its cadence is 10 ms).
func TestBGPDrainReusedClientPorts(t *testing.T) {
	vip := netip.MustParseAddr("203.0.113.10")
	inHandoffLabWith(t, 1, vip, func(t *testing.T, e *l2Env, pod labPod) {
		all := []string{"node-a", "node-b", "node-c"}
		router, route, _ := drainLab(t, e, pod, vip)
		to := netip.AddrPortFrom(vip, echoPort)

		// One short connection from each port, below the ephemeral range so that nothing else
		// takes them; the server closes it, the node that held it keeps TIME_WAIT.
		first := map[int]string{}
		for port := 20000; port < 20060; port++ {
			first[port] = hopFor(t, e, router, vip, port)
			must(t, netlab.In(router, func() error { return echoOnce(to, port) }))
		}

		e.setNode("node-c", false, func(n *corev1.Node) { n.Spec.Unschedulable = true })
		uncordoned := false
		t.Cleanup(func() {
			if !uncordoned {
				e.setNode("node-c", false, func(n *corev1.Node) { n.Spec.Unschedulable = false })
			}
		})
		e.expectRoute(router, route, e.nodeIPs(false, "node-a", "node-b"), 30*time.Second)
		var moved []int
		for port := 20000; port < 20060; port++ {
			if hopFor(t, e, router, vip, port) != first[port] {
				moved = append(moved, port)
			}
		}
		if len(moved) < 3 {
			t.Fatalf("only %d of 60 ports hash to another node with node-c drained: %v", len(moved), moved)
		}
		// Checked before the connections open: a flow-sharing round after that may list them,
		// and their listing is what deletes the entries.
		for _, port := range moved {
			if !timeWaitOn(t, e.node(first[port]).NS, vip, port) {
				for _, n := range all {
					out, _ := exec.Command("ip", "netns", "exec", e.node(n).NS, "conntrack", "-L", "-p", "tcp", "--sport", fmt.Sprint(port)).CombinedOutput()
					t.Logf("DEBUG %s: %s", n, out)
				}
				t.Fatalf("%s has no TIME_WAIT entry of the earlier connection from port %d", first[port], port)
			}
		}
		s := openStreamsFrom(t, router, to, moved, time.Second)
		s.after(t, "50 echoes per connection from the reused ports")
		t.Logf("%d connections from ports whose earlier connection's node had its entry in TIME_WAIT", len(moved))

		e.setNode("node-c", false, func(n *corev1.Node) { n.Spec.Unschedulable = false })
		uncordoned = true
		e.expectRoute(router, route, e.nodeIPs(false, all...), 30*time.Second)
		sent, resets, errs, worst := s.after(t, "50 echoes per connection after the uncordon")
		t.Logf("after the uncordon: %d echoes, %d resets, %d broken connections, longest echo %v", sent, resets, len(errs), worst.Round(time.Millisecond))
		for _, err := range errs {
			t.Errorf("a connection back on the node of its port's earlier connection broke: %s", err)
		}
		for _, port := range moved {
			if now := hopFor(t, e, router, vip, port); now != first[port] {
				t.Errorf("port %d hashes to %s after the uncordon, not back to %s", port, now, first[port])
			}
		}
	})
}

// echoOnce connects from port, says bye and waits for the server to close (run it in the
// client's namespace).
func echoOnce(to netip.AddrPort, port int) error {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{Port: port}}
	c, err := d.Dial("tcp4", to.String())
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("bye\n")); err != nil {
		return err
	}
	if _, err := io.ReadAll(c); err != nil { // the echo, then the server's FIN
		return fmt.Errorf("port %d: %w", port, err)
	}
	return nil
}

// hopFor is the node the router's kernel sends a connection from port to vip:echoPort to.
func hopFor(t *testing.T, e *l2Env, router string, vip netip.Addr, port int) string {
	t.Helper()
	// From the router's address: the kernel hashes the connection's source address too.
	out, err := exec.Command("ip", "netns", "exec", router, "ip", "route", "get", vip.String(), "from", e.Routers[0].IPv4.Addr().String(),
		"ipproto", "tcp", "sport", fmt.Sprint(port), "dport", fmt.Sprint(echoPort)).CombinedOutput()
	must(t, err)
	f := strings.Fields(string(out))
	for i := range len(f) - 1 {
		if f[i] == "via" {
			for _, n := range e.Nodes {
				if n.IPv4.Addr().String() == f[i+1] {
					return n.Name
				}
			}
		}
	}
	t.Fatalf("no node in the router's route for port %d: %s", port, out)
	return ""
}

// timeWaitOn reports whether ns's conntrack has an entry in TIME_WAIT for a connection from
// port to vip:echoPort.
func timeWaitOn(t *testing.T, ns string, vip netip.Addr, port int) bool {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "conntrack", "-L", "-p", "tcp", "-d", vip.String(),
		"--sport", fmt.Sprint(port), "--dport", fmt.Sprint(echoPort), "--state", "TIME_WAIT").Output()
	must(t, err)
	return strings.Contains(string(out), "TIME_WAIT")
}
