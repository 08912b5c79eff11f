package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/portico-lb/portico/internal/controlplane"
)

var binDir string

func TestMain(m *testing.M) {
	controlplane.QuietLogs()
	var err error
	if binDir, err = os.MkdirTemp("", "portico-e2e-bin-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

var builds sync.Map // package → *buildResult

type buildResult struct {
	once sync.Once
	path string
	err  error
}

// buildBinary builds a main package of the module once per test run, with the race detector
// when the test binary has it.
func buildBinary(t testing.TB, pkg string) string {
	t.Helper()
	root, err := controlplane.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	v, _ := builds.LoadOrStore(pkg, &buildResult{})
	b := v.(*buildResult)
	b.once.Do(func() {
		b.path = filepath.Join(binDir, filepath.Base(pkg))
		// As the image builds it (hack/image): without gRPC's tracing.
		args := []string{"build", "-tags", "grpcnotrace", "-o", b.path}
		if raceDetector {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// freeAddr returns a loopback address with a port nobody listens on.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// controllerProcess is a portico-controller running as its own process.
type controllerProcess struct {
	cmd     *exec.Cmd
	metrics string // address of its metrics endpoint
	done    chan error
}

// startController runs portico-controller against the control plane until the test ends.
func startController(t testing.TB, cp *controlplane.ControlPlane, log io.Writer, args ...string) *controllerProcess {
	t.Helper()
	bin := buildBinary(t, "./cmd/portico-controller")
	p := &controllerProcess{metrics: freeAddr(t), done: make(chan error, 1)}
	p.cmd = exec.Command(bin, append([]string{"--metrics-bind-address", p.metrics, "--health-probe-bind-address", "0"}, args...)...)
	p.cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { p.stop(syscall.SIGKILL) })
	return p
}

// stop signals the process and waits for it to exit.
func (p *controllerProcess) stop(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case err := <-p.done:
		p.done <- err // a later stop (the test's cleanup) returns at once too
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
	}
}

// scrape reads the process's metrics; a metric family maps to its samples.
func (p *controllerProcess) scrape(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	return scrapeMetrics(ctx, p.metrics)
}

// scrapeMetrics reads the metrics served at addr (host:port).
func scrapeMetrics(ctx context.Context, addr string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// sum adds the values of a metric's samples whose labels include every given label.
func sum(families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	total := 0.0
	f := families[name]
	if f == nil {
		return 0
	}
	for _, m := range f.Metric {
		match := 0
		for _, l := range m.Label {
			if v, ok := labels[l.GetName()]; ok && v == l.GetValue() {
				match++
			}
		}
		if match != len(labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		}
	}
	return total
}

// waitSettled waits until the process has reconciled at least n Services and has nothing
// queued: then everything it was going to write is written.
func (p *controllerProcess) waitSettled(t testing.TB, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := p.scrape(ctx)
		if err != nil {
			return false, nil // not listening yet
		}
		reconciled := sum(m, "controller_runtime_reconcile_total", map[string]string{"controller": "service"})
		queued := sum(m, "workqueue_depth", map[string]string{"name": "service"}) +
			sum(m, "workqueue_depth", map[string]string{"name": "service-health"})
		return reconciled >= float64(n) && queued == 0, nil
	})
	if err != nil {
		t.Fatalf("the controller did not settle after reconciling %d Services: %v", n, err)
	}
}

type coordinationLease struct{ coordinationv1.Lease }

// logFile collects a process's output; the test prints its end when it fails.
func logFile(t testing.TB, name string) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer f.Close()
		b, _ := os.ReadFile(f.Name())
		checkRaces(t, name, b)
		if !t.Failed() {
			return
		}
		if len(b) > 8000 {
			b = b[len(b)-8000:]
		}
		t.Logf("end of %s's log:\n%s", name, b)
	})
	return f
}

// raceReport is how the race detector starts each report it prints.
const raceReport = "WARNING: DATA RACE"

// acceptedRace is a race in code Portico links but does not own, known by the source line of
// one of its two accesses, and why it is left. The line names the module's version: after an
// upgrade the entry no longer matches, and the race, if it is still there, fails again.
type acceptedRace struct{ at, why string }

const gobgpGlobals = "GoBGP v4.8.0's route selection globals, the same zero values from every server " +
	"(speaker/bgp.Sessions; fixed upstream by osrg/gobgp#3659)"

var acceptedRaces = []acceptedRace{
	{"github.com/osrg/gobgp/v4@v4.8.0/pkg/server/server.go:2680 ", gobgpGlobals},
	{"github.com/osrg/gobgp/v4@v4.8.0/pkg/server/server.go:2681 ", gobgpGlobals},
}

// checkRaces fails the test if the log of a process it started holds a race detector's report
// that acceptedRaces does not name, and shows the first: the process may have gone on working,
// but the race is a defect.
func checkRaces(t testing.TB, name string, log []byte) {
	t.Helper()
	var found []string
	for _, r := range strings.Split(string(log), raceReport)[1:] {
		if end := strings.Index(r, "\n==================\n"); end >= 0 {
			r = r[:end]
		}
		i := slices.IndexFunc(acceptedRaces, func(a acceptedRace) bool { return strings.Contains(r, a.at) })
		if i < 0 {
			found = append(found, r)
			continue
		}
		t.Logf("%s: a data race accepted: %s", name, acceptedRaces[i].why)
	}
	if len(found) > 0 {
		t.Errorf("%s reported %d data races; the first:\n%s%s", name, len(found), raceReport, found[0])
	}
}

// envSize reads a size the Makefile passes in the environment (CI runs smaller ones than the
// defaults), or returns def; a value that is not a number of at least least fails.
func envSize(t testing.TB, name string, def, least int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < least {
		t.Fatalf("%s=%q: want a number ≥ %d", name, s, least)
	}
	return n
}

// envCounts reads a comma-separated list of counts from the environment variable name, each
// at least lo and at most hi, in growing order if growing; def when it is unset.
func envCounts(t testing.TB, name string, def []int, lo, hi int, growing bool) []int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < lo || n > hi || (growing && len(out) > 0 && n < out[len(out)-1]) {
			t.Fatalf("%s=%q: want numbers %d..%d, comma-separated%s", name, s, lo, hi, map[bool]string{true: ", growing"}[growing])
		}
		out = append(out, n)
	}
	return out
}
