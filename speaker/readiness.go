package speaker

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// health is what the kubelet's probes read of the loop: readiness (/readyz, its BGP sessions)
// and liveness (/healthz).
type health struct {
	loopAt    atomic.Int64 // unix nanos of the main loop's latest turn; 0 until it starts
	startedAt time.Time    // when Start began (RoutesUp)
	planned   atomic.Bool  // the first plan has been applied (RoutesUp)
}

// LoopStall is how long the main loop may go without turning before the liveness probe fails.
// The loop turns at least every half second (the rejoin ticker); one reconcile takes
// milliseconds even with thousands of Services.
const LoopStall = 20 * time.Second

// Ready is the readiness check (/readyz): the informers have synced from the apiserver and the
// first gossip join is over, so the speaker answers for what it owns. A DaemonSet rollout waits
// for it before it replaces the next node's speaker.
func (s *Speaker) Ready(*http.Request) error {
	if s.health.loopAt.Load() == 0 {
		return errors.New("starting: waiting for the first sync from the apiserver and the first gossip join")
	}
	return nil
}

// DefaultRoutesUpWait bounds how long readiness waits for this node's BGP sessions: a router
// that is down must not stop a rolling update for good (its session is reported in the
// Speaker's status and by portico_bgp_session_up meanwhile).
const DefaultRoutesUpWait = 30 * time.Second

// RoutesUp is the readiness check of BGP (/readyz/bgp-sessions): every session that carries
// this node's routes is established, or RoutesUpWait has passed since the speaker started. A
// DaemonSet's rolling update replaces the next node's speaker once this one is ready; without
// the check it did so before this node's sessions were back, and for a moment the routers had
// no route to the Service at all (BENCHMARKS.md, bench-cluster).
func (s *Speaker) RoutesUp(*http.Request) error {
	if !s.health.planned.Load() {
		return errors.New("starting: this node's routes are not planned yet")
	}
	if time.Since(s.health.startedAt) >= s.RoutesUpWait {
		return nil
	}
	var waiting []string
	for name, st := range s.BGP.States() {
		if st.Routes > 0 && !st.Established() {
			waiting = append(waiting, fmt.Sprintf("%s at %s (%s)", name, st.Address, st.State))
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	slices.Sort(waiting)
	return fmt.Errorf("waiting for the BGP sessions that carry this node's routes: %s (ready regardless %s after the start)",
		strings.Join(waiting, ", "), s.RoutesUpWait)
}

// Alive is the liveness check (/healthz): the main loop still turns. It passes while the speaker
// starts (a slow apiserver is not a reason to restart it: readiness says it).
func (s *Speaker) Alive(*http.Request) error {
	at := s.health.loopAt.Load()
	if at == 0 {
		return nil
	}
	if stalled := time.Since(time.Unix(0, at)); stalled > LoopStall {
		return fmt.Errorf("the main loop has not turned for %s", stalled.Round(time.Second))
	}
	return nil
}

// turned records that the main loop is alive.
func (s *Speaker) turned() { s.health.loopAt.Store(time.Now().UnixNano()) }
