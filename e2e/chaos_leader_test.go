//go:build chaos

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/controlplane"
)

// TestChaosLeaderKills: the leader is SIGKILLed in the middle of its work, again and again
// (PORTICO_CHAOS_LEADER_KILLS times), while Services move between two full pools and are
// deleted and created again, so every freed address is given to a waiting Service at once:
// the old leader's last status writes race the new leader's rebuild. A watch over the whole
// run fails on any moment two Services list one address, and bystanders (given addresses
// first, never touched) must keep theirs throughout.
func TestChaosLeaderKills(t *testing.T) {
	kills := envSize(t, "PORTICO_CHAOS_LEADER_KILLS", 30, 1)
	s := startLeaderStorm(t, "leader")
	rng := rand.New(rand.NewPCG(7, 7))
	// Each round waits for a leader to be busy (some reconciles into its term), then kills it.
	for range kills {
		leader := s.reps.busyLeader(t, 10+rng.IntN(40))
		s.reps.kill(leader)
		s.reps.keep(2)
	}
	events, twice, moved := s.end(t)
	s.reps.mu.Lock()
	defer s.reps.mu.Unlock()
	report(t, "%d leaders SIGKILLed mid-burst (%d replicas started, %d exited on their own); %d pool moves, %d delete+create", s.reps.killed, s.reps.started, s.reps.exited, s.moves.Load(), s.recreates.Load())
	report(t, "after the storm: %s", s.counts)
	report(t, "moments with an address held twice, in %d Service events watched: %d; bystander addresses moved: %d of %d", events, twice, moved, leaderBystanders)
}

// TestChaosLeaderPauses: the leader is frozen (SIGSTOP, as a GC stall, a VM freeze or a
// partition would) right after a burst of moves, so writes of its are queued or on their way;
// it stays frozen until another replica has taken the lease and decided some Services, and is
// then woken (SIGCONT), PORTICO_CHAOS_LEADER_PAUSES times, under the churn of
// TestChaosLeaderKills. A woken leader has not noticed yet that it lost the lease: whatever it
// sends now was decided from a state the new leader has since changed. The duplicate watch
// fails on any moment two Services list one address, and bystanders must keep theirs.
func TestChaosLeaderPauses(t *testing.T) {
	pauses := envSize(t, "PORTICO_CHAOS_LEADER_PAUSES", 20, 1)
	s := startLeaderStorm(t, "pause")
	rng := rand.New(rand.NewPCG(11, 11))
	woke, exited := 0, 0
	for range pauses {
		leader := s.reps.busyLeader(t, 10+rng.IntN(40))
		s.burst(t, rng)
		s.reps.pause(leader)
		// Frozen past its lease: another replica takes it and decides some Services.
		next := s.reps.busyLeader(t, 5+rng.IntN(20))
		s.reps.resume(leader)
		woke++
		t.Logf("%s: woke the paused leader (pid %d) after pid %d took over", time.Now().Format("15:04:05.000"), leader.cmd.Process.Pid, next.cmd.Process.Pid)
		// It finds it lost the lease and exits; keep starts another in its place.
		select {
		case err := <-leader.done:
			leader.done <- err
			exited++
		case <-time.After(time.Minute):
			t.Errorf("the woken leader (pid %d) did not exit within a minute of losing its lease", leader.cmd.Process.Pid)
		}
		s.reps.keep(2)
	}
	events, twice, moved := s.end(t)
	s.reps.mu.Lock()
	defer s.reps.mu.Unlock()
	report(t, "%d leaders paused past their lease right after a burst and woken after another took over (%d exited on waking; %d replicas started); %d pool moves, %d delete+create", woke, exited, s.reps.started, s.moves.Load(), s.recreates.Load())
	report(t, "after the storm: %s", s.counts)
	report(t, "moments with an address held twice, in %d Service events watched: %d; bystander addresses moved: %d of %d", events, twice, moved, leaderBystanders)
}

// 8 bystanders and 40 churned Services for 32 + 16 addresses: some always wait.
const leaderBystanders, leaderChurned = 8, 40

// leaderStorm is the leader tests' world: two replicas with a short lease (2 s, renew
// deadline 1.5 s, retry 0.25 s), bystanders that keep their addresses, and four workers that
// move the churned Services between the two pools and delete and create them again.
type leaderStorm struct {
	cp         *controlplane.ControlPlane
	history    *ipHistory
	duplicates *duplicateWatch
	reps       *replicas
	extra      string // the pool a moved Service asks for

	stop             chan struct{}
	workers          sync.WaitGroup
	moves, recreates atomic.Int64
	counts           invariantCounts // after the storm
}

func startLeaderStorm(t *testing.T, prefix string) *leaderStorm {
	cp, history, duplicates := startChaos(t, prefix, "198.18.32.0/27", "198.18.33.0/28")
	s := &leaderStorm{cp: cp, history: history, duplicates: duplicates, extra: prefix + "-extra", stop: make(chan struct{})}
	s.reps = &replicas{t: t, start: func(name string) *controllerProcess {
		return startController(t, cp, logFile(t, name), "--leader-elect", "--leader-election-namespace", "default",
			"--leader-elect-lease-duration", "2s", "--leader-elect-renew-deadline", "1500ms", "--leader-elect-retry-period", "250ms")
	}}
	s.reps.keep(2)
	for i := range leaderBystanders {
		createChaosService(t, cp, fmt.Sprintf("bystander-%d", i))
	}
	waitInvariants(t, cp.Client, time.Minute)
	for w := range 4 {
		s.workers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for {
				select {
				case <-s.stop:
					return
				default:
				}
				name := fmt.Sprintf("svc-%02d", w+4*rng.IntN(leaderChurned/4)) // each worker its own Services
				if rng.IntN(3) == 0 {
					s.recreate(t, name)
					continue
				}
				s.move(t, name)
			}
		})
	}
	return s
}

// move toggles a churned Service between the two pools (creating it if it is gone).
func (s *leaderStorm) move(t testing.TB, name string) {
	retrying(t, "move "+name, func(ctx context.Context) error {
		var svc corev1.Service
		if err := s.cp.Client.Get(ctx, client.ObjectKey{Namespace: chaosNS, Name: name}, &svc); apierrors.IsNotFound(err) {
			createChaosService(t, s.cp, name)
			return nil
		} else if err != nil {
			return err
		}
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		if svc.Annotations[porticov1.AnnotationAddressPool] == "" {
			svc.Annotations[porticov1.AnnotationAddressPool] = s.extra
		} else {
			delete(svc.Annotations, porticov1.AnnotationAddressPool)
		}
		return s.cp.Client.Update(ctx, &svc)
	})
	s.moves.Add(1)
}

func (s *leaderStorm) recreate(t testing.TB, name string) {
	retrying(t, "delete "+name, func(ctx context.Context) error {
		return client.IgnoreNotFound(s.cp.Client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: chaosNS, Name: name}}))
	})
	createChaosService(t, s.cp, name)
	s.recreates.Add(1)
}

// burst moves a dozen churned Services at once, so the leader has writes queued and on their
// way when it is paused right after.
func (s *leaderStorm) burst(t testing.TB, rng *rand.Rand) {
	var wg sync.WaitGroup
	for _, i := range rng.Perm(leaderChurned)[:12] {
		wg.Go(func() { s.move(t, fmt.Sprintf("svc-%02d", i)) })
	}
	wg.Wait()
}

// end stops the workers and checks the world: the invariants, every moment the duplicate
// watch saw, and the bystanders' addresses. It returns the events watched, the moments with
// an address held twice, and the bystanders whose address changed.
func (s *leaderStorm) end(t testing.TB) (events, twice, moved int) {
	t.Helper()
	close(s.stop)
	s.workers.Wait()
	s.reps.keep(2)
	s.counts = waitInvariants(t, s.cp.Client, 2*time.Minute)
	events, twice = s.duplicates.check(t)
	s.history.mu.Lock()
	defer s.history.mu.Unlock()
	for name, changes := range s.history.changes {
		if strings.HasPrefix(name, "bystander-") {
			moved++
			t.Errorf("%s was never edited, yet its address changed: %s", name, strings.Join(changes, "; "))
		}
	}
	return events, twice, moved
}

// busyLeader waits for a running replica that is not paused and holds the lease to have
// reconciled at least n Services in its term (a follower reconciles nothing), so a kill or a
// pause lands in its work.
func (r *replicas) busyLeader(t testing.TB, n int) *controllerProcess {
	t.Helper()
	var leader *controllerProcess
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		r.keep(2) // one may have lost its lease on its own
		r.mu.Lock()
		var running []*controllerProcess
		for _, p := range r.running {
			if !r.paused[p] {
				running = append(running, p)
			}
		}
		r.mu.Unlock()
		for _, p := range running {
			scrapeCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			m, err := p.scrape(scrapeCtx)
			cancel()
			if err != nil || sum(m, "leader_election_master_status", nil) != 1 {
				continue
			}
			leader = p
			return sum(m, "controller_runtime_reconcile_total", map[string]string{"controller": "service"}) >= float64(n), nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no replica led and reconciled %d Services within 2 minutes", n)
	}
	return leader
}

// pause freezes a replica (SIGSTOP): it keeps its place among the running, and busyLeader
// passes it by.
func (r *replicas) pause(p *controllerProcess) {
	r.mu.Lock()
	if r.paused == nil {
		r.paused = map[*controllerProcess]bool{}
	}
	r.paused[p] = true
	r.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		r.t.Errorf("SIGSTOP pid %d: %v", p.cmd.Process.Pid, err)
	}
	r.t.Logf("%s: paused the leader (pid %d)", time.Now().Format("15:04:05.000"), p.cmd.Process.Pid)
}

// resume wakes a paused replica (SIGCONT).
func (r *replicas) resume(p *controllerProcess) {
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		r.t.Errorf("SIGCONT pid %d: %v", p.cmd.Process.Pid, err)
	}
	r.mu.Lock()
	delete(r.paused, p)
	r.mu.Unlock()
}
