//go:build chaos

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// The chaos tests (`make chaos`, build tag chaos) are sized by PORTICO_CHAOS_SERVICES
// (default 3000; CI runs a bounded size). Their reports go to the test log and, when
// PORTICO_CHAOS_OUT names a file, to that file for docs/reliability.md.
func chaosServices(t testing.TB) int {
	return envSize(t, "PORTICO_CHAOS_SERVICES", 3000, 20)
}

var reportMu sync.Mutex

// report logs a line of the chaos report and appends it to $PORTICO_CHAOS_OUT.
func report(t testing.TB, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	out := os.Getenv("PORTICO_CHAOS_OUT")
	if out == "" {
		return
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "- %s: %s\n", t.Name(), line)
}

// retrying runs op until it succeeds: during the storm the apiserver may be down, and a
// write may conflict with the controller's. It gives up (failing the test) after two minutes.
func retrying(t testing.TB, what string, op func(ctx context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		last = op(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Errorf("%s: %v", what, last)
	}
}

// replicas keeps a set of controller processes running and kills them on demand.
type replicas struct {
	t     testing.TB
	start func(name string) *controllerProcess

	mu      sync.Mutex
	running []*controllerProcess
	started int
	killed  int // by us
	exited  int // on their own (lost the lease while the apiserver was down, say)
	paused  map[*controllerProcess]bool
}

// keep starts replicas until n run, counting those that died on their own.
func (r *replicas) keep(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	alive := r.running[:0]
	for _, p := range r.running {
		select {
		case err := <-p.done:
			p.done <- err // stop() may still wait on it
			r.exited++
		default:
			alive = append(alive, p)
		}
	}
	r.running = alive
	for len(r.running) < n {
		r.started++
		r.running = append(r.running, r.start(fmt.Sprintf("controller-%d", r.started)))
	}
}

// killOne SIGKILLs a random running replica.
func (r *replicas) killOne(rng *rand.Rand) {
	r.mu.Lock()
	if len(r.running) == 0 {
		r.mu.Unlock()
		return
	}
	p := r.running[rng.IntN(len(r.running))]
	r.mu.Unlock()
	r.kill(p)
}

// kill SIGKILLs one running replica.
func (r *replicas) kill(p *controllerProcess) {
	r.mu.Lock()
	r.running = slices.DeleteFunc(r.running, func(q *controllerProcess) bool { return q == p })
	r.killed++
	r.mu.Unlock()
	began := time.Now()
	p.stop(syscall.SIGKILL)
	r.t.Logf("%s: SIGKILLed a controller replica (pid %d, reaped in %s)", time.Now().Format("15:04:05.000"), p.cmd.Process.Pid, time.Since(began).Round(time.Millisecond))
}

// storm kills a replica every 2–4 s and keeps two running, until stop is closed.
func (r *replicas) storm(stop <-chan struct{}, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	r.keep(2)
	for {
		select {
		case <-stop:
			r.keep(2)
			return
		case <-time.After(2*time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))):
		}
		r.killOne(rng)
		r.keep(2)
	}
}

func (r *replicas) kills() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.killed
}
