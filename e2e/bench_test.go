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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/portico-lb/portico/internal/controlplane"
)

// ipWatch records when each Service of a namespace first shows an address.
type ipWatch struct {
	mu   sync.Mutex
	seen map[string]time.Time
	n    int
	all  chan struct{} // closed when n Services have an address
}

func watchIPs(b *testing.B, cp *controlplane.ControlPlane, ns string, n int) *ipWatch {
	iw := &ipWatch{seen: map[string]time.Time{}, n: n, all: make(chan struct{})}
	record := func(obj any) {
		svc, ok := obj.(*corev1.Service)
		if !ok || len(svc.Status.LoadBalancer.Ingress) == 0 {
			return
		}
		iw.mu.Lock()
		defer iw.mu.Unlock()
		if _, done := iw.seen[svc.Name]; !done {
			iw.seen[svc.Name] = time.Now()
			if len(iw.seen) == iw.n {
				close(iw.all)
			}
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
	b.Cleanup(func() { close(stop) })
	return iw
}

func (iw *ipWatch) wait(b *testing.B) time.Time {
	select {
	case <-iw.all:
	case <-time.After(10 * time.Minute):
		b.Fatalf("only %d of %d Services got an address", len(iw.seen), iw.n)
	}
	iw.mu.Lock()
	defer iw.mu.Unlock()
	var last time.Time
	for _, t := range iw.seen {
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
	for _, t := range iw.seen {
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
			IP: fmt.Sprintf("198.18.%d.%d", i/256, i%256), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
		return cp.Client.Status().Update(context.Background(), svc)
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

// profiling, when PORTICO_BENCH_PROFILE_DIR names a directory, gives the controller a pprof
// endpoint (the flags to start it with), a function that saves its heap profile there, and
// one that makes its log file there (kept after the run); otherwise no flags, a function that
// does nothing and logFile.
func profiling(b *testing.B) (args []string, save func(name string), log func(name string) io.Writer) {
	dir := os.Getenv("PORTICO_BENCH_PROFILE_DIR")
	if dir == "" {
		return nil, func(string) {}, func(name string) io.Writer { return logFile(b, name) }
	}
	log = func(name string) io.Writer {
		f, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		return f
	}
	addr := freeAddr(b)
	return []string{"--pprof-bind-address", addr, "--zap-time-encoding=rfc3339nano"}, func(name string) {
		resp, err := http.Get("http://" + addr + "/debug/pprof/heap")
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		profile, err := io.ReadAll(resp.Body)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+".heap"), profile, 0o644)
		}
		if err != nil {
			b.Fatal(err)
		}
	}, log
}

// leaseWrites are the apiserver's own lease renewals, not the controller's.
func leaseWrites(after, before map[string]float64) float64 {
	return delta(after, before, "PUT leases", "POST leases", "PATCH leases")
}

// BenchmarkBurst: n Services created while the controller runs, against the floor (the same
// creations, each followed by one status write from the client, no controller).
func BenchmarkBurst(b *testing.B) {
	n := envSize(b, "PORTICO_BENCH_SERVICES", 5000, 1) // Services in the end-to-end benchmarks
	floor := func() time.Duration {
		cp := startControlPlane(b)
		iw := watchIPs(b, cp, "default", n)
		start := time.Now()
		create(b, cp, "default", n, floorWrite(cp))
		return iw.wait(b).Sub(start)
	}()

	cp := startControlPlane(b)
	createPool(b, cp, "bench", "198.18.0.0/16")
	ctrl := startController(b, cp, logFile(b, "controller"))
	waitPoolAssigned(b, cp, "bench", 0) // the controller is up and has seen the pool
	before := apiWrites(b, cp)
	iw := watchIPs(b, cp, "default", n)
	start := time.Now()
	created := create(b, cp, "default", n, nil)
	took := iw.wait(b).Sub(start)
	ctrl.waitSettled(b, n)
	waitPoolAssigned(b, cp, "bench", int64(n))
	after := apiWrites(b, cp)

	var lat []time.Duration
	for name, at := range iw.seen {
		lat = append(lat, at.Sub(created[name]))
	}
	b.ReportMetric(float64(n), "services")
	b.ReportMetric(took.Seconds(), "s-all-allocated")
	b.ReportMetric(floor.Seconds(), "s-floor")
	b.ReportMetric(took.Seconds()/floor.Seconds(), "x-floor")
	b.ReportMetric(float64(median(lat).Milliseconds()), "ms-p50-create-to-ip")
	b.ReportMetric(delta(after, before, "PUT services/status", "PATCH services/status", "PUT services", "PATCH services")/float64(n), "service-writes/svc")
	b.ReportMetric(delta(after, before, "POST events", "PATCH events")/float64(n), "events/svc")
	b.ReportMetric(peakRSS(b, ctrl.cmd.Process.Pid), "MiB-peak-rss")
}

// BenchmarkBacklog: n Services exist before the controller starts, against the floor (a loop
// that writes each Service's status once), then a restart with the same n Services.
func BenchmarkBacklog(b *testing.B) {
	n := envSize(b, "PORTICO_BENCH_SERVICES", 5000, 1) // Services in the end-to-end benchmarks
	floor := func() time.Duration {
		cp := startControlPlane(b)
		create(b, cp, "default", n, nil)
		iw := watchIPs(b, cp, "default", n)
		var list corev1.ServiceList
		start := time.Now()
		if err := cp.Client.List(context.Background(), &list); err != nil {
			b.Fatal(err)
		}
		work := make(chan int)
		var wg sync.WaitGroup
		write := floorWrite(cp)
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
		return iw.wait(b).Sub(start)
	}()

	cp := startControlPlane(b)
	createPool(b, cp, "bench", "198.18.0.0/16")
	create(b, cp, "default", n, nil)
	iw := watchIPs(b, cp, "default", n)
	pprof, profiled, log := profiling(b)
	// Built before the clock starts: the time is the controller's, not the linker's.
	buildBinary(b, "./cmd/portico-controller")
	beforeFirst := apiWrites(b, cp)
	start := time.Now()
	first := startController(b, cp, log("first"), pprof...)
	took := iw.wait(b).Sub(start)
	firstIP := iw.first().Sub(start)
	cpu := cpuSeconds(b, first.cmd.Process.Pid)
	allocated := apiWrites(b, cp)
	profiled(fmt.Sprintf("backlog-%d", n))
	first.waitSettled(b, n)
	waitPoolAssigned(b, cp, "bench", int64(n))
	snap := takeSnapshot(b, cp)
	rss := peakRSS(b, first.cmd.Process.Pid)

	first.stop(syscall.SIGKILL)
	before := apiWrites(b, cp)
	restart := time.Now()
	second := startController(b, cp, log("second"))
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
	b.ReportMetric(floor.Seconds(), "s-floor")
	b.ReportMetric(took.Seconds()/floor.Seconds(), "x-floor")
	b.ReportMetric(rss, "MiB-peak-rss")
	b.ReportMetric(cpu, "s-controller-cpu")
	b.ReportMetric(firstIP.Seconds(), "s-first-allocated")
	firstWrites := 0.0
	for k := range allocated {
		firstWrites += allocated[k] - beforeFirst[k]
	}
	b.ReportMetric((firstWrites-leaseWrites(allocated, beforeFirst))/float64(n), "writes/svc-until-allocated")
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
