package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/speaker/bgpproc"
)

// TestBGPCrashKeepsL2 makes the BGP side of the node that answers ARP for an L2 address fail
// for real while a client asks for that address every 10 ms: SIGSEGV (what a panic in GoBGP's
// message handling does to a process) three times, then SIGSTOP (a deadlock: nothing answers
// the speaker's pings). Not one ask may go unanswered, and each time the node's BGP session
// comes back and its route is re-advertised to the router; the time that takes is logged.
func TestBGPCrashKeepsL2(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		all := []string{"node-a", "node-b", "node-c"}
		router, routed := e.routedByBird(netip.MustParsePrefix("203.0.113.70/32"), all)

		l2ip := netip.MustParseAddr("198.51.100.130")
		e.create(scenario{name: "crash-l2", ip: l2ip})
		owner := e.soleAnnouncer(l2ip, 10*time.Second)
		e.expectARP(l2ip, owner)
		others := slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == owner })
		speakerPID := e.speakers[owner].cmd.Process.Pid

		probes := e.probeARP(l2ip, e.macOf(owner), 10*time.Millisecond)
		var back []time.Duration
		for i, sig := range []syscall.Signal{syscall.SIGSEGV, syscall.SIGSEGV, syscall.SIGSEGV, syscall.SIGSTOP} {
			pid := e.bgpProcess(owner)
			// Each blow is a first failure, which the speaker answers with a start at once
			// (failures in a row wait a backoff): the process has run that long.
			waitFor(t, "the BGP process running stably", 2*bgpproc.StableRun, func() bool { return processAge(pid) >= bgpproc.StableRun })
			must(t, syscall.Kill(pid, sig))
			blow := time.Now()
			// The router sees the session go (the process's socket closes, or for SIGSTOP the
			// hold time runs out or the speaker kills the process), then come back.
			e.expectRoute(router.NS, routed, e.nodeIPs(false, others...), 60*time.Second)
			if sent, failed, _ := probes.Counts(); failed > 0 || exited(e.speakers[owner]) {
				t.Fatalf("run %d (%v): %d of %d ARP asks for %s unanswered so far; %s's speaker exited: %v",
					i+1, sig, failed, sent, l2ip, owner, exited(e.speakers[owner]))
			}
			e.expectRoute(router.NS, routed, e.nodeIPs(false, all...), 60*time.Second)
			took := time.Since(blow)
			back = append(back, took)
			if now := e.bgpProcess(owner); now == pid {
				t.Fatalf("run %d: the BGP process %d still runs after %v", i+1, pid, sig)
			}
			t.Logf("run %d (%v): %s's route back at the router %v after the signal", i+1, sig, owner, took.Round(time.Millisecond))
		}
		sent, failed, slowest := probes.Finish()
		t.Logf("%d ARP asks for %s every 10 ms, %d unanswered by %s; slowest answer %v", sent, l2ip, failed, owner, slowest.Round(time.Millisecond))
		sorted := slices.Clone(back[:3])
		slices.Sort(sorted)
		t.Logf("route back after SIGSEGV: median %v of %v; after SIGSTOP (found stuck by the speaker's ping): %v",
			sorted[1].Round(time.Millisecond), roundAll(back[:3]), back[3].Round(time.Millisecond))
		if failed > 0 {
			t.Fatalf("%d of %d ARP asks for %s went unanswered while %s's BGP side failed", failed, sent, l2ip, owner)
		}
		if exited(e.speakers[owner]) || e.speakers[owner].cmd.Process.Pid != speakerPID {
			t.Fatalf("%s's speaker exited", owner)
		}
		m, err := scrapeMetrics(context.Background(), e.node(owner).IPv4.Addr().String()+":7474")
		must(t, err)
		if exitedN, stuck := sum(m, "portico_bgp_process_restarts_total", map[string]string{"reason": "exited"}),
			sum(m, "portico_bgp_process_restarts_total", map[string]string{"reason": "stuck"}); exitedN != 3 || stuck != 1 {
			t.Fatalf("restarts counted: %v exited, %v stuck; want 3 and 1", exitedN, stuck)
		}
		if up := sum(m, "portico_bgp_session_up", map[string]string{"peer": "tor"}); up != 1 {
			t.Fatalf("portico_bgp_session_up{peer=tor} %v after the restarts", up)
		}
	})
}

// bgpMemoryLimitMiB is the BGP process's limit in TestBGPMemoryLimitKeepsL2: above the 6 MiB
// of anonymous memory it holds with one session, below what floodRoutes routes take it to
// (11.6 MiB seen with a limit of 13 MiB, whose heap limit of three quarters squeezes it).
const bgpMemoryLimitMiB = 10

// With the race detector (make test) the BGP process holds 30 to 40 MiB from its start, and each
// route costs more: the limit and the flood grow to keep the same story.
const (
	raceBGPMemoryLimitMiB = 60
	raceFloodRoutes       = 60000
)

// TestBGPMemoryLimitKeepsL2: a router floods the BGP process of the node that answers ARP for
// an L2 address with routes until it goes above its memory limit; the speaker kills and
// restarts it, and no ARP ask for the address, sent every 10 ms, goes unanswered.
func TestBGPMemoryLimitKeepsL2(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		all := []string{"node-a", "node-b", "node-c"}
		tor := e.Routers[0]
		limitMiB, routes := bgpMemoryLimitMiB, floodRoutes
		if raceDetector {
			limitMiB, routes = raceBGPMemoryLimitMiB, raceFloodRoutes
		}
		b := startBird(t, tor.NS, floodBirdConfig(tor.IPv4.Addr(), e.Nodes, routes))
		e.restartSpeakers([]string{"--bgp-memory-limit-mib", strconv.Itoa(limitMiB)})
		l2ip := netip.MustParseAddr("198.51.100.131")
		owner := e.peeredL2Owner(tor.IPv4.Addr(), "memory-l2", l2ip, all)
		metrics := e.node(owner).IPv4.Addr().String() + ":7474"
		memoryRestarts := func() float64 {
			m, err := scrapeMetrics(context.Background(), metrics)
			if err != nil {
				return -1
			}
			return sum(m, "portico_bgp_process_restarts_total", map[string]string{"reason": "memory"})
		}
		if n := memoryRestarts(); n != 0 {
			t.Fatalf("%s's BGP process was killed for its memory %v times before the flood (RssAnon %d KiB): the limit is too low for the test",
				owner, n, e.bgpStatus(owner)["RssAnon"])
		}
		before := e.bgpStatus(owner)["RssAnon"]
		speakerPID := e.speakers[owner].cmd.Process.Pid

		probes := e.probeARP(l2ip, e.macOf(owner), 10*time.Millisecond)
		_, err := b.Birdc("enable", "flood")
		must(t, err)
		peak := before
		t.Cleanup(func() {
			t.Logf("%s's BGP process: RssAnon %d KiB before the flood, at most %d KiB seen after", owner, before, peak)
		})
		took := waitFor(t, owner+"'s BGP process killed above its memory limit", 60*time.Second, func() bool {
			peak = max(peak, e.bgpStatus(owner)["RssAnon"])
			return memoryRestarts() >= 1
		})
		sent, failed, slowest := probes.Finish()
		t.Logf("%s's BGP process: RssAnon %d KiB before the flood of %d routes, killed above %d MiB %v after it began; %d ARP asks for %s every 10 ms, %d unanswered; slowest answer %v",
			owner, before, routes, limitMiB, took.Round(time.Millisecond), sent, l2ip, failed, slowest.Round(time.Millisecond))
		if failed > 0 {
			t.Fatalf("%d of %d ARP asks for %s went unanswered while %s's BGP process ran out of memory", failed, sent, l2ip, owner)
		}
		if exited(e.speakers[owner]) || e.speakers[owner].cmd.Process.Pid != speakerPID {
			t.Fatalf("%s's speaker exited", owner)
		}
		if !strings.Contains(e.speakerLog(owner), "above the limit of "+strconv.Itoa(limitMiB)+" MiB") {
			t.Fatalf("%s's log does not say why its BGP process was killed", owner)
		}
	})
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// bgpProcess is the PID of the process that runs node's GoBGP: its speaker's child (the
// bgp-process subcommand), or the speaker itself when it has none.
func (e *l2Env) bgpProcess(node string) int {
	speaker := e.speakers[node].cmd.Process.Pid
	var child int
	waitFor(e.t, node+"'s BGP process", 30*time.Second, func() bool {
		child = childOf(speaker, bgpSubcommandName)
		return child != 0 || !strings.Contains(e.speakerLog(node), `"BGP process started"`)
	})
	if child == 0 {
		return speaker
	}
	return child
}

// freeze stops node's speaker and its BGP process if it runs one (SIGSTOP), as a node that
// hangs; the function it returns wakes them (SIGCONT), the BGP process first.
func (e *l2Env) freeze(node string) (thaw func()) {
	speaker := e.speakers[node].cmd.Process.Pid
	bgp := childOf(speaker, bgpSubcommandName)
	must(e.t, syscall.Kill(speaker, syscall.SIGSTOP))
	if bgp != 0 {
		must(e.t, syscall.Kill(bgp, syscall.SIGSTOP))
	}
	return func() {
		if bgp != 0 {
			_ = syscall.Kill(bgp, syscall.SIGCONT)
		}
		_ = syscall.Kill(speaker, syscall.SIGCONT)
	}
}

// bgpSubcommandName is how the speaker's BGP process is called (cmd/portico-speaker).
const bgpSubcommandName = "bgp-process"

// childOf is the PID of parent's child process whose second argument is arg, 0 if none.
func childOf(parent int, arg string) int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range stats {
		b, err := os.ReadFile(stat)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so fields count from the last ')'.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		dir := filepath.Dir(stat)
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		if args := strings.Split(string(cmdline), "\x00"); len(args) > 1 && args[1] == arg {
			pid, _ := strconv.Atoi(filepath.Base(dir))
			return pid
		}
	}
	return 0
}

// processAge is how long process pid has run (0 if it cannot be read).
func processAge(pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	uptime, err2 := os.ReadFile("/proc/uptime")
	if err != nil || err2 != nil {
		return 0
	}
	// Field 22, the start time in clock ticks after boot (USER_HZ, 100 on Linux), is the 20th
	// after the command's closing parenthesis.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	ticks, _ := strconv.ParseFloat(f[19], 64)
	up, _ := strconv.ParseFloat(strings.Fields(string(uptime))[0], 64)
	return time.Duration((up - ticks/100) * float64(time.Second))
}

// probeARP asks for ip from the client every interval (netlab.ProbeARP) until Finish or the
// test's end.
func (e *l2Env) probeARP(ip netip.Addr, want string, every time.Duration) *netlab.ARPProbes {
	a, err := netlab.NewARPAsker(e.Client)
	must(e.t, err)
	p := netlab.ProbeARP(e.t.Logf, a, ip, want, every)
	e.t.Cleanup(func() { p.Finish() }) // a test that failed first
	return p
}

// TestBGPHungSpeakerWithdraws freezes a node's speaker alone (SIGSTOP), its BGP process left
// running: a hung speaker can no longer change its node's routes, so the BGP process, hearing
// none of its pings, withdraws them (as the BGP side did when it froze with the speaker). The
// speaker, woken, starts a new BGP process and the route comes back.
func TestBGPHungSpeakerWithdraws(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		all := []string{"node-a", "node-b", "node-c"}
		router, routed := e.routedByBird(netip.MustParsePrefix("203.0.113.71/32"), all)

		const hung = "node-a"
		child := e.bgpProcess(hung)
		speaker := e.speakers[hung].cmd.Process.Pid
		must(t, syscall.Kill(speaker, syscall.SIGSTOP))
		frozen := time.Now()
		thawed := false
		thaw := func() {
			if !thawed {
				thawed = true
				_ = syscall.Kill(speaker, syscall.SIGCONT)
			}
		}
		t.Cleanup(thaw)
		// The BGP process's hold on the speaker is 10 s of silence and a second's grace; the
		// router's hold time is 9 s, so wait past both.
		e.expectRoute(router.NS, routed, e.nodeIPs(false, "node-b", "node-c"), 60*time.Second)
		t.Logf("%s's route left the router %v after its speaker froze", hung, time.Since(frozen).Round(time.Millisecond))
		// It says why as it exits, just after its sessions close.
		waitFor(t, hung+"'s BGP process saying why it withdrew", 10*time.Second, func() bool {
			return strings.Contains(e.speakerLog(hung), "taken for hung")
		})
		thaw()
		e.expectRoute(router.NS, routed, e.nodeIPs(false, all...), 60*time.Second)
		if now := e.bgpProcess(hung); now == child {
			t.Fatalf("%s's BGP process %d still runs", hung, child)
		}
	})
}

// routedByBird starts bird in the first router's namespace, peers every node with it and
// advertises a Service at routed; it returns once the router routes it to the nodes in all.
func (e *l2Env) routedByBird(routed netip.Prefix, all []string) (netlab.Host, netip.Prefix) {
	router := e.Routers[0]
	startBird(e.t, router.NS, birdConfig(router.IPv4.Addr(), e.Nodes, clusterASN, ""))
	e.createObject(bgpPeer("tor", router.IPv4.Addr(), clusterASN, routerASN))
	e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "routed"},
		Spec: v1alpha1.BGPAdvertisementSpec{IPAddressPools: []v1alpha1.Name{"routed"}}})
	e.createService("routed", []netip.Prefix{routed}, false, routed.Addr())
	e.waitEstablished("tor", 30*time.Second, all...)
	e.expectRoute(router.NS, routed, e.nodeIPs(false, all...), 30*time.Second)
	return router, routed
}

// peeredL2Owner peers every node in all with the router at tor (BGPPeer "tor") and waits for
// their sessions, then gives a Service (scenario name) the L2 address l2ip and returns the node
// that answers ARP for it.
func (e *l2Env) peeredL2Owner(tor netip.Addr, name string, l2ip netip.Addr, all []string) string {
	e.t.Helper()
	e.createObject(bgpPeer("tor", tor, clusterASN, routerASN))
	e.waitEstablished("tor", 30*time.Second, all...)
	e.create(scenario{name: name, ip: l2ip})
	owner := e.soleAnnouncer(l2ip, 10*time.Second)
	e.expectARP(l2ip, owner)
	return owner
}
