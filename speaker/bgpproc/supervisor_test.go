package bgpproc

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/speaker/bgp"
	"github.com/portico-lb/portico/speaker/plan"
)

// childEnv makes the test binary the BGP process (TestMain), as the speaker's subcommand does.
const childEnv = "PORTICO_BGPPROC_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		f := os.NewFile(3, "speaker")
		conn, err := net.FileConn(f)
		if err != nil {
			os.Exit(2)
		}
		sessions := &bgp.Sessions{Log: logr.Discard()}
		reg := prometheus.NewRegistry()
		reg.MustRegister(sessions)
		_ = Serve(conn, sessions, reg)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// onePeer is a plan with one session (to a closed port: it never comes up) carrying one route.
func onePeer() plan.BGP {
	pfx := netip.MustParsePrefix("203.0.113.10/32")
	return plan.BGP{
		Peers: map[string]plan.Peer{"tor": {Name: "tor", Address: netip.MustParseAddr("127.0.0.1"), Port: 1, MyASN: 64512, PeerASN: 64513,
			RouterID: netip.MustParseAddr("192.0.2.1"), HoldTime: 9 * time.Second, KeepaliveTime: 3 * time.Second, ConnectTime: time.Second}},
		Routes: map[string]map[netip.Prefix]plan.Route{"tor": {pfx: {Prefix: pfx, Services: []string{"default/web"}}}},
	}
}

type watched struct {
	*Supervisor
	reg *prometheus.Registry
	mu  sync.Mutex
	pid int
}

func supervised(t *testing.T) *watched {
	w := &watched{reg: prometheus.NewRegistry()}
	w.Supervisor = &Supervisor{Log: testr.New(t), Metrics: NewMetrics(w.reg), Command: func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1")
		return cmd
	}}
	t.Cleanup(w.Close)
	return w
}

func (w *watched) restarts(reason string) float64 {
	var m dto.Metric
	_ = w.Metrics.restarts.WithLabelValues(reason).Write(&m)
	return m.GetCounter().GetValue()
}

// child is the running BGP process's PID, once it has its plan.
func (w *watched) child() int {
	if p := w.running.Load(); p != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// TestRestartsAndHandsThePlanAgain: the process gets the plan, serves its metrics, and after it
// crashes (SIGSEGV) or is frozen (SIGSTOP: no answer to pings), a new one gets the same plan,
// while the sessions read down in between.
func TestRestartsAndHandsThePlanAgain(t *testing.T) {
	w := supervised(t)
	w.timing = timing{100 * time.Millisecond, 500 * time.Millisecond}
	if errs := w.Apply(context.Background(), onePeer()); len(errs) > 0 {
		t.Fatal(errs)
	}
	if st := w.States()["tor"]; st.Routes != 1 || st.Message != "" {
		t.Fatalf("after the first plan: %+v", st)
	}
	families, err := w.Gather()
	if i := slices.IndexFunc(families, func(f *dto.MetricFamily) bool { return f.GetName() == "portico_bgp_prefixes_advertised" }); err != nil || i < 0 ||
		families[i].GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("the process's metrics lack the route: %v %v", families, err)
	}
	var mu sync.Mutex
	var down int
	w.OnChange = func(_, after bgp.State) {
		mu.Lock()
		defer mu.Unlock()
		if after.Message != "" {
			down++
		}
	}
	restartedWithPlan := func(how string, old int) {
		t.Helper()
		netlab.WaitFor(t, "a new process with the plan after "+how, 10*time.Second, func() bool {
			st := w.States()["tor"]
			return w.child() != 0 && w.child() != old && st.Routes == 1 && st.Message == ""
		})
	}
	pid := w.child()
	must(t, syscall.Kill(pid, syscall.SIGSEGV))
	restartedWithPlan("SIGSEGV", pid)
	pid = w.child()
	must(t, syscall.Kill(pid, syscall.SIGSTOP))
	restartedWithPlan("SIGSTOP", pid)
	for _, reason := range []string{"exited", "stuck"} {
		if n := w.restarts(reason); n != 1 {
			t.Errorf("restarts for %s: %v, want 1", reason, n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if down != 2 {
		t.Errorf("the session was reported down by its message %d times, want 2 (once per end)", down)
	}
}

// TestPausedProcessGetsThePlanAfter: while the process does not answer (SIGSTOP, shorter than
// two pings), Apply returns at once and keeps the plan; once it answers again it has it.
func TestPausedProcessGetsThePlanAfter(t *testing.T) {
	w := supervised(t)
	w.timing = timing{100 * time.Millisecond, 2 * time.Second}
	if errs := w.Apply(context.Background(), onePeer()); len(errs) > 0 {
		t.Fatal(errs)
	}
	pid := w.child()
	must(t, syscall.Kill(pid, syscall.SIGSTOP))
	netlab.WaitFor(t, "a ping unanswered", 10*time.Second, w.suspect.Load)
	more := onePeer()
	pfx := netip.MustParsePrefix("203.0.113.11/32")
	more.Routes["tor"][pfx] = plan.Route{Prefix: pfx}
	began := time.Now()
	if errs := w.Apply(context.Background(), more); len(errs) > 0 || time.Since(began) > time.Second {
		t.Fatalf("Apply to a paused process: %v after %v", errs, time.Since(began))
	}
	must(t, syscall.Kill(pid, syscall.SIGCONT))
	netlab.WaitFor(t, "the process, answering again, holding the second route", 10*time.Second, func() bool {
		return w.States()["tor"].Routes == 2
	})
	if w.child() != pid || w.restarts("stuck") != 0 {
		t.Fatalf("the paused process was replaced (%d, was %d)", w.child(), pid)
	}
}

// TestMemoryLimit: a process above its memory limit is killed, and its sessions read down.
func TestMemoryLimit(t *testing.T) {
	w := supervised(t)
	w.timing = timing{100 * time.Millisecond, pingWait}
	w.MemoryLimit = 1 << 20 // below any Go process
	if errs := w.Apply(context.Background(), onePeer()); len(errs) > 0 {
		t.Fatal(errs)
	}
	netlab.WaitFor(t, "the process killed above its memory limit", 10*time.Second, func() bool {
		return w.restarts("memory") > 0 && strings.Contains(w.States()["tor"].Message, "above the limit of 1 MiB")
	})
}

// TestNoPeerNoProcess: a plan with no peer starts nothing, and Close then has nothing to end.
func TestNoPeerNoProcess(t *testing.T) {
	w := supervised(t)
	if errs := w.Apply(context.Background(), plan.BGP{}); len(errs) > 0 || w.child() != 0 {
		t.Fatalf("errors %v, process %d", errs, w.child())
	}
}

// TestCloseEndsTheProcess: Close closes the sessions through the process, which then exits and
// is not started again.
func TestCloseEndsTheProcess(t *testing.T) {
	w := supervised(t)
	if errs := w.Apply(context.Background(), onePeer()); len(errs) > 0 {
		t.Fatal(errs)
	}
	p := w.running.Load()
	w.Close()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the process still runs after Close")
	}
	if errs := w.Apply(context.Background(), onePeer()); len(errs) != 1 || w.child() != 0 {
		t.Fatalf("after Close: errors %v, process %d", errs, w.child())
	}
}

// TestLeaveEndsTheProcess: Leave ends the sessions through the process for a planned restart,
// naming those left for graceful restart, and the process exits and is not started again.
func TestLeaveEndsTheProcess(t *testing.T) {
	w := supervised(t)
	d := onePeer()
	tor := d.Peers["tor"]
	tor.GracefulRestart, tor.GracefulRestartTime = true, 30*time.Second
	d.Peers["tor"] = tor
	other := tor
	other.Name, other.GracefulRestart = "plain", false
	d.Peers["plain"], d.Routes["plain"] = other, d.Routes["tor"]
	if errs := w.Apply(context.Background(), d); len(errs) > 0 {
		t.Fatal(errs)
	}
	p := w.running.Load()
	if kept := w.Leave(); !slices.Equal(kept, []string{"tor"}) {
		t.Errorf("left for graceful restart: %v, want [tor] (plain has none)", kept)
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the process still runs after Leave")
	}
	if errs := w.Apply(context.Background(), onePeer()); len(errs) != 1 || w.child() != 0 {
		t.Fatalf("after Leave: errors %v, process %d", errs, w.child())
	}
}

func TestRestartDelay(t *testing.T) {
	for _, c := range []struct{ prev, lived, want time.Duration }{
		{0, time.Hour, 0},                             // a crash after a long run: at once
		{0, time.Second, firstBackoff},                // a second crash soon after
		{firstBackoff, time.Second, 2 * firstBackoff}, // doubling
		{maxBackoff, time.Second, maxBackoff},         // up to the most
		{maxBackoff, StableRun, 0},                    // a stable run forgets the failures
	} {
		if got := restartDelay(c.prev, c.lived); got != c.want {
			t.Errorf("restartDelay(%v, %v) = %v, want %v", c.prev, c.lived, got, c.want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
