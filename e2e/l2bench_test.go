package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// BenchmarkL2 measures failover at the client, dual answering after a partition heals, speaker
// memory and the failure-detection trade-off, and prints a Markdown report (make bench-l2 saves
// it). It is a benchmark so that `go test` never runs it by accident; it ignores b.N.
func BenchmarkL2(b *testing.B) {
	benchRuns := envSize(b, "PORTICO_BENCH_L2_RUNS", 11, 1) // failovers per case; the issue asks for at least 10
	inLab(b, func(b *testing.B, e *l2Env) {
		var rep strings.Builder
		fmt.Fprintf(&rep, "Measured %s on %d CPUs; three speakers and a client in network namespaces on one bridge, real kube-apiserver.\n\n",
			time.Now().UTC().Format("2006-01-02"), runtimeCPUs())
		ip := netip.MustParseAddr("198.51.100.220")
		e.create(scenario{name: "bench", ip: ip})

		fmt.Fprintf(&rep, "### Failover (default detection: heartbeat 50 ms to two watchers with the kernel check; memberlist probe 1 s, timeout 500 ms, suspicion ×2)\n\n")
		fmt.Fprintf(&rep, "Time from the blow to the client's neighbour entry holding the new owner's MAC (`ip -ts monitor neigh` in the client), %d runs each; the speaker's own histogram (member loss detected → first gratuitous ARP) alongside.\n\n", benchRuns)
		fmt.Fprintf(&rep, "| blow | median | min | max | speaker: detected → GARP sent (mean) |\n|---|---|---|---|---|\n")
		for _, blow := range []string{"SIGTERM", "SIGKILL", "link cut"} {
			var ds []time.Duration
			var garp []float64
			for i := 0; i < benchRuns; i++ {
				d, g := e.timedFailover(ip, blow)
				ds = append(ds, d)
				if g >= 0 {
					garp = append(garp, g)
				}
			}
			fmt.Fprintf(&rep, "| %s | %s | %s | %s | %s |\n", blow, ms(median(ds)), ms(slices.Min(ds)), ms(slices.Max(ds)), meanMS(garp))
		}

		var dual, loaded []time.Duration
		for i := 0; i < benchRuns; i++ {
			dual = append(dual, e.partitionHeal(ip))
		}
		load, unload := context.WithCancel(context.Background())
		stopped := e.hogCPU(load)
		for i := 0; i < benchRuns; i++ {
			loaded = append(loaded, e.partitionHeal(ip))
		}
		unload()
		stopped()
		fmt.Fprintf(&rep, "\n### After a partition heals\n\nThe owner's bridge port goes down until another node has taken over, then comes back. Time during which two MACs answer ARP for the address after the heal (probed from the client every 20 ms), %d runs: median %s, max %s; with 4 busy loops on the CPUs: median %s, max %s.\n",
			benchRuns, ms(median(dual)), ms(slices.Max(dual)), ms(median(loaded)), ms(slices.Max(loaded)))

		fmt.Fprintf(&rep, "\n### Speaker memory (VmRSS)\n\n| state | max over the three speakers |\n|---|---|\n")
		fmt.Fprintf(&rep, "| idle, one Service announced | %s |\n", mib(e.maxRSS()))
		many := e.createMany(1000)
		fmt.Fprintf(&rep, "| 1000 IPv6 addresses announced by one node (%s) | %s |\n", many, mib(e.rssOf(many)))

		fmt.Fprintf(&rep, "\n### Detection timing trade-off\n\nSIGKILL and link-cut failover (medians of %d) against false member losses counted by all three speakers while 4 busy loops load the 2 CPUs for 20 s with nobody dying. Heartbeat 0 is memberlist's detection alone; the last row is the default.\n\n", benchRuns)
		fmt.Fprintf(&rep, "| probe interval / timeout / suspicion mult / heartbeat | SIGKILL failover median | link cut failover median | false member losses in 20 s of CPU load |\n|---|---|---|---|\n")
		for _, d := range []struct{ interval, timeout, mult, heartbeat string }{
			{"1s", "500ms", "4", "0"}, {"200ms", "100ms", "2", "0"}, {"100ms", "50ms", "1", "0"}, {"200ms", "100ms", "2", "50ms"}, {"1s", "500ms", "2", "50ms"},
		} {
			e.restartSpeakers([]string{"--memberlist-probe-interval", d.interval, "--memberlist-probe-timeout", d.timeout,
				"--memberlist-suspicion-mult", d.mult, "--memberlist-heartbeat", d.heartbeat})
			medians := map[string]time.Duration{}
			for _, blow := range []string{"SIGKILL", "link cut"} {
				var ds []time.Duration
				for i := 0; i < benchRuns; i++ {
					dd, _ := e.timedFailover(ip, blow)
					ds = append(ds, dd)
				}
				medians[blow] = median(ds)
			}
			losses, how := e.falseLossesUnderLoad(20 * time.Second)
			fmt.Fprintf(&rep, "| %s / %s / %s / %s | %s | %s | %d %s |\n", d.interval, d.timeout, d.mult, d.heartbeat,
				ms(medians["SIGKILL"]), ms(medians["link cut"]), losses, how)
		}
		b.Log("\n" + rep.String())
		if out := os.Getenv("PORTICO_BENCH_L2_OUT"); out != "" {
			must(b, os.WriteFile(out, []byte(rep.String()), 0o644))
		}
	})
}

func runtimeCPUs() int {
	n := 0
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "processor") {
			n++
		}
	}
	return n
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }

func meanMS(xs []float64) string {
	if len(xs) == 0 {
		return "n/a"
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return fmt.Sprintf("%.1f ms", sum/float64(len(xs))*1000)
}

func mib(kb int) string { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }

// neighWatch follows the client's neighbour table and reports when ip gets mac.
func (e *l2Env) neighWatch(ip netip.Addr, mac string) (got <-chan time.Time, stop func()) {
	lines, stop := ipMonitor(e.t, e.Client.NS, "neigh")
	ch := make(chan time.Time, 1)
	go func() {
		for ev := range lines {
			f := strings.Fields(ev.line)
			if len(f) < 4 || f[0] != ip.String() || !strings.Contains(ev.line, "lladdr "+mac) {
				continue
			}
			select {
			case ch <- ev.at:
			default:
			}
		}
	}()
	return ch, stop
}

// timedFailover hurts ip's owner (the node holding it: each run's heal leaves it with the node
// that took over), times the client's entry moving to the next owner and heals. It also returns the mean of the new owner's
// failover histogram for this run (seconds; -1 when it recorded nothing).
func (e *l2Env) timedFailover(ip netip.Addr, blow string) (time.Duration, float64) {
	owner, next := e.heldBy(ip)
	e.settle(ip, owner)
	sum0, n0 := e.histogram(next)
	got, stop := e.neighWatch(ip, e.macOf(next))
	defer stop()
	t0, heal := e.hurt(owner, blow)
	defer heal()
	var took time.Duration
	select {
	case ts := <-got:
		took = ts.Sub(t0)
	case <-time.After(10 * time.Second):
		e.t.Fatalf("%s: client's entry never moved to %s", blow, next)
	}
	sum1, n1 := e.histogram(next)
	g := -1.0
	if n1 > n0 {
		g = (sum1 - sum0) / (n1 - n0)
	}
	return took, g
}

// hurt deals the blow ("SIGTERM", "SIGKILL" or "link cut") to node's speaker and returns when
// it was dealt and how to heal it: restart the speaker (once the killed one is gone) or bring
// the link back.
func (e *l2Env) hurt(node, blow string) (t0 time.Time, heal func()) {
	switch blow {
	case "SIGTERM", "SIGKILL":
		sig := syscall.SIGTERM
		if blow == "SIGKILL" {
			sig = syscall.SIGKILL
		}
		p := e.speakers[node]
		delete(e.speakers, node)
		t0 = time.Now()
		_ = p.cmd.Process.Signal(sig)
		return t0, func() { <-p.done; e.startSpeaker(node) }
	case "link cut":
		t0 = time.Now()
		run(e.t, "ip", "-n", e.Switch, "link", "set", e.node(node).Port, "down")
		return t0, func() { run(e.t, "ip", "-n", e.Switch, "link", "set", e.node(node).Port, "up") }
	}
	e.t.Fatalf("unknown blow %q", blow)
	return t0, nil
}

// histogram reads a speaker's failover histogram (sum in seconds, count).
func (e *l2Env) histogram(node string) (sum, count float64) {
	return e.metric(node, "portico_l2_failover_seconds_sum"), e.metric(node, "portico_l2_failover_seconds_count")
}

// metric scrapes one unlabelled series from a speaker's metrics endpoint (0 when absent).
func (e *l2Env) metric(node, name string) float64 {
	resp, err := http.Get("http://" + e.node(node).IPv4.Addr().String() + ":7474/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(body), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return 0
}

// rssOf is the VmRSS of node's speaker and of its BGP process if it runs one, in KiB.
func (e *l2Env) rssOf(node string) int {
	return e.procStatus(node)["VmRSS"] + e.bgpStatus(node)["VmRSS"]
}

func (e *l2Env) maxRSS() int {
	m := 0
	for _, n := range e.Nodes {
		m = max(m, e.rssOf(n.Name))
	}
	return m
}

// createLBServices creates n LoadBalancer Services named prefix-<ip> with consecutive addresses
// from first in their status, four writers in parallel. With endpoints, each also gets the
// EndpointSlice a real cluster would have (one ready endpoint, on the nodes in turn), so the
// speakers plan with as many slices as Services.
func (e *l2Env) createLBServices(prefix string, first netip.Addr, n int, endpoints bool) {
	e.createLBServicesBy(4, prefix, first, n, endpoints)
}

// createLBServicesBy is createLBServices with that many writers. It stops at the first write
// the apiserver refuses and fails the test with it.
func (e *l2Env) createLBServicesBy(writers int, prefix string, first netip.Addr, n int, endpoints bool) {
	type item struct {
		ip netip.Addr
		i  int
	}
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	work := make(chan item)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				if err := e.createLBService(prefix, it.ip, it.i, endpoints); err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	ip := first
	for i := 0; i < n && failed.Load() == nil; i++ {
		work <- item{ip, i}
		ip = ip.Next()
	}
	close(work)
	wg.Wait()
	if err := failed.Load(); err != nil {
		e.t.Fatalf("creating %d Services: %v", n, *err)
	}
}

// createLBService creates the LoadBalancer Service prefix-<ip> (with its EndpointSlice, the i-th,
// when endpoints) and writes ip into its status.
func (e *l2Env) createLBService(prefix string, ip netip.Addr, i int, endpoints bool) error {
	ctx := context.Background()
	name := prefix + "-" + strings.NewReplacer(":", "-", ".", "-").Replace(ip.String())
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			// The node-port range (2768 ports) would run out before 10 000 Services; the
			// speakers read no node port.
			AllocateLoadBalancerNodePorts: ptr.To(false),
			Ports:                         []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}}}
	if err := e.c.Create(ctx, svc); err != nil {
		return err
	}
	if endpoints {
		if err := e.c.Create(ctx, benchSlice(svc, e.Nodes[i%len(e.Nodes)].Name, i)); err != nil {
			return err
		}
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
	return e.c.Status().Update(ctx, svc)
}

// benchSlice is the EndpointSlice of svc with one ready endpoint on node, as the endpointslice
// controller writes it.
func benchSlice(svc *corev1.Service, node string, i int) *discoveryv1.EndpointSlice {
	ready, port, proto := true, int32(80), corev1.ProtocolTCP
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name + "-x", Namespace: svc.Namespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{fmt.Sprintf("10.244.%d.%d", i/250%250, i%250+1)}, NodeName: &node,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports: []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}},
	}
}

// createMany gives one node n IPv6 addresses (one Service each) and waits until it announces
// them all; it returns the node's name.
func (e *l2Env) createMany(n int) string {
	ctx := context.Background()
	node := "node-a"
	pool := &v1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "many"},
		Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"2001:db8:1::1:0/112"}}}
	must(e.t, e.c.Create(ctx, pool))
	ad := &v1alpha1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "many"}, Spec: v1alpha1.L2AdvertisementSpec{
		IPAddressPools: []v1alpha1.Name{"many"},
		NodeSelectors:  []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": node}}}}}
	must(e.t, e.c.Create(ctx, ad))
	e.createLBServices("many", netip.MustParseAddr("2001:db8:1::1:1"), n, false)
	waitFor(e.t, fmt.Sprintf("%s announces %d addresses", node, n+1), 2*time.Minute, func() bool {
		var sp v1alpha1.Speaker
		return e.c.Get(ctx, clientKey(node), &sp) == nil && int(sp.Status.L2Announcements) >= n
	})
	return node
}

// restartSpeakers stops every speaker (SIGTERM) and starts them again with extra flags.
func (e *l2Env) restartSpeakers(extra []string) {
	for _, n := range e.Nodes {
		e.kill(n.Name, syscall.SIGTERM)
	}
	e.extraArgs = extra
	for _, n := range e.Nodes {
		e.startSpeaker(n.Name)
	}
}
