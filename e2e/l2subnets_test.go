package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/portico-lb/portico/api/v1alpha1"
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
// address moves to the other node on the subnet, and stays there once the link is up again
// (sticky placement). Each round cuts the node answering. The time from the cut to the client's
// entry naming the new owner is logged (median of the rounds), not asserted.
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
		// node-a by the hash, or node-b if its subnets were reported first: placement is sticky.
		owner, other := "node-a", "node-b"
		waitFor(t, "node-a or node-b (on "+secondLAN+") alone answers "+ip.String()+" on it", 20*time.Second, func() bool {
			if answeredBy("node-b") {
				owner, other = "node-b", "node-a"
				return true
			}
			return answeredBy("node-a")
		})

		// Each round cuts the link of the node answering, so the address goes back and forth.
		cut := func(how, node string) (down, up []string) {
			if how == "admin down" {
				return []string{"-n", e.node(node).NS, "link", "set", "eth1", "down"}, []string{"-n", e.node(node).NS, "link", "set", "eth1", "up"}
			}
			return []string{"-n", e.Switch, "link", "set", ports[node], "down"}, []string{"-n", e.Switch, "link", "set", ports[node], "up"}
		}
		hows := []string{"admin down", "carrier lost"}
		took := map[string][]time.Duration{}
		for round := range 6 {
			how := hows[round/2%len(hows)]
			down, up := cut(how, owner)
			waitFor(t, "client resolves "+ip.String()+" to "+owner, 10*time.Second, func() bool {
				return netlab.Resolve(e.Client.NS, ip) == macs[owner]
			})
			got, stop := e.neighWatch(ip, macs[other])
			t0 := time.Now()
			run(t, "ip", down...)
			select {
			case at := <-got:
				took[how] = append(took[how], at.Sub(t0))
			case <-time.After(10 * time.Second):
				stop()
				t.Fatalf("round %d (%s): the client's entry for %v never moved to %s; announcers %v", round, how, ip, other, e.announcers(ip))
			}
			stop()
			waitFor(t, other+" alone answers "+ip.String(), 10*time.Second, func() bool { return answeredBy(other) })
			select {
			case <-e.speakers[owner].done:
				t.Fatalf("%s's speaker exited", owner)
			default:
			}
			run(t, "ip", up...)
			// Placement is sticky: once the cut node reports the subnet again, and so may answer
			// for the address, the node that took it over keeps it.
			waitFor(t, owner+" reports "+secondLAN+" again", 20*time.Second, func() bool {
				var sp v1alpha1.Speaker
				return e.c.Get(context.Background(), clientKey(owner), &sp) == nil && slices.Contains(sp.Status.Subnets, secondLAN)
			})
			if !answeredBy(other) {
				t.Fatalf("round %d (%s): once %s's link was back, %v is answered by %v, not %s alone: it moved back", round, how, owner, ip, e.announcers(ip), other)
			}
			t.Logf("round %d, %s: moved from %s after %v; stays on %s once the link is back", round, how, owner, took[how][len(took[how])-1], other)
			owner, other = other, owner
		}
		for how, ds := range took {
			t.Logf("%s: median %v over %d cuts (%v)", how, median(ds), len(ds), ds)
		}
	})
}
