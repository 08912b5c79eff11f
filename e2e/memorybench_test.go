package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// BenchmarkSpeakerMemory measures what the speakers' resident memory is made of: idle with one
// Service, with 1000 addresses announced by one node, and with a BGP session besides. It prints
// a Markdown table (make bench-memory saves it); with PORTICO_BENCH_MEMORY_PROFILES set to a
// directory it also saves each measured speaker's heap profile there (go tool pprof reads them).
// It ignores b.N.
func BenchmarkSpeakerMemory(b *testing.B) {
	inBGPLab(b, 1, func(b *testing.B, e *l2Env) {
		profiles := os.Getenv("PORTICO_BENCH_MEMORY_PROFILES")
		if profiles != "" {
			// Each speaker has a network namespace of its own, so one port serves them all.
			e.restartSpeakers([]string{"--pprof-bind-address", ":6060"})
		}
		var rep strings.Builder
		fmt.Fprintf(&rep, "Measured %s on %d CPUs; three speakers in network namespaces on one bridge, real kube-apiserver. Each figure is the highest VmRSS of ten samples a second apart, with the Go runtime's own figures from the same moment. The speakers run with the DaemonSet's Go settings: %s.\n\n",
			time.Now().UTC().Format("2006-01-02"), runtimeCPUs(), goSettings(e.Security.GoEnv))
		fmt.Fprintf(&rep, "| state | speaker | VmRSS | RssAnon | RssFile | Go heap in use | Go stacks | Go runtime total (sys) | goroutines | GC cycles since start | BGP process VmRSS (RssAnon) | Pss, speaker + BGP process |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		row := func(state, file string, nodes ...string) {
			var worst memSample
			for _, n := range nodes {
				if s := e.memoryOf(n); s.rss > worst.rss {
					worst = s
				}
			}
			fmt.Fprintf(&rep, "| %s | %s | %s | %s | %s | %s | %s | %s | %d | %.0f | %s (%s) | %s |\n", state, worst.node, mib(worst.rss), mib(worst.anon), mib(worst.file),
				mibBytes(worst.heap), mibBytes(worst.stacks), mibBytes(worst.goSys), worst.goroutines, worst.gcCycles,
				mib(worst.bgpRSS), mib(worst.bgpAnon), mib(worst.pss+worst.bgpPss))
			if profiles != "" {
				e.saveHeapProfile(worst.node, filepath.Join(profiles, file+"-"+worst.node+".pb.gz"))
			}
		}
		all := []string{"node-a", "node-b", "node-c"}
		ip := netip.MustParseAddr("198.51.100.220")
		e.create(scenario{name: "idle", ip: ip})
		e.soleAnnouncer(ip, 30*time.Second)
		row("idle, one Service announced (L2), no BGP peer", "idle", all...)

		node := e.createMany(1000)
		row("1000 IPv6 addresses announced (L2) by one node", "many", node)

		router := e.Routers[0]
		startBird(b, router.NS, birdConfig(router.IPv4.Addr(), e.Nodes, clusterASN, ""))
		e.createObject(bgpPeer("tor", router.IPv4.Addr(), clusterASN, routerASN))
		e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "idle"},
			Spec: v1alpha1.BGPAdvertisementSpec{IPAddressPools: []v1alpha1.Name{"idle"}}})
		e.waitEstablished("tor", 30*time.Second, all...)
		row("then one BGP session each, the first Service advertised", "bgp", all...)

		b.Log("\n" + rep.String())
		if out := os.Getenv("PORTICO_BENCH_MEMORY_OUT"); out != "" {
			must(b, os.WriteFile(out, []byte(rep.String()), 0o644))
		}
	})
}

// memSample is one speaker's memory at one moment: the kernel's view in KiB, the Go runtime's in
// bytes.
type memSample struct {
	node            string
	rss, anon, file int
	pss             int
	// The BGP process (a child of the speaker; zero when it runs none): its pages of the
	// binary are the speaker's too, so the sum of the two VmRSS counts them twice and the sum
	// of the two Pss (shared pages split between the processes) does not.
	bgpRSS, bgpAnon, bgpPss int
	heap, stacks, goSys     float64
	gcCycles                float64 // garbage collections since the start
	goroutines              int
}

// memoryOf samples node's speaker ten times a second apart and keeps the sample with the highest
// VmRSS: the garbage collector's cycle moves RSS by a few MiB either way.
func (e *l2Env) memoryOf(node string) memSample {
	var worst memSample
	// Samples are taken on a ticker: a sampling cadence, there is no condition to wait for.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; i < 10; i++ {
		if i > 0 {
			<-tick.C
		}
		s := memSample{node: node}
		status := e.procStatus(node)
		s.rss, s.anon, s.file = status["VmRSS"], status["RssAnon"], status["RssFile"]
		bgp := e.bgpStatus(node)
		s.bgpRSS, s.bgpAnon, s.bgpPss = bgp["VmRSS"], bgp["RssAnon"], bgp["Pss"]
		s.pss = e.kBFields(fmt.Sprintf("/proc/%d/smaps_rollup", e.speakers[node].cmd.Process.Pid))["Pss"]
		s.heap = e.metric(node, "go_memstats_heap_inuse_bytes")
		s.stacks = e.metric(node, "go_memstats_stack_inuse_bytes")
		s.goSys = e.metric(node, "go_memstats_sys_bytes")
		s.goroutines = int(e.metric(node, "go_goroutines"))
		s.gcCycles = e.metric(node, "go_gc_cycles_total_gc_cycles_total")
		if s.rss > worst.rss {
			worst = s
		}
	}
	return worst
}

// procStatus reads the kB fields of node's speaker's /proc/PID/status.
func (e *l2Env) procStatus(node string) map[string]int {
	return e.kBFields(fmt.Sprintf("/proc/%d/status", e.speakers[node].cmd.Process.Pid))
}

// bgpStatus reads the kB fields of the /proc/PID/status and smaps_rollup (Pss) of node's BGP
// process; empty when it runs none.
func (e *l2Env) bgpStatus(node string) map[string]int {
	pid := childOf(e.speakers[node].cmd.Process.Pid, bgpSubcommandName)
	if pid == 0 {
		return map[string]int{}
	}
	out := e.kBFields(fmt.Sprintf("/proc/%d/status", pid))
	out["Pss"] = e.kBFields(fmt.Sprintf("/proc/%d/smaps_rollup", pid))["Pss"]
	return out
}

// kBFields reads the "Name: N kB" lines of a /proc file.
func (e *l2Env) kBFields(path string) map[string]int {
	b, err := os.ReadFile(path)
	must(e.t, err)
	out := map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[2] == "kB" {
			out[strings.TrimSuffix(f[0], ":")], _ = strconv.Atoi(f[1])
		}
	}
	return out
}

func (e *l2Env) saveHeapProfile(node, path string) {
	must(e.t, e.saveProfile(node, "heap", path))
}

// saveProfile saves a speaker's /debug/pprof/<which> (started with --pprof-bind-address :6060)
// to path.
func (e *l2Env) saveProfile(node, which, path string) error {
	resp, err := http.Get("http://" + e.node(node).IPv4.Addr().String() + ":6060/debug/pprof/" + which)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	return os.WriteFile(path, body, 0o644)
}

func goSettings(env []string) string {
	if len(env) == 0 {
		return "none (Go's defaults)"
	}
	return strings.Join(env, " ")
}

func mibBytes(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
