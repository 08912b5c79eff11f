package e2e

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// fullTableFlood is what bird sends in TestBGPFloodKeepsL2: 300 000 routes, as fast as it can.
const fullTableFlood = 300000

// floodContainerLimitMiB is the BGP containers' memory limit in TestBGPFloodKeepsL2: above
// the BGP process with one session and the default prefix limit's worth of routes, far below
// what the whole flood takes. The race detector's BGP process holds 30 to 40 MiB from its start
// and pays more per route.
func floodContainerLimitMiB() int64 {
	if raceDetector {
		return 192
	}
	return 64
}

// TestBGPFloodKeepsL2: bird floods 300 000 routes at the BGP side of the node that answers ARP
// for an L2 address, the BGP side running as the DaemonSet runs it (its own container: its own
// process and memory cgroup, bgpContainer) while the client asks ARP for the address every
// 10 ms. With the default prefix limit the session is ceased early, the container far below its
// limit; with the limit raised the container reaches its memory limit and the kernel kills it,
// alone: the speaker keeps its PID, every ARP ask is answered, and the next BGP process gets the
// plan back.
func TestBGPFloodKeepsL2(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		all := []string{"node-a", "node-b", "node-c"}
		tor := e.Routers[0]
		limitMiB := floodContainerLimitMiB()
		b := startBird(t, tor.NS, floodBirdConfig(tor.IPv4.Addr(), e.Nodes, fullTableFlood))
		containers := map[string]*bgpContainer{}
		for _, n := range all {
			containers[n] = e.startBGPContainer(n, limitMiB)
		}
		e.useBGPContainers(containers)
		e.restartSpeakers(nil)
		l2ip := netip.MustParseAddr("198.51.100.132")
		owner := e.peeredL2Owner(tor.IPv4.Addr(), "flood-l2", l2ip, all)
		c := containers[owner]
		speakerPID := e.speakers[owner].cmd.Process.Pid
		metrics := e.node(owner).IPv4.Addr().String() + ":7474"
		received := func() float64 {
			m, err := scrapeMetrics(context.Background(), metrics)
			if err != nil {
				return 0
			}
			return sum(m, "portico_bgp_prefixes_received", map[string]string{"peer": "tor"})
		}
		probes := e.probeARP(l2ip, e.macOf(owner), 10*time.Millisecond)

		// The default prefix limit: ceased after some 10 000 routes.
		_, err := b.Birdc("enable", "flood")
		must(t, err)
		flooded, held := time.Now(), 0.0
		waitFor(t, owner+"'s session ceased for the prefix limit", 60*time.Second, func() bool {
			held = max(held, received())
			return e.sessions(owner)["tor"].Reason == v1alpha1.ReasonPrefixLimitReached
		})
		ceasedAfter, ceasedPeak := time.Since(flooded), c.cgroup.peak()
		// bird in full flow may not read the NOTIFICATION before the connection's reset
		// (GoBGP closes the socket with the flood unread): what it logged is for the record.
		t.Logf("bird's log on the ceases: %q", linesWith(b.Log(), "Maximum number of prefixes"))
		if n := c.cgroup.oomKills(); n != 0 {
			t.Fatalf("%s's BGP container was killed for its memory %d times under the prefix limit", owner, n)
		}
		t.Logf("prefix limit %d: %s ceased %v after the flood of %d routes began, having held at most %v (sampled); its BGP container's memory peak %s of %d MiB",
			v1alpha1.DefaultMaxPrefixes, owner, ceasedAfter.Round(time.Millisecond), fullTableFlood, held, mib(int(ceasedPeak>>10)), limitMiB)

		// The limit raised above the flood: the memory limit alone bounds the BGP side.
		raisePrefixLimit(t, e, "tor", 2*fullTableFlood)
		held = 0
		defer func() {
			if t.Failed() {
				t.Logf("%s: at most %v routes held (sampled), memory peak %d KiB, usage now %d KiB, OOM kills %d",
					owner, held, c.cgroup.peak()>>10, c.cgroup.usage()>>10, c.cgroup.oomKills())
			}
		}()
		took := waitFor(t, "the kernel killing "+owner+"'s BGP container for its memory", 120*time.Second, func() bool {
			held = max(held, received())
			return c.cgroup.oomKills() > 0
		})
		oomPeak := c.cgroup.peak()
		_, err = b.Birdc("disable", "flood")
		must(t, err)
		t.Logf("prefix limit %d: %s's BGP container killed by the kernel at its limit %v after the fresh session's flood began, having held at most %v routes (sampled); memory peak %s of %d MiB",
			2*fullTableFlood, owner, took.Round(time.Millisecond), held, mib(int(oomPeak>>10)), limitMiB)

		// The next BGP process (the container started again) gets the plan: the session is back.
		waitFor(t, owner+"'s session Established again after the kill", 60*time.Second, func() bool {
			starts, _ := c.runs()
			return starts > 1 && e.sessions(owner)["tor"].State == "Established"
		})
		sent, failed, slowest := probes.Finish()
		starts, ends := c.runs()
		t.Logf("%d ARP asks for %s every 10 ms through both floods, %d unanswered by %s; slowest answer %v; BGP container started %d times, its runs ended %v; the speaker's peak resident memory %d KiB",
			sent, l2ip, failed, owner, slowest.Round(time.Millisecond), starts, ends, e.procStatus(owner)["VmHWM"])
		if failed > 0 {
			t.Fatalf("%d of %d ARP asks for %s went unanswered while %s's BGP side was flooded", failed, sent, l2ip, owner)
		}
		if exited(e.speakers[owner]) || e.speakers[owner].cmd.Process.Pid != speakerPID {
			t.Fatalf("%s's speaker exited", owner)
		}
	})
}

// raisePrefixLimit sets the BGPPeer's maxPrefixes; the speakers open a fresh session with it.
func raisePrefixLimit(t *testing.T, e *l2Env, name string, limit uint32) {
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var peer v1alpha1.BGPPeer
		if err := e.c.Get(context.Background(), clientKey(name), &peer); err != nil {
			return err
		}
		peer.Spec.MaxPrefixes = limit
		return e.c.Update(context.Background(), &peer)
	}))
}

// linesWith lists the lines of out that contain s.
func linesWith(out, s string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}
