package bgpproc

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
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
	if how := os.Getenv(childEnv); how != "" {
		// "1": the speaker's child, on file descriptor 3; else the path of the speaker's
		// socket, as the BGP container connects.
		var conn net.Conn
		var err error
		if how == "1" {
			conn, err = net.FileConn(os.NewFile(3, "speaker"))
		} else {
			conn, err = Dial(context.Background(), how)
		}
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

// bgpContainer makes w wait for its BGP processes on a socket, and starts them as the kubelet
// starts the BGP container: one, then another each time the last one has exited, until the
// test ends.
func bgpContainer(t *testing.T, w *watched) {
	w.Socket = filepath.Join(t.TempDir(), "bgp.sock")
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+w.Socket)
			if err := cmd.Start(); err != nil {
				t.Error(err)
				return
			}
			exited := make(chan struct{})
			go func() { _ = cmd.Wait(); close(exited) }()
			select {
			case <-stop:
				_ = cmd.Process.Kill()
				<-exited
				return
			case <-exited:
			}
		}
	}()
}

func (w *watched) restarts(reason string) float64 {
	var m dto.Metric
	_ = w.Metrics.restarts.WithLabelValues(reason).Write(&m)
	return m.GetCounter().GetValue()
}

// child is the running BGP process's PID, once it has its plan.
func (w *watched) child() int {
	if p := w.running.Load(); p != nil {
		return p.pid()
	}
	return 0
}

// TestRestartsAndHandsThePlanAgain: the process gets the plan, serves its metrics, and after it
// crashes (SIGSEGV) or is frozen (SIGSTOP: no answer to pings), a new one gets the same plan,
// while the sessions read down in between.
func TestRestartsAndHandsThePlanAgain(t *testing.T) {
	w := supervised(t)
	// A stuck process is one silent for 2 s: a race-built child on a loaded machine (make test
	// saw a load average of 60) may take over 250 ms to answer a ping it is well.
	w.timing = timing{100 * time.Millisecond, 2 * time.Second}
	var mu sync.Mutex
	var down int
	w.SetOnChange(func(_, after plan.SessionState) {
		mu.Lock()
		defer mu.Unlock()
		if after.Message != "" {
			down++
		}
	})
	if errs := w.Apply(context.Background(), onePeer()); len(errs) > 0 {
		t.Fatal(errs)
	}
	if st := w.States()["tor"]; st.Routes != 1 || st.Message != "" {
		t.Fatalf("after the first plan: %+v", st)
	}
	netlab.WaitFor(t, "the process's metrics with the route", 10*time.Second, func() bool {
		families, err := w.Gather() // nothing while the process is slow to answer
		i := slices.IndexFunc(families, func(f *dto.MetricFamily) bool { return f.GetName() == "portico_bgp_prefixes_advertised" })
		return err == nil && i >= 0 && families[i].GetMetric()[0].GetGauge().GetValue() == 1
	})
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
	closeAndWait(t, w)
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

// TestSocketProcessRestartsAndGetsThePlanAgain: a BGP process that runs on its own (its own
// container) connects to the speaker's socket and gets the plan; after it crashes (SIGSEGV) or
// is frozen (SIGSTOP, found stuck and killed) the next one the container starts connects and
// gets the same plan, and the sessions read down in between. Closing the supervisor ends the
// process it talks to.
func TestSocketProcessRestartsAndGetsThePlanAgain(t *testing.T) {
	w := supervised(t)
	bgpContainer(t, w)
	// A stuck process is one silent for 2 s: a race-built child on a loaded machine (make test
	// saw a load average of 60) may take over 250 ms to answer a ping it is well.
	w.timing = timing{100 * time.Millisecond, 2 * time.Second}
	var mu sync.Mutex
	var down int
	w.SetOnChange(func(_, after plan.SessionState) {
		mu.Lock()
		defer mu.Unlock()
		if after.Message != "" {
			down++
		}
	})
	if errs := w.Apply(context.Background(), onePeer()); len(errs) > 0 {
		t.Fatal(errs)
	}
	if st := w.States()["tor"]; st.Routes != 1 || st.Message != "" {
		t.Fatalf("after the first plan: %+v", st)
	}
	for _, sig := range []syscall.Signal{syscall.SIGSEGV, syscall.SIGSTOP} {
		pid := w.child()
		if pid == 0 {
			t.Fatal("the process's PID is not seen through the socket (same PID namespace here)")
		}
		must(t, syscall.Kill(pid, sig))
		netlab.WaitFor(t, "a new process with the plan after "+sig.String(), 10*time.Second, func() bool {
			st := w.States()["tor"]
			return w.child() != 0 && w.child() != pid && st.Routes == 1 && st.Message == ""
		})
	}
	for _, reason := range []string{"exited", "stuck"} {
		if n := w.restarts(reason); n != 1 {
			t.Errorf("restarts for %s: %v, want 1", reason, n)
		}
	}
	closeAndWait(t, w)
}

// closeAndWait closes w and waits for the process it talked to to be done.
func closeAndWait(t *testing.T, w *watched) {
	t.Helper()
	p := w.running.Load()
	w.Close()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the process still runs after Close")
	}
}

// TestSocketFirstPlanWaitsBoundedly: with no BGP process connecting yet (its container not
// started), the first Apply returns after its wait (applyWait; a second here), and the plan goes to the first
// process that connects.
func TestSocketFirstPlanWaitsBoundedly(t *testing.T) {
	w := supervised(t)
	w.Socket, w.firstWait = filepath.Join(t.TempDir(), "bgp.sock"), time.Second
	if errs := w.Apply(context.Background(), onePeer()); len(errs) != 1 || !errors.Is(errs[0], errNotYet) {
		t.Fatalf("first Apply with nothing connecting: %v, want %v", errs, errNotYet)
	}
	conn, err := Dial(context.Background(), w.Socket)
	must(t, err)
	sessions := &bgp.Sessions{Log: logr.Discard()}
	go func() { _ = Serve(conn, sessions, prometheus.NewRegistry()) }()
	netlab.WaitFor(t, "the late process holding the plan", 10*time.Second, func() bool {
		return sessions.States()["tor"].Routes == 1
	})
}
