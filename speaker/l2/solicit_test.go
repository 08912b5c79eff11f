package l2

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
)

// TestSolicitNeighbourAfterPartition: a node whose link was down holds INCOMPLETE neighbour
// entries for the others, and its kernel would ask again only after retrans_time (here set to a
// minute, so that only the solicitation can resolve them within the test). One
// SolicitNeighbour per address, IPv4 and IPv6, fills the kernel's entries with the other
// node's MAC; once they hold it, nothing more is asked.
func TestSolicitNeighbourAfterPartition(t *testing.T) {
	netlab.Require(t, "ping")
	lab := netlab.New(t)
	node := lab.AddHost("a", "02:00:00:00:00:0a", "198.51.100.11/24", "2001:db8:1::11/64")
	other := lab.AddHost("b", "02:00:00:00:00:0b", "198.51.100.12/24", "2001:db8:1::12/64")
	lab.MustRun("ip", "netns", "exec", node.NS, "sysctl", "-qw",
		"net.ipv4.neigh.eth0.retrans_time_ms=60000", "net.ipv6.neigh.eth0.retrans_time_ms=60000")
	targets := []netip.Addr{other.IPv4.Addr(), other.IPv6.Addr()}

	// The partition: the node's packets to b go out while b's port is down, and its kernel's
	// first question goes unanswered.
	lab.MustRun("ip", "-n", lab.Switch, "link", "set", other.Port, "down")
	for _, ip := range targets {
		if mac := netlab.Resolve(node.NS, ip); mac != "" {
			t.Fatalf("%s resolved to %s with b's port down", ip, mac)
		}
	}
	lab.MustRun("ip", "-n", lab.Switch, "link", "set", other.Port, "up")
	// The one solicitation must not meet a port still coming up (carrier, the bridge's
	// listening and learning): wait until the switch forwards on it.
	netlab.WaitFor(t, "b's switch port forwarding", 10*time.Second, func() bool {
		out, err := exec.Command("bridge", "-n", lab.Switch, "link", "show", "dev", other.Port).CombinedOutput()
		return err == nil && strings.Contains(string(out), "state forwarding")
	})
	for _, ip := range targets {
		if mac := netlab.Neighbour(node.NS, ip); mac != "" {
			t.Fatalf("%s resolved to %s by itself after the heal: the test would prove nothing", ip, mac)
		}
	}

	for _, ip := range targets {
		var asked bool
		if err := netlab.In(node.NS, func() (err error) { asked, err = SolicitNeighbour(ip); return err }); err != nil || !asked {
			t.Fatalf("soliciting %s: asked %v, %v", ip, asked, err)
		}
	}
	for _, ip := range targets {
		netlab.WaitFor(t, "the node's kernel to learn b's MAC for "+ip.String(), 10*time.Second, func() bool {
			return netlab.Neighbour(node.NS, ip) == other.MAC.String()
		})
		// Resolved now: nothing more is asked.
		var asked bool
		if err := netlab.In(node.NS, func() (err error) { asked, err = SolicitNeighbour(ip); return err }); err != nil || asked {
			t.Fatalf("soliciting %s once resolved: asked %v, %v", ip, asked, err)
		}
	}
}
