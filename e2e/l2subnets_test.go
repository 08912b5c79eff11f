package e2e

import (
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
)

// secondLAN is a second subnet on its own segment (bridge br1 in the switch namespace): node-a
// and node-b each have a second NIC eth1 on it, the client lan2; node-c is not on it.
const secondLAN = "192.0.2.0/24"

// plugSecondLAN plugs ns's link name (with mac and addr) into the second segment, creating its
// bridge first, and returns the switch's port, whose link going down cuts the carrier.
func (e *l2Env) plugSecondLAN(t *testing.T, ns, name, mac, addr string) string {
	if exec.Command("ip", "-n", e.Switch, "link", "show", "br1").Run() != nil {
		run(t, "ip", "-n", e.Switch, "link", "add", "br1", "type", "bridge", "stp_state", "0")
		run(t, "ip", "-n", e.Switch, "link", "set", "br1", "up")
	}
	port := fmt.Sprintf("s2-%s", mac[len(mac)-2:])
	run(t, "ip", "-n", e.Switch, "link", "add", port, "type", "veth", "peer", "name", name, "netns", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "-n", e.Switch, "link", "del", port).Run() })
	run(t, "ip", "-n", ns, "link", "set", name, "address", mac)
	run(t, "ip", "-n", ns, "addr", "add", addr, "dev", name)
	run(t, "ip", "-n", e.Switch, "link", "set", port, "master", "br1", "up")
	run(t, "ip", "-n", ns, "link", "set", name, "up")
	return port
}

// TestL2Subnets: with two subnets on two segments, an address of the second is answered by a
// node with an up interface on it, never by node-c, which the hash alone would pick; when that
// interface goes down (admin down, or its carrier lost) while the node stays a member, the
// address moves to the other node on the subnet; it comes back once the link is up again
// (after the speakers' 2 s hold-down). The time from the cut to the client's entry naming the
// new owner is logged (median of the rounds), not asserted.
func TestL2Subnets(t *testing.T) {
	inLab(t, func(t *testing.T, e *l2Env) {
		ip := netip.MustParseAddr("192.0.2.200") // the hash: node-c among all three, node-a among a and b
		if hashOwner(ip, "node-a", "node-b", "node-c") != "node-c" || hashOwner(ip, "node-a", "node-b") != "node-a" {
			t.Fatalf("%v no longer has the owners this test needs", ip)
		}
		macs := map[string]string{"node-a": "02:00:00:00:0e:0a", "node-b": "02:00:00:00:0e:0b"}
		ports := map[string]string{}
		for i, node := range []string{"node-a", "node-b"} {
			ports[node] = e.plugSecondLAN(t, e.node(node).NS, "eth1", macs[node], fmt.Sprintf("192.0.2.%d/24", 11+i))
		}
		e.plugSecondLAN(t, e.Client.NS, "lan2", "02:00:00:00:0e:01", "192.0.2.1/24")
		answeredBy := func(node string) bool {
			return slices.Equal(e.announcers(ip), []string{node}) &&
				slices.Equal(netlab.ARPingOn(e.Client.NS, "lan2", ip, 1), []string{macs[node]})
		}
		e.create(scenario{name: "subnets", ip: ip})
		waitFor(t, "node-a (on "+secondLAN+") alone answers "+ip.String()+" on it", 20*time.Second, func() bool { return answeredBy("node-a") })

		cuts := []struct {
			how      string
			down, up []string
		}{
			{"admin down", []string{"-n", e.node("node-a").NS, "link", "set", "eth1", "down"}, []string{"-n", e.node("node-a").NS, "link", "set", "eth1", "up"}},
			{"carrier lost", []string{"-n", e.Switch, "link", "set", ports["node-a"], "down"}, []string{"-n", e.Switch, "link", "set", ports["node-a"], "up"}},
		}
		took := map[string][]time.Duration{}
		for round := range 6 {
			cut := cuts[round%len(cuts)]
			waitFor(t, "client resolves "+ip.String()+" to node-a", 10*time.Second, func() bool {
				return netlab.Resolve(e.Client.NS, ip) == macs["node-a"]
			})
			got, stop := e.neighWatch(ip, macs["node-b"])
			t0 := time.Now()
			run(t, "ip", cut.down...)
			select {
			case at := <-got:
				took[cut.how] = append(took[cut.how], at.Sub(t0))
			case <-time.After(10 * time.Second):
				stop()
				t.Fatalf("round %d (%s): the client's entry for %v never moved to node-b; announcers %v", round, cut.how, ip, e.announcers(ip))
			}
			stop()
			waitFor(t, "node-b alone answers "+ip.String(), 10*time.Second, func() bool { return answeredBy("node-b") })
			select {
			case <-e.speakers["node-a"].done:
				t.Fatalf("node-a's speaker exited")
			default:
			}
			run(t, "ip", cut.up...)
			back := waitFor(t, "node-a answers "+ip.String()+" again", 20*time.Second, func() bool { return answeredBy("node-a") })
			t.Logf("round %d, %s: moved after %v; back on node-a %v after the link came up", round, cut.how, took[cut.how][len(took[cut.how])-1], back)
		}
		for how, ds := range took {
			t.Logf("%s: median %v over %d cuts (%v)", how, median(ds), len(ds), ds)
		}
	})
}
