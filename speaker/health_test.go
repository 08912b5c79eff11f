package speaker

import (
	"testing"
	"time"
)

// TestHealth: not ready until the main loop runs, alive while starting and while the loop
// turns, not alive once it has stalled.
func TestHealth(t *testing.T) {
	var s Speaker
	if err := s.Ready(nil); err == nil {
		t.Error("ready before the main loop started")
	}
	if err := s.Alive(nil); err != nil {
		t.Errorf("not alive while starting: %v", err)
	}
	s.turned()
	if err := s.Ready(nil); err != nil {
		t.Errorf("not ready with the main loop running: %v", err)
	}
	if err := s.Alive(nil); err != nil {
		t.Errorf("not alive with the main loop turning: %v", err)
	}
	s.loopAt.Store(time.Now().Add(-LoopStall - time.Second).UnixNano())
	if err := s.Alive(nil); err == nil {
		t.Errorf("alive with the main loop stalled for over %s", LoopStall)
	}
}
