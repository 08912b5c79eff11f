package e2e

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
)

// BenchmarkBGP measures, with three speakers peered with bird2 in namespaces and a real
// apiserver: the time from a Service's address being written to its status until the route
// is in the router's kernel table, the time from the Service's deletion until the route is
// gone, and with many Services, the time to converge and the speakers' peak memory. It prints
// a Markdown report (make bench-bgp saves it); it ignores b.N.
func BenchmarkBGP(b *testing.B) {
	runs := envSize(b, "PORTICO_BENCH_BGP_RUNS", 21, 1)
	many := envSize(b, "PORTICO_BENCH_BGP_SERVICES", 1000, 1)
	inBGPLab(b, 1, func(b *testing.B, e *l2Env) {
		all := []string{"node-a", "node-b", "node-c"}
		// With PORTICO_BENCH_BGP_PROFILES set to a directory, node-b's CPU profile of the first
		// 10 s of the floor and of the advertised burst are saved there.
		profiles := os.Getenv("PORTICO_BENCH_BGP_PROFILES")
		if profiles != "" {
			e.restartSpeakers([]string{"--pprof-bind-address", ":6060"})
		}
		cpuProfile := func(phase string) (wait func()) {
			if profiles == "" {
				return func() {}
			}
			return background(b, "CPU profile of node-b, "+phase, func() error {
				return e.saveProfile("node-b", "profile?seconds=10", filepath.Join(profiles, phase+"-node-b.cpu.pb.gz"))
			})
		}
		router := e.Routers[0]
		netlab.StartBird(b, router.NS, birdConfig(router.IPv4.Addr(), e.Nodes, clusterASN, ""))
		e.createObject(bgpPeer("tor", router.IPv4.Addr(), clusterASN, routerASN))
		e.waitEstablished("tor", 30*time.Second, all...)
		// Every pool except those labelled advertise=no.
		e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Spec: v1alpha1.BGPAdvertisementSpec{
			IPAddressPoolSelectors: []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "advertise", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"no"}}}}}}})
		rssIdle := e.peakRSS()

		var rep strings.Builder
		fmt.Fprintf(&rep, "Measured %s on %d CPUs; three speakers (embedded GoBGP) peered over eBGP with bird 2 in network namespaces, real kube-apiserver. Route times are read from `ip monitor route` in the router's namespace.\n\n",
			time.Now().UTC().Format("2006-01-02"), runtimeCPUs())
		mon := watchRoutes(b, router.NS)
		defer func() { mon.stop() }()
		fmt.Fprintf(&rep, "| %d runs | median | min | max |\n|---|---|---|---|\n", runs)
		// latency measures runs Services one after another; base offsets their addresses.
		latency := func(when string, base int) {
			var adds, dels []time.Duration
			for i := 0; i < runs; i++ {
				ip := netip.AddrFrom4([4]byte{203, 0, 113, byte(base + i%50)})
				pfx := netip.PrefixFrom(ip, 32)
				name := fmt.Sprintf("lat-%d-%d", base, i)
				svc := e.createService(name, []netip.Prefix{pfx}, false)
				svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
				mon.reset()
				// From the moment the status write is sent: the speakers often act on the watch
				// event before the writer has read the apiserver's answer.
				written := time.Now()
				must(b, e.c.Status().Update(context.Background(), svc))
				at := mon.await(b, pfx.Addr().String(), false)
				adds = append(adds, at.Sub(written))
				e.expectRoute(router.NS, pfx, e.nodeIPs(false, all...), 10*time.Second)
				mon.reset()
				deleted := time.Now()
				must(b, e.c.Delete(context.Background(), svc))
				for at = mon.await(b, pfx.Addr().String(), true); len(gateways(b, router.NS, pfx)) > 0; {
					at = mon.await(b, pfx.Addr().String(), true) // only one node's path went; wait for the last
				}
				dels = append(dels, at.Sub(deleted))
			}
			fmt.Fprintf(&rep, "| %s: Service's status write sent → route in the router's kernel table (first node) | %s | %s | %s |\n",
				when, ms(median(adds)), ms(slices.Min(adds)), ms(slices.Max(adds)))
			fmt.Fprintf(&rep, "| %s: Service delete sent → route gone from the router's kernel table (last node) | %s | %s | %s |\n",
				when, ms(median(dels)), ms(slices.Min(dels)), ms(slices.Max(dels)))
		}
		latency("alone", 100)

		e.createObject(&v1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "many"},
			Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"10.200.0.0/16"}}})
		// The floor: the same creations and status writes for addresses no advertisement
		// covers, so the speakers have nothing to advertise or report.
		e.createObject(&v1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "floor", Labels: map[string]string{"advertise": "no"}},
			Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"10.201.0.0/16"}}})
		w0, cpu0, all0 := apiWrites(b, e.cp), e.speakersCPU(b), cpuByCommand()
		profiled := cpuProfile("floor")
		start := time.Now()
		e.createLBServices("floor", netip.MustParseAddr("10.201.0.1"), many, true)
		floor := time.Since(start)
		w1, cpu1, all1 := apiWrites(b, e.cp), e.speakersCPU(b), cpuByCommand()
		profiled() // the floor's profile covers its first 10 s
		profiled = cpuProfile("advertised")
		start = time.Now()
		e.createLBServices("many", netip.MustParseAddr("10.200.0.1"), many, true)
		written := time.Since(start)
		waitFor(b, fmt.Sprintf("%d routes in the router", many), 2*time.Minute, func() bool {
			return routeCount(router.NS, "10.200.") >= many
		})
		converged := time.Since(start)
		w2, cpu2, all2 := apiWrites(b, e.cp), e.speakersCPU(b), cpuByCommand()
		profiled()
		// A fresh monitor: the burst's thousands of route changes, unread while the routes were
		// counted, overflow the old one's netlink socket, and it then misses changes.
		mon.stop()
		mon = watchRoutes(b, router.NS)
		sum0, n0 := e.reconcileTotals()
		latency(fmt.Sprintf("with %d more advertised", many), 150)
		sum1, n1 := e.reconcileTotals()
		fmt.Fprintf(&rep, "\n| %d Services created at once, each with an EndpointSlice (4 parallel writers: Service, slice, status) | time |\n|---|---|\n", many)
		fmt.Fprintf(&rep, "| floor: addresses no advertisement covers (the speakers stay idle) — all statuses written | %s |\n", ms(floor))
		fmt.Fprintf(&rep, "| advertised — all statuses written | %s (%.2f × floor) |\n", ms(written), float64(written)/float64(floor))
		fmt.Fprintf(&rep, "| advertised — all %d routes in the router's kernel table (ECMP over 3 nodes) | %s (%.2f × floor) |\n",
			many, ms(converged), float64(converged)/float64(floor))
		fmt.Fprintf(&rep, "\nThe apiserver's write requests (verb resource: floor; advertised, until the last route):\n\n%s", writesTable(w0, w1, w2))
		fmt.Fprintf(&rep, "\nThe three speakers' CPU time (user and system, summed): %.1f s during the floor; %.1f s advertised, until the last route.\n", cpu1-cpu0, cpu2-cpu1)
		fmt.Fprintf(&rep, "\nCPU time by program on the machine (seconds, floor; advertised): %s.\n", cpuTable(all0, all1, all2))
		fmt.Fprintf(&rep, "\nA speaker's reaction to one change with %d Services and their EndpointSlices in the cluster (portico_speaker_reconcile_seconds, mean over the three during those runs): %.1f ms over %.0f reconciles.\n",
			many+many, 1000*(sum1-sum0)/max(n1-n0, 1), n1-n0)
		fmt.Fprintf(&rep, "\nSpeaker peak memory (VmHWM, max over the three): %s idle with one session; %s after advertising %d routes.\n",
			mib(rssIdle), mib(e.peakRSS()), many)
		b.Log("\n" + rep.String())
		if out := os.Getenv("PORTICO_BENCH_BGP_OUT"); out != "" {
			must(b, os.WriteFile(out, []byte(rep.String()), 0o644))
		}
	})
}

// cpuByCommand sums the CPU time every process on the machine has used so far by its command
// name (exited processes are not counted: a phase's figure is of the processes that ran through it).
func cpuByCommand() map[string]float64 {
	out := map[string]float64{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		stat, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if comm, seconds := statCPU(stat); comm != "" {
			out[comm] += seconds
		}
	}
	return out
}

// cpuTable lists the programs that used at least 0.1 s in either phase, the busiest first.
func cpuTable(a0, a1, a2 map[string]float64) string {
	type row struct {
		name         string
		floor, burst float64
	}
	var rows []row
	for name := range a2 {
		r := row{name, a1[name] - a0[name], a2[name] - a1[name]}
		if r.floor >= 0.1 || r.burst >= 0.1 {
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(x, y row) int { return cmp.Compare(y.floor+y.burst, x.floor+x.burst) })
	var parts []string
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%s %.1f; %.1f", r.name, r.floor, r.burst))
	}
	return strings.Join(parts, ", ")
}

// speakersCPU is the CPU time the running speakers have used so far, in seconds.
func (e *l2Env) speakersCPU(b *testing.B) float64 {
	total := 0.0
	for _, p := range e.speakers {
		total += cpuSeconds(b, p.cmd.Process.Pid)
	}
	return total
}

// peakRSS is the highest VmHWM among the running speakers (each with its BGP process's), in KiB.
func (e *l2Env) peakRSS() int {
	m := 0
	for node := range e.speakers {
		m = max(m, e.procStatus(node)["VmHWM"]+e.bgpStatus(node)["VmHWM"])
	}
	return m
}

// routeCount counts ns's kernel routes whose destination starts with prefix.
func routeCount(ns, prefix string) int {
	out, _ := exec.Command("ip", "-n", ns, "-4", "route", "show", "proto", "bird").Output()
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// routeMonitor follows `ip monitor route` in a namespace (see ipMonitor).
type routeMonitor struct {
	lines <-chan ipEvent
	stop  func()
}

func watchRoutes(b testing.TB, ns string) *routeMonitor {
	lines, stop := ipMonitor(b, ns, "route")
	return &routeMonitor{lines: lines, stop: stop}
}

// reset drops the events seen so far.
func (m *routeMonitor) reset() {
	for {
		select {
		case <-m.lines:
		default:
			return
		}
	}
}

// await returns when the first line about dst (a deletion or not) was read.
func (m *routeMonitor) await(b testing.TB, dst string, deleted bool) time.Time {
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-m.lines:
			if !ok {
				b.Fatal("ip monitor ended")
			}
			f := strings.Fields(ev.line)
			if len(f) == 0 {
				continue
			}
			isDel := f[0] == "Deleted"
			if isDel {
				f = f[1:]
			}
			if len(f) > 0 && f[0] == dst && isDel == deleted {
				return ev.at
			}
		case <-timeout:
			b.Fatalf("no route event for %s (deleted=%v) within 10s", dst, deleted)
		}
	}
}

// reconcileTotals adds up the speakers' portico_speaker_reconcile_seconds sums and counts.
func (e *l2Env) reconcileTotals() (sum, count float64) {
	for _, n := range e.Nodes {
		sum += e.metric(n.Name, "portico_speaker_reconcile_seconds_sum")
		count += e.metric(n.Name, "portico_speaker_reconcile_seconds_count")
	}
	return sum, count
}

// writesTable lists the write requests of two phases side by side, one line per verb and
// resource that either phase sent: a's between a0 and a1, b's between a1 and b1.
func writesTable(a0, a1, b1 map[string]float64) string {
	var keys []string
	for k := range b1 {
		if b1[k]-a0[k] > 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&out, "- %s: %.0f; %.0f\n", k, a1[k]-a0[k], b1[k]-a1[k])
	}
	return out.String()
}
