package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// BenchmarkSpeakerIdle measures what speakers cost when nothing happens: PORTICO_BENCH_IDLE_NODES
// speakers (default 3) in network namespaces, four Services announced, nothing changing. Over a
// window of PORTICO_BENCH_IDLE_SECONDS (default 30) it reads each speaker's CPU time from
// /proc/PID/stat, its threads' context switches (each one a wakeup) from /proc/PID/task/*/status
// and the packets its node sent. PORTICO_BENCH_IDLE_ARGS adds arguments to every speaker's
// command line. It appends one Markdown row to PORTICO_BENCH_IDLE_OUT, after the table's heading
// when the file has none (make bench-memory runs it at each node count). It ignores b.N.
func BenchmarkSpeakerIdle(b *testing.B) {
	nodes := envSize(b, "PORTICO_BENCH_IDLE_NODES", 3, 1)
	window := time.Duration(envSize(b, "PORTICO_BENCH_IDLE_SECONDS", 30, 1)) * time.Second
	inLabOf(b, nodes, func(b *testing.B, e *l2Env) {
		if extra := os.Getenv("PORTICO_BENCH_IDLE_ARGS"); extra != "" {
			e.restartSpeakers(strings.Fields(extra))
		}
		for i := range 4 {
			ip := netip.AddrFrom4([4]byte{198, 51, 100, byte(220 + i)})
			e.create(scenario{name: fmt.Sprintf("idle-%d", i), ip: ip})
			e.soleAnnouncer(ip, time.Minute)
		}
		// Each address has one announcer, so the speakers agree on the members. The window opens
		// once the start's work is over: every speaker has written a Ready status and, with
		// more than one node, the first self-check round has reported every address (later
		// rounds that find the same write nothing).
		waitFor(e.t, "every speaker Ready and the first self-check round reported", time.Minute, func() bool {
			return e.startSettled(nodes, 4)
		})
		costs := e.idleCosts(window)
		row := idleRow(nodes, window, costs)
		b.Log("\n" + idleHeader + row)
		if out := os.Getenv("PORTICO_BENCH_IDLE_OUT"); out != "" {
			before, err := os.ReadFile(out)
			if err != nil && !os.IsNotExist(err) {
				b.Fatal(err)
			}
			if !strings.Contains(string(before), idleHeader) {
				row = "\n### Idle speakers\n\nFour Services announced, nothing changing; every speaker measured over the same window.\n\n" + idleHeader + row
			}
			f, err := os.OpenFile(out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
			must(b, err)
			_, err = f.WriteString(row)
			must(b, err)
			must(b, f.Close())
		}
	})
}

// idleHeader heads the rows BenchmarkSpeakerIdle appends.
const idleHeader = "| speakers | window | CPU per speaker, mean (max) | wakeups/s per speaker, mean (max) | packets/s sent per node, mean (max) |\n|---|---|---|---|---|\n"

// idleCost is one speaker's cost over a window: the share of one core it used, its threads'
// context switches per second and the packets per second its node sent.
type idleCost struct {
	cpu, wakeups, packets float64
}

func idleRow(nodes int, window time.Duration, costs []idleCost) string {
	col := func(f func(idleCost) float64, format string) string {
		var sum, most float64
		for _, c := range costs {
			sum += f(c)
			most = max(most, f(c))
		}
		return fmt.Sprintf(format+" ("+format+")", sum/float64(len(costs)), most)
	}
	return fmt.Sprintf("| %d | %s | %s | %s | %s |\n", nodes, window,
		col(func(c idleCost) float64 { return 100 * c.cpu }, "%.2f %%"),
		col(func(c idleCost) float64 { return c.wakeups }, "%.0f"),
		col(func(c idleCost) float64 { return c.packets }, "%.0f"))
}

// idleCosts measures every speaker over the same window.
func (e *l2Env) idleCosts(window time.Duration) []idleCost {
	type reading struct {
		ticks, switches, packets int
	}
	read := func() []reading {
		var out []reading
		for _, n := range e.Nodes {
			pid := e.speakers[n.Name].cmd.Process.Pid
			out = append(out, reading{cpuTicks(e.t, pid), contextSwitches(e.t, pid), e.sentPackets(n.Name)})
		}
		return out
	}
	before := read()
	start := time.Now()
	time.Sleep(window) // the measurement window: there is nothing to wait for
	after := read()
	secs := time.Since(start).Seconds()
	var out []idleCost
	for i := range before {
		out = append(out, idleCost{
			cpu:     float64(after[i].ticks-before[i].ticks) / clockTicks / secs,
			wakeups: float64(after[i].switches-before[i].switches) / secs,
			packets: float64(after[i].packets-before[i].packets) / secs,
		})
	}
	return out
}

// clockTicks is the unit of /proc/PID/stat's CPU times (USER_HZ, 100 on Linux).
const clockTicks = 100

// cpuTicks reads a process's user and system CPU time, threads included, in clock ticks.
func cpuTicks(t testing.TB, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	must(t, err)
	// The fields after the command (which may hold spaces) start with the state, field 3:
	// utime and stime are fields 14 and 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return utime + stime
}

// contextSwitches sums the voluntary and involuntary context switches of a process's threads
// (the process's own /proc/PID/status counts its main thread alone).
func contextSwitches(t testing.TB, pid int) int {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	must(t, err)
	sum := 0
	for _, path := range tasks {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the thread ended
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 2 && slices.Contains([]string{"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"}, f[0]) {
				n, _ := strconv.Atoi(f[1])
				sum += n
			}
		}
	}
	return sum
}

// sentPackets reads how many packets the node's eth0 has sent.
func (e *l2Env) sentPackets(node string) int {
	out, err := exec.Command("ip", "-n", e.node(node).NS, "-s", "-j", "link", "show", "eth0").Output()
	must(e.t, err)
	var links []struct {
		Stats struct {
			TX struct{ Packets int } `json:"tx"`
		} `json:"stats64"`
	}
	must(e.t, json.Unmarshal(out, &links))
	if len(links) != 1 {
		e.t.Fatalf("%s: no eth0", node)
	}
	return links[0].Stats.TX.Packets
}

// startSettled says whether every one of the nodes' speakers has written a Ready status and,
// with more than one node, their self-checks together report addresses addresses.
func (e *l2Env) startSettled(nodes, addresses int) bool {
	var list v1alpha1.SpeakerList
	if err := e.c.List(context.Background(), &list); err != nil || len(list.Items) != nodes {
		return false
	}
	probed := map[string]bool{}
	for _, s := range list.Items {
		if !meta.IsStatusConditionTrue(s.Status.Conditions, "Ready") {
			return false
		}
		for _, c := range s.Status.SelfChecks {
			probed[c.IP] = true
		}
	}
	return nodes == 1 || len(probed) >= addresses
}
