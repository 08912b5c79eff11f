//go:build chaos

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// TestChaosLeaderKills: the leader is SIGKILLed in the middle of its work, again and again
// (PORTICO_CHAOS_LEADER_KILLS times), while Services move between two full pools and are
// deleted and created again, so every freed address is given to a waiting Service at once:
// the old leader's last status writes race the new leader's rebuild. A watch over the whole
// run fails on any moment two Services list one address, and bystanders (given addresses
// first, never touched) must keep theirs throughout.
func TestChaosLeaderKills(t *testing.T) {
	kills := envSize(t, "PORTICO_CHAOS_LEADER_KILLS", 30, 1)
	cp, history, duplicates := startChaos(t, "leader", "198.18.32.0/27", "198.18.33.0/28")
	reps := &replicas{t: t, start: func(name string) *controllerProcess {
		return startController(t, cp, logFile(t, name), "--leader-elect", "--leader-election-namespace", "default",
			"--leader-elect-lease-duration", "2s", "--leader-elect-renew-deadline", "1500ms", "--leader-elect-retry-period", "250ms")
	}}
	reps.keep(2)

	// 8 bystanders and 40 churned Services for 32 + 16 addresses: some always wait.
	const bystanders, churned = 8, 40
	create := func(name string) { createChaosService(t, cp, name) }
	for i := range bystanders {
		create(fmt.Sprintf("bystander-%d", i))
	}
	waitInvariants(t, cp.Client, time.Minute)

	stop := make(chan struct{})
	var moves, recreates atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("svc-%02d", w+4*rng.IntN(churned/4)) // each worker its own Services
				if rng.IntN(3) == 0 {
					retrying(t, "delete "+name, func(ctx context.Context) error {
						return client.IgnoreNotFound(cp.Client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: chaosNS, Name: name}}))
					})
					create(name)
					recreates.Add(1)
					continue
				}
				retrying(t, "move "+name, func(ctx context.Context) error {
					var svc corev1.Service
					if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: chaosNS, Name: name}, &svc); apierrors.IsNotFound(err) {
						create(name)
						return nil
					} else if err != nil {
						return err
					}
					if svc.Annotations == nil {
						svc.Annotations = map[string]string{}
					}
					if svc.Annotations[porticov1.AnnotationAddressPool] == "" {
						svc.Annotations[porticov1.AnnotationAddressPool] = "leader-extra"
					} else {
						delete(svc.Annotations, porticov1.AnnotationAddressPool)
					}
					return cp.Client.Update(ctx, &svc)
				})
				moves.Add(1)
			}
		})
	}

	// Each round waits for a leader to be busy (some reconciles into its term), then kills it.
	rng := rand.New(rand.NewPCG(7, 7))
	for range kills {
		leader := reps.busyLeader(t, 10+rng.IntN(40))
		reps.kill(leader)
		reps.keep(2)
	}
	close(stop)
	wg.Wait()
	counts := waitInvariants(t, cp.Client, 2*time.Minute)
	events, twice := duplicates.check(t)

	history.mu.Lock()
	defer history.mu.Unlock()
	moved := 0
	for name, changes := range history.changes {
		if strings.HasPrefix(name, "bystander-") {
			moved++
			t.Errorf("%s was never edited, yet its address changed: %s", name, strings.Join(changes, "; "))
		}
	}
	reps.mu.Lock()
	defer reps.mu.Unlock()
	report(t, "%d leaders SIGKILLed mid-burst (%d replicas started, %d exited on their own); %d pool moves, %d delete+create", reps.killed, reps.started, reps.exited, moves.Load(), recreates.Load())
	report(t, "after the storm: %s", counts)
	report(t, "moments with an address held twice, in %d Service events watched: %d; bystander addresses moved: %d of %d", events, twice, moved, bystanders)
}

// busyLeader waits for the replica that holds the lease to have reconciled at least n
// Services in its term (a follower reconciles nothing), so a kill lands in its work.
func (r *replicas) busyLeader(t testing.TB, n int) *controllerProcess {
	t.Helper()
	var leader *controllerProcess
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		r.keep(2) // one may have lost its lease on its own
		r.mu.Lock()
		running := append([]*controllerProcess(nil), r.running...)
		r.mu.Unlock()
		for _, p := range running {
			m, err := p.scrape(ctx)
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
