package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/controlplane"
)

// ipWatch records when each Service of a namespace first shows an address, and when it first
// shows the controller's health conditions (EndpointsReady).
type ipWatch struct {
	mu        sync.Mutex
	seen      arrivals // addresses
	explained arrivals // health conditions
	n         int
	stop      func() // stops the informer (also at the benchmark's end)
}

// arrivals are when each Service first showed something.
type arrivals struct {
	at  map[string]time.Time
	all chan struct{} // closed when n Services have shown it
	// what they show, for a benchmark that gives up waiting
	what string
}

func newArrivals(what string) arrivals {
	return arrivals{at: map[string]time.Time{}, all: make(chan struct{}), what: what}
}

// mark records the Service's first showing, now; call with the watch's mu held.
func (a *arrivals) mark(name string, n int) {
	if _, done := a.at[name]; !done {
		a.at[name] = time.Now()
		if len(a.at) == n {
			close(a.all)
		}
	}
}

func watchIPs(b *testing.B, cp *controlplane.ControlPlane, ns string, n int) *ipWatch {
	iw := &ipWatch{seen: newArrivals("an address"), explained: newArrivals("its health conditions"), n: n}
	record := func(obj any) {
		svc, ok := obj.(*corev1.Service)
		if !ok {
			return
		}
		iw.mu.Lock()
		defer iw.mu.Unlock()
		if len(svc.Status.LoadBalancer.Ingress) > 0 {
			iw.seen.mark(svc.Name, n)
		}
		if meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionEndpointsReady) != nil {
			iw.explained.mark(svc.Name, n)
		}
	}
	// An informer, not a bare watch: it survives the apiserver closing a long watch.
	factory := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(cp.Config), 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Services().Informer()
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	iw.stop = sync.OnceFunc(func() { close(stop); factory.Shutdown() })
	b.Cleanup(iw.stop)
	return iw
}

// wait returns when the last Service got its address.
func (iw *ipWatch) wait(b *testing.B) time.Time { return iw.last(b, &iw.seen) }

// waitExplained returns when the last Service got its health conditions.
func (iw *ipWatch) waitExplained(b *testing.B) time.Time { return iw.last(b, &iw.explained) }

// last waits until every Service has shown a's thing and returns when the last one did.
func (iw *ipWatch) last(b *testing.B, a *arrivals) time.Time {
	select {
	case <-a.all:
	case <-time.After(10 * time.Minute):
		iw.mu.Lock()
		defer iw.mu.Unlock()
		b.Fatalf("only %d of %d Services got %s", len(a.at), iw.n, a.what)
	}
	iw.mu.Lock()
	defer iw.mu.Unlock()
	var last time.Time
	for _, t := range a.at {
		if t.After(last) {
			last = t
		}
	}
	return last
}

// first is when the first Service showed an address.
func (iw *ipWatch) first() time.Time {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	var first time.Time
	for _, t := range iw.seen.at {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first
}

// create makes n Services from 8 goroutines; write, when set, is called right after each
// creation (the floor's single status write). It returns each Service's creation time.
func create(b testing.TB, cp *controlplane.ControlPlane, ns string, n int, write func(*corev1.Service, int) error) map[string]time.Time {
	var mu sync.Mutex
	created := map[string]time.Time{}
	next := make(chan int)
	var wg sync.WaitGroup
	var failed error
	for range 8 {
		wg.Go(func() {
			for i := range next {
				svc := benchService(ns, i)
				start := time.Now()
				err := cp.Client.Create(context.Background(), svc)
				if err == nil && write != nil {
					err = write(svc, i)
				}
				mu.Lock()
				created[svc.Name] = start
				if err != nil {
					failed = err
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if failed != nil {
		b.Fatal(failed)
	}
	return created
}

// benchService is the benchmarks' Service number i.
func benchService(ns string, i int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("svc-%05d", i)},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			// The node-port range (2768 ports) would run out before 5000 Services.
			AllocateLoadBalancerNodePorts: ptr.To(false),
			Ports:                         []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
}

// floorWrite gives Service i an address with one status write, as an ideal controller would.
func floorWrite(cp *controlplane.ControlPlane) func(*corev1.Service, int) error {
	return func(svc *corev1.Service, i int) error {
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{
			IP: floorAddr(i), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
		return cp.Client.Status().Update(context.Background(), svc)
	}
}

func floorAddr(i int) string { return fmt.Sprintf("198.18.%d.%d", i/256, i%256) }

// explainedFloorWrite writes, in one request, what the controller's first write carries in
// these benchmarks (no pods, no speakers): the address, the allocated-from-pool annotation and
// the four conditions with the controller's reasons and messages. Against this floor the
// controller's cost is its own work, not the size of what it explains.
func explainedFloorWrite(cp *controlplane.ControlPlane) func(*corev1.Service, int) error {
	return func(svc *corev1.Service, i int) error {
		ip := floorAddr(i)
		svc.Annotations = map[string]string{porticov1.AnnotationAllocatedFromPool: "bench"}
		now := metav1.Now()
		condition := func(t string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
			return metav1.Condition{Type: t, Status: status, Reason: reason, Message: message, LastTransitionTime: now}
		}
		svc.Status.Conditions = []metav1.Condition{
			condition(porticov1.ConditionIPAllocated, metav1.ConditionTrue, "Allocated", ip+" from pool bench"),
			condition(porticov1.ConditionEndpointsReady, metav1.ConditionUnknown, "NoSelector",
				"the Service has no selector, so Kubernetes does not manage its endpoints; no EndpointSlice labelled kubernetes.io/service-name="+svc.Name+" lists a ready endpoint"),
			condition(porticov1.ConditionAnnounced, metav1.ConditionFalse, "NoSpeakers",
				"no speaker has reported (no Speaker objects): is the portico-speaker DaemonSet running?"),
			condition(porticov1.ConditionReachable, metav1.ConditionUnknown, "NotProbed",
				"no speaker reports a probe of "+ip+" (self-check switched off, or no node besides the owner)"),
		}
		return floorWrite(cp)(svc, i)
	}
}

// A floor is the same Services' addresses written by the benchmark itself, one status write
// each, with no controller: what the apiserver cannot go below.
type floor struct {
	name  string // "floor" or "floor-explained", the prefix of its metrics
	write func(*controlplane.ControlPlane) func(*corev1.Service, int) error
}

var floors = []floor{{"floor", floorWrite}, {"floor-explained", explainedFloorWrite}}

// reportFloors reports each floor's time and the controller's time against it.
func reportFloors(b *testing.B, took time.Duration, measured map[string]time.Duration) {
	for _, f := range floors {
		b.ReportMetric(measured[f.name].Seconds(), "s-"+f.name)
		b.ReportMetric(took.Seconds()/measured[f.name].Seconds(), "x-"+f.name)
	}
}

// apiWrites counts the apiserver's write requests by verb and resource ("PUT services/status",
// "POST events").
func apiWrites(b *testing.B, cp *controlplane.ControlPlane) map[string]float64 {
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	counts := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		labels, value, _ := strings.Cut(line[len("apiserver_request_total{"):], "} ")
		l := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			l[k] = strings.Trim(v, `"`)
		}
		if !slices.Contains([]string{"POST", "PUT", "PATCH", "APPLY"}, l["verb"]) {
			continue
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		v, _ := strconv.ParseFloat(value, 64)
		counts[key] += v
	}
	return counts
}

func delta(after, before map[string]float64, keys ...string) float64 {
	d := 0.0
	for _, k := range keys {
		d += after[k] - before[k]
	}
	return d
}

// peakRSS reads a process's peak resident memory in MiB.
func peakRSS(b *testing.B, pid int) float64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// cpuSeconds reads the CPU time a process has used so far (user and system).
func cpuSeconds(b *testing.B, pid int) float64 {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	_, seconds := statCPU(stat)
	return seconds
}

// planeCPU is the CPU time a control plane's kube-apiserver and etcd, and this benchmark's own
// process (its writes in a floor, its watch in every phase), have used so far.
type planeCPU struct{ apiserver, etcd, bench float64 }

func readPlaneCPU(b *testing.B, cp *controlplane.ControlPlane) planeCPU {
	apiserver, etcd, err := cp.PIDs()
	if err != nil {
		b.Fatal(err)
	}
	return planeCPU{cpuSeconds(b, apiserver), cpuSeconds(b, etcd), cpuSeconds(b, os.Getpid())}
}

// report gives the CPU used since start, each metric's name prefixed ("floor-" for the floor).
func (start planeCPU) report(b *testing.B, cp *controlplane.ControlPlane, prefix string) {
	now := readPlaneCPU(b, cp)
	b.ReportMetric(now.apiserver-start.apiserver, "s-"+prefix+"apiserver-cpu")
	b.ReportMetric(now.etcd-start.etcd, "s-"+prefix+"etcd-cpu")
	b.ReportMetric(now.bench-start.bench, "s-"+prefix+"bench-cpu")
}

// statCPU reads a /proc/PID/stat: the command's name and the CPU time (user and system) used.
func statCPU(stat []byte) (comm string, seconds float64) {
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return "", 0
	}
	// After the command's name, in parentheses: state is field 3, utime 14 and stime 15.
	f := strings.Fields(string(stat[end+1:]))
	if len(f) < 13 {
		return "", 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return string(stat[open+1 : end]), (utime + stime) / 100 // USER_HZ is 100 on Linux
}

// profiler saves a benchmark's profiles and the controller's logs to the directory
// PORTICO_BENCH_PROFILE_DIR names; without it, it records nothing and logs go to logFile.
type profiler struct {
	b    *testing.B
	dir  string
	addr string // the controller's pprof endpoint
}

func newProfiler(b *testing.B) *profiler {
	p := &profiler{b: b, dir: os.Getenv("PORTICO_BENCH_PROFILE_DIR")}
	if p.dir != "" {
		p.addr = freeAddr(b)
	}
	return p
}

// args are the flags that give the controller its pprof endpoint.
func (p *profiler) args() []string {
	if p.dir == "" {
		return nil
	}
	return []string{"--pprof-bind-address", p.addr, "--zap-time-encoding=rfc3339nano"}
}

// log is where the controller named name logs (kept after the run when profiling).
func (p *profiler) log(name string) io.Writer {
	if p.dir == "" {
		return logFile(p.b, name)
	}
	f, err := os.Create(filepath.Join(p.dir, name+".log"))
	if err != nil {
		p.b.Fatal(err)
	}
	p.b.Cleanup(func() { f.Close() })
	return f
}

// heap saves the controller's heap profile as name.heap.
func (p *profiler) heap(name string) {
	if p.dir == "" {
		return
	}
	if err := p.save(name+".heap", p.controllerProfile("heap")); err != nil {
		p.b.Fatal(err)
	}
}

// apiserverCPU records the apiserver's CPU profile for the next seconds in the background
// (kube-apiserver serves pprof by default); the function it returns waits for it and saves it
// as name.apiserver.cpu.
func (p *profiler) apiserverCPU(cp *controlplane.ControlPlane, name string, seconds int) (saved func()) {
	if p.dir == "" {
		return func() {}
	}
	return background(p.b, "the apiserver's CPU profile", func() error {
		return p.save(name+".apiserver.cpu", func() ([]byte, error) {
			return kubernetes.NewForConfigOrDie(cp.Config).RESTClient().Get().AbsPath("/debug/pprof/profile").
				Param("seconds", strconv.Itoa(seconds)).DoRaw(context.Background())
		})
	})
}

// controllerCPU records the controller's CPU profile for the next seconds, from as soon as it
// answers, in the background; the function it returns waits for it and saves it as
// name.controller.cpu.
func (p *profiler) controllerCPU(name string, seconds int) (saved func()) {
	if p.dir == "" {
		return func() {}
	}
	return background(p.b, "the controller's CPU profile", func() error {
		return p.save(name+".controller.cpu", p.controllerProfile(fmt.Sprintf("profile?seconds=%d", seconds)))
	})
}

// controllerProfile fetches /debug/pprof/<query> from the controller, trying again while it
// is starting (for at most 10 s).
func (p *profiler) controllerProfile(query string) func() ([]byte, error) {
	return func() ([]byte, error) {
		var resp *http.Response
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true,
			func(context.Context) (bool, error) {
				var err error
				resp, err = http.Get("http://" + p.addr + "/debug/pprof/" + query)
				return err == nil, nil // not up yet: poll again
			})
		if err != nil {
			return nil, fmt.Errorf("the controller's pprof endpoint never answered: %w", err)
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
}

func (p *profiler) save(file string, fetch func() ([]byte, error)) error {
	raw, err := fetch()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(p.dir, file), raw, 0o644)
}

// background runs fn (a profile being recorded) beside the benchmark; the function it returns
// waits for it and fails the benchmark on its error.
func background(b *testing.B, what string, fn func() error) (wait func()) {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	return func() {
		if err := <-done; err != nil {
			b.Errorf("%s: %v", what, err)
		}
	}
}

// leaseWrites are the apiserver's own lease renewals, not the controller's.
func leaseWrites(after, before map[string]float64) float64 {
	return delta(after, before, "PUT leases", "POST leases", "PATCH leases")
}

// BenchmarkBurst: n Services created while the controller runs, against the floor (the same
// creations, each followed by one status write from the client, no controller).
func BenchmarkBurst(b *testing.B) {
	n := envSize(b, "PORTICO_BENCH_SERVICES", 5000, 1) // Services in the end-to-end benchmarks
	measured := map[string]time.Duration{}
	for _, f := range floors {
		cp := startControlPlane(b)
		iw := watchIPs(b, cp, "default", n)
		cpu := readPlaneCPU(b, cp)
		start := time.Now()
		create(b, cp, "default", n, f.write(cp))
		measured[f.name] = iw.wait(b).Sub(start)
		cpu.report(b, cp, f.name+"-")
		iw.stop()
		stopControlPlane(b, cp)
	}

	cp := startControlPlane(b)
	createPool(b, cp, "bench", "198.18.0.0/16")
	ctrl := startController(b, cp, logFile(b, "controller"))
	waitPoolAssigned(b, cp, "bench", 0) // the controller is up and has seen the pool
	before := apiWrites(b, cp)
	iw := watchIPs(b, cp, "default", n)
	cpu, ctrlCPU := readPlaneCPU(b, cp), cpuSeconds(b, ctrl.cmd.Process.Pid)
	start := time.Now()
	created := create(b, cp, "default", n, nil)
	took := iw.wait(b).Sub(start)
	cpu.report(b, cp, "")
	b.ReportMetric(cpuSeconds(b, ctrl.cmd.Process.Pid)-ctrlCPU, "s-controller-cpu")
	ctrl.waitSettled(b, n)
	waitPoolAssigned(b, cp, "bench", int64(n))
	after := apiWrites(b, cp)

	var lat []time.Duration
	for name, at := range iw.seen.at {
		lat = append(lat, at.Sub(created[name]))
	}
	b.ReportMetric(float64(n), "services")
	b.ReportMetric(took.Seconds(), "s-all-allocated")
	reportFloors(b, took, measured)
	b.ReportMetric(float64(median(lat).Milliseconds()), "ms-p50-create-to-ip")
	b.ReportMetric(delta(after, before, "PUT services/status", "PATCH services/status", "PUT services", "PATCH services")/float64(n), "service-writes/svc")
	b.ReportMetric(delta(after, before, "POST events", "PATCH events")/float64(n), "events/svc")
	b.ReportMetric(peakRSS(b, ctrl.cmd.Process.Pid), "MiB-peak-rss")
}

// BenchmarkBacklog: n Services exist before the controller starts, against the floor (a loop
// that writes each Service's status once), then a restart with the same n Services.
func BenchmarkBacklog(b *testing.B) {
	n := envSize(b, "PORTICO_BENCH_SERVICES", 5000, 1) // Services in the end-to-end benchmarks
	measured := map[string]time.Duration{}
	for _, f := range floors {
		measured[f.name] = backlogFloor(b, n, f)
	}

	cp := startControlPlane(b)
	createPool(b, cp, "bench", "198.18.0.0/16")
	create(b, cp, "default", n, nil)
	iw := watchIPs(b, cp, "default", n)
	prof := newProfiler(b)
	// Built before the clock starts: the time is the controller's, not the linker's.
	buildBinary(b, "./cmd/portico-controller")
	beforeFirst := apiWrites(b, cp)
	planeBefore := readPlaneCPU(b, cp)
	apiserverProfiled := prof.apiserverCPU(cp, fmt.Sprintf("backlog-%d", n), 5)
	controllerProfiled := prof.controllerCPU(fmt.Sprintf("backlog-%d", n), 5)
	start := time.Now()
	first := startController(b, cp, prof.log("first"), append(prof.args(), "--news-after", backlogNewsAfter.String())...)
	took := iw.wait(b).Sub(start)
	planeBefore.report(b, cp, "")
	firstIP := iw.first().Sub(start)
	cpu := cpuSeconds(b, first.cmd.Process.Pid)
	allocated := apiWrites(b, cp)
	// After the measurements: the profiles may still be recording.
	apiserverProfiled()
	controllerProfiled()
	prof.heap(fmt.Sprintf("backlog-%d", n))
	explained := iw.waitExplained(b).Sub(start)
	first.waitSettled(b, n)
	waitPoolAssigned(b, cp, "bench", int64(n))
	settledWrites := apiWrites(b, cp)
	first.waitNewsTold(b, start.Add(explained))
	toldWrites := apiWrites(b, cp)
	// The whole backlog's cost to the control plane, its events included.
	planeBefore.report(b, cp, "told-")
	snap := takeSnapshot(b, cp)
	rss := peakRSS(b, first.cmd.Process.Pid)

	first.stop(syscall.SIGKILL)
	before := apiWrites(b, cp)
	restart := time.Now()
	second := startController(b, cp, prof.log("second"))
	second.waitSettled(b, n)
	settled := time.Since(restart)
	after := apiWrites(b, cp)
	changed := 0
	for name, s := range takeSnapshot(b, cp) {
		if snap[name].ips != s.ips {
			changed++
		}
	}

	b.ReportMetric(float64(n), "services")
	b.ReportMetric(took.Seconds(), "s-all-allocated")
	reportFloors(b, took, measured)
	b.ReportMetric(rss, "MiB-peak-rss")
	b.ReportMetric(cpu, "s-controller-cpu")
	b.ReportMetric(firstIP.Seconds(), "s-first-allocated")
	b.ReportMetric(explained.Seconds(), "s-all-explained")
	firstWrites := 0.0
	for k := range allocated {
		firstWrites += allocated[k] - beforeFirst[k]
	}
	b.ReportMetric((firstWrites-leaseWrites(allocated, beforeFirst))/float64(n), "writes/svc-until-allocated")
	b.ReportMetric(delta(settledWrites, beforeFirst, "PUT services/status")/float64(n), "status-writes/svc-until-settled")
	// Once the news is told too: every write the controller sent for the backlog, events
	// included (the goal is at most 1.1 a Service).
	b.ReportMetric(delta(toldWrites, beforeFirst, "POST events", "PATCH events")/float64(n), "events/svc")
	allWrites := 0.0
	for k := range toldWrites {
		allWrites += toldWrites[k] - beforeFirst[k]
	}
	b.ReportMetric((allWrites-leaseWrites(toldWrites, beforeFirst))/float64(n), "writes/svc")
	b.ReportMetric(settled.Seconds(), "s-restart-settle")
	restartWrites := 0.0
	for k := range after {
		if d := after[k] - before[k]; d > 0 {
			restartWrites += d
			b.Logf("during the restart: %s × %.0f", k, d) // the apiserver's own lease renewals among them
		}
	}
	b.ReportMetric(restartWrites-leaseWrites(after, before), "restart-writes")
	b.ReportMetric(float64(changed), "restart-ips-changed")
}

// backlogNewsAfter is the backlog controller's --news-after: short, so that the problems its
// Services are left with (no speaker, in this cluster) become news within the benchmark, and
// the events they cost are counted.
const backlogNewsAfter = 3 * time.Second

// waitNewsTold waits until every problem stored by explained (when the last Service got its
// health conditions) has lasted backlogNewsAfter, its Service was looked at again and the
// events it made were sent: the health queue and the events waiting are empty after that.
func (p *controllerProcess) waitNewsTold(b *testing.B, explained time.Time) {
	due := explained.Add(backlogNewsAfter + 3*time.Second)
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if time.Now().Before(due) {
			return false, nil
		}
		m, err := p.scrape(ctx)
		if err != nil {
			return false, err
		}
		return sum(m, "workqueue_depth", map[string]string{"name": "service-health"}) == 0 &&
			sum(m, "portico_events_pending", nil) == 0, nil
	})
	if err != nil {
		b.Fatalf("the controller's news was not told: %v", err)
	}
}

// backlogFloor lists n existing Services and writes each one's status once from 8 writers.
func backlogFloor(b *testing.B, n int, f floor) time.Duration {
	cp := startControlPlane(b)
	defer stopControlPlane(b, cp)
	create(b, cp, "default", n, nil)
	iw := watchIPs(b, cp, "default", n)
	var list corev1.ServiceList
	cpu := readPlaneCPU(b, cp)
	profiled := newProfiler(b).apiserverCPU(cp, fmt.Sprintf("backlog-%d-%s", n, f.name), 4)
	start := time.Now()
	if err := cp.Client.List(context.Background(), &list); err != nil {
		b.Fatal(err)
	}
	work := make(chan int)
	var wg sync.WaitGroup
	write := f.write(cp)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				if err := write(&list.Items[i], i); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range list.Items {
		if list.Items[i].Spec.Type == corev1.ServiceTypeLoadBalancer {
			work <- i
		}
	}
	close(work)
	wg.Wait()
	took := iw.wait(b).Sub(start)
	cpu.report(b, cp, f.name+"-")
	profiled()
	iw.stop()
	return took
}
