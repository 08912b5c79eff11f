package speaker

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// LoopStall is how long the main loop may go without turning before the liveness probe fails.
// The loop turns at least every half second (the rejoin ticker); one recomputation of the
// plan takes milliseconds even with thousands of Services.
const LoopStall = 20 * time.Second

// Ready is the readiness check (/readyz): the informers have synced from the apiserver and the
// first gossip join is over, so the speaker answers for what it owns. A DaemonSet rollout waits
// for it before it replaces the next node's speaker.
func (s *Speaker) Ready(*http.Request) error {
	if s.loopAt.Load() == 0 {
		return errors.New("starting: waiting for the first sync from the apiserver and the first gossip join")
	}
	return nil
}

// Alive is the liveness check (/healthz): the main loop still turns. It passes while the speaker
// starts (a slow apiserver is not a reason to restart it: readiness says it).
func (s *Speaker) Alive(*http.Request) error {
	at := s.loopAt.Load()
	if at == 0 {
		return nil
	}
	if stalled := time.Since(time.Unix(0, at)); stalled > LoopStall {
		return fmt.Errorf("the main loop has not turned for %s", stalled.Round(time.Second))
	}
	return nil
}

// turned records that the main loop is alive.
func (s *Speaker) turned() { s.loopAt.Store(time.Now().UnixNano()) }
