package bgpproc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/portico-lb/portico/speaker/plan"
)

// How the speaker watches its BGP process (Supervisor.timing: this package's tests shorten them).
const (
	// pingEvery is how often the process is pinged and its memory read.
	pingEvery = 2 * time.Second
	// pingWait is how long a ping may go unanswered; two in a row unanswered and the process is
	// taken for stuck and killed (one alone may be the speaker's own pause: a frozen node
	// thawed finds its ping's timer long expired). A ping takes the sessions' lock, which GoBGP
	// calls hold while they run.
	pingWait = 5 * time.Second
)

// timing is how often a Supervisor pings and how long it waits for the answer.
type timing struct{ every, wait time.Duration }

const (
	// applyWait bounds one plan's hand-over; the speaker's loop waits that long at most.
	applyWait = 10 * time.Second
	// closeWait bounds the withdrawal at shutdown: with the wait for the exit after it, within
	// the DaemonSet's 5 s termination grace period.
	closeWait = 3 * time.Second
)

// errRestarting is what Apply reports while no BGP process runs; the plan is handed to the
// next one whole.
var errRestarting = errors.New("the BGP process is restarting; it gets this plan when it is back")

// errNotYet is what the first Apply reports when no BGP process took the plan within applyWait.
var errNotYet = errors.New("no BGP process has taken the plan yet (its container may still be starting); it gets it when one does")

// Supervisor runs the BGP side in a child process (Serve at the other end) for the speaker,
// implementing what the speaker needs of it (Apply, Close, States, SetOnChange) and serving the
// process's metrics (Gather).
type Supervisor struct {
	Log logr.Logger
	// Command makes the command that runs the BGP process: the speaker binary again, whose
	// subcommand calls Serve with file descriptor 3.
	Command func() *exec.Cmd
	// Socket, when set, is where the BGP process connects instead: it runs on its own (its own
	// container in the pod, started and restarted by the kubelet, with a memory limit of its
	// own) and the speaker listens here (a unix socket in a volume both containers mount) for
	// it and for each one after it. Command is then not used.
	Socket string
	// MemoryLimit, in bytes: the process is killed (and restarted) when its anonymous resident
	// memory goes above it. 0: no limit.
	MemoryLimit int64
	Metrics     *Metrics

	timing    timing        // zero: pingEvery, pingWait
	firstWait time.Duration // zero: applyWait

	stop     chan struct{} // closed by Close: no more restarts
	firstRun chan struct{} // closed once the first process got its first plan (or failed to start)

	mu        sync.Mutex // held by Apply and Close, and while a new process gets the plan
	desired   plan.BGP   // the latest plan, whole (Changed nil)
	started   bool
	closed    bool
	listener  *net.UnixListener    // on Socket, once made
	running   atomic.Pointer[proc] // nil while none runs
	firstErrs []error
	// suspect: the running process left a ping or a plan unanswered. Plans then wait for it to
	// answer again (it gets the latest whole) or for its successor, so the speaker's loop, which
	// also moves ARP/NDP answers between nodes, waits for a stuck process once at most.
	suspect atomic.Bool

	statesMu sync.Mutex
	states   map[string]plan.SessionState
	onChange func(before, after plan.SessionState) // SetOnChange's
}

// Apply hands d to the BGP process and returns what it reported. The first plan that names a
// peer starts the process; while it restarts, the plan is kept for the next one.
func (s *Supervisor) Apply(ctx context.Context, d plan.BGP) []error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return []error{errors.New("the BGP side is closed")}
	}
	s.desired = d
	s.desired.Changed = nil
	p, first := s.running.Load(), !s.started && len(d.Peers) > 0
	if first {
		s.started = true
		s.stop, s.firstRun = make(chan struct{}), make(chan struct{})
		go s.supervise()
	}
	if p != nil {
		defer s.mu.Unlock()
		if s.suspect.Load() {
			return nil // kept in desired, handed whole when the process answers or is replaced
		}
		a, err := p.call(request{Apply: &d}, applyWait)
		if err != nil {
			if !errors.Is(err, errGone) {
				s.suspect.Store(true)
			}
			return []error{fmt.Errorf("handing the plan to the BGP process: %w", err)}
		}
		return errorsOf(a.Errors)
	}
	started := s.started
	s.mu.Unlock()
	switch {
	case first:
		// A process that connects (Socket) may be late: its container is still starting.
		wait := time.NewTimer(cmp.Or(s.firstWait, applyWait))
		defer wait.Stop()
		select {
		case <-s.firstRun:
		case <-ctx.Done():
		case <-wait.C:
			return []error{errNotYet}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.firstErrs
	case started:
		return []error{errRestarting}
	}
	return nil // no peer yet: no process
}

// Close withdraws every route and closes every session (the process's Close), then ends the
// process; no other starts.
func (s *Supervisor) Close() { s.end(request{Close: true}) }

// Leave closes every session for a planned restart of the speaker (bgp.Sessions.Leave: the
// routers keep the routes of the sessions with graceful restart, stale, until the next
// speaker's sessions refresh them), then ends the process; no other starts. It returns the
// sessions left for graceful restart.
func (s *Supervisor) Leave() (kept []string) { return s.end(request{Leave: true}) }

// end hands the process its last request (Close or Leave) and waits for it to exit.
func (s *Supervisor) end(last request) (kept []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.started {
		s.closed = true
		return nil
	}
	s.closed = true
	close(s.stop)
	if s.listener != nil {
		_ = s.listener.Close() // ends a wait for the next process
	}
	p := s.running.Swap(nil)
	if p == nil {
		return nil
	}
	a, err := p.call(last, closeWait)
	if err != nil {
		s.Log.Error(err, "closing the BGP sessions")
	}
	select {
	case <-p.done:
	case <-time.After(time.Second):
		p.kill("stuck", "killed: it did not exit after closing its sessions")
		<-p.done
	}
	return a.Kept
}

// States lists the sessions' states by peer name, as the process last reported them.
func (s *Supervisor) States() map[string]plan.SessionState {
	s.statesMu.Lock()
	defer s.statesMu.Unlock()
	return maps.Clone(s.states)
}

// supervise starts the process, hands it the plan and watches it, again and again until Close.
// It keeps its thread: the process's parent-death signal is tied to the thread that started it.
func (s *Supervisor) supervise() {
	runtime.LockOSThread()
	var delay time.Duration
	for {
		began := time.Now()
		reason, why := s.runOnce()
		if s.isClosed() {
			return
		}
		delay = restartDelay(delay, time.Since(began))
		s.Metrics.restarts.WithLabelValues(reason).Inc()
		s.Log.Error(why, "the BGP process ended; ARP/NDP answers go on, BGP restarts", "in", delay)
		s.sessionsGone(why)
		t := time.NewTimer(delay)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// runOnce runs one process until it exits, and returns why it did (in a word and in full).
func (s *Supervisor) runOnce() (string, error) {
	p, err := s.start()
	if err == nil {
		go p.readAll(s.received)
		err = s.handPlan(p)
	}
	if err != nil {
		err = fmt.Errorf("starting the BGP process: %w", err)
		s.mu.Lock()
		s.firstErrs = []error{err}
		s.mu.Unlock()
	}
	s.once()
	if err != nil {
		if p != nil {
			p.kill("start", err.Error())
			<-p.done
		}
		return "start", err
	}
	s.Metrics.up.Set(1)
	defer s.Metrics.up.Set(0)
	s.Log.Info("BGP process started", "pid", p.pid(), "socket", s.Socket)
	tick := time.NewTicker(s.pings().every)
	defer tick.Stop()
	missed := 0
	for {
		select {
		case <-p.done:
			s.running.Store(nil)
			<-p.read // its last states are read before its sessions are marked gone
			return p.reason, p.exit
		case <-tick.C:
			if anon := p.anonymous(); s.MemoryLimit > 0 && anon > s.MemoryLimit {
				p.kill("memory", fmt.Sprintf("killed: anonymous resident memory %d MiB above the limit of %d MiB", anon>>20, s.MemoryLimit>>20))
				continue
			}
			_, err := p.call(request{Ping: true}, s.pings().wait)
			switch {
			case err == nil:
				missed = 0
				if s.suspect.Swap(false) {
					s.handAgain(p)
				}
			case errors.Is(err, errGone):
			default:
				s.suspect.Store(true)
				if missed++; missed == 2 {
					p.kill("stuck", fmt.Sprintf("killed: %v, twice in a row (stuck)", err))
				}
			}
		}
	}
}

// handPlan gives a new process the latest plan, whole, and makes it the one Apply talks to.
func (s *Supervisor) handPlan(p *proc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("closed")
	}
	d := s.desired
	a, err := p.call(request{Apply: &d}, applyWait)
	if err != nil {
		return err
	}
	s.running.Store(p)
	s.suspect.Store(false)
	s.firstErrs = errorsOf(a.Errors)
	return nil
}

// handAgain gives a process that answers again after a pause the latest plan, whole: the plans
// Apply kept meanwhile.
func (s *Supervisor) handAgain(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.desired
	a, err := p.call(request{Apply: &d}, applyWait)
	if err != nil {
		s.suspect.Store(true)
		return
	}
	s.Log.Info("the BGP process answers again; it has the latest plan", "problems", a.Errors)
}

// once marks the first start over, for the Apply waiting on it.
func (s *Supervisor) once() {
	select {
	case <-s.firstRun:
	default:
		close(s.firstRun)
	}
}

func (s *Supervisor) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// received takes the states in a message from the process and reports what changed.
func (s *Supervisor) received(a answer) {
	s.setStates(func(map[string]plan.SessionState) map[string]plan.SessionState { return a.States })
}

// sessionsGone marks every session down: they ended with the process.
func (s *Supervisor) sessionsGone(why error) {
	s.setStates(func(old map[string]plan.SessionState) map[string]plan.SessionState {
		now := make(map[string]plan.SessionState, len(old))
		for name, st := range old {
			if st.State != "Idle" {
				st.State, st.Since = "Idle", time.Now()
			}
			st.Message = "the BGP process ended (" + why.Error() + "); it is restarting"
			now[name] = st
		}
		return now
	})
}

// SetOnChange sets the function called (without locks held) when a session changes state or
// message.
func (s *Supervisor) SetOnChange(f func(before, after plan.SessionState)) {
	s.statesMu.Lock()
	defer s.statesMu.Unlock()
	s.onChange = f
}

// setStates replaces the states with what next makes of them and calls onChange for each
// session whose state or message changed.
func (s *Supervisor) setStates(next func(map[string]plan.SessionState) map[string]plan.SessionState) {
	type change struct{ before, after plan.SessionState }
	var changes []change
	s.statesMu.Lock()
	now := next(s.states)
	for name, after := range now {
		before, had := s.states[name]
		if had && (before.State != after.State || before.Message != after.Message) {
			changes = append(changes, change{before, after})
		}
	}
	s.states = now
	onChange := s.onChange
	s.statesMu.Unlock()
	if onChange != nil {
		for _, c := range changes {
			onChange(c.before, c.after)
		}
	}
}

func errorsOf(msgs []string) []error {
	var errs []error
	for _, m := range msgs {
		errs = append(errs, errors.New(m))
	}
	return errs
}

func (s *Supervisor) pings() timing {
	if s.timing == (timing{}) {
		return timing{pingEvery, pingWait}
	}
	return s.timing
}
