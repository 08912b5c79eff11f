package events

import (
	"sync"
	"time"
)

// Lull is a Quiet signal for work that comes in bursts: its channel is closed once nothing is
// held (Hold, Release: requests under way) and Stir has not been called for a while (the
// speaker's reactions to changes, which have no queue to look at).
type Lull struct {
	after time.Duration
	mu    sync.Mutex
	last  time.Time     // the latest Stir, Hold or Release
	held  int           // Holds not yet Released
	quiet chan struct{} // closed while quiet
	timer *time.Timer   // counting down to the lull; nil while quiet or held
}

// NewLull returns a Lull that is quiet until stirred or held, and again once nothing is held
// and nothing stirred it for after.
func NewLull(after time.Duration) *Lull {
	l := &Lull{after: after, quiet: make(chan struct{})}
	close(l.quiet)
	return l
}

// Stir says work is under way; it is cheap enough to call on every change.
func (l *Lull) Stir() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stir()
}

// Hold says work has started that Release ends: no lull begins before.
func (l *Lull) Hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held++
	l.stir()
}

// Release ends a Hold; the lull begins after once nothing is held or stirred.
func (l *Lull) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held--
	l.stir()
}

func (l *Lull) stir() {
	l.last = time.Now()
	select {
	case <-l.quiet: // quiet until now: a new channel for the next lull
		l.quiet = make(chan struct{})
	default:
	}
	if l.timer == nil && l.held == 0 {
		l.timer = time.AfterFunc(l.after, l.check)
	}
}

// check closes the channel once nothing is held and the latest stir is old enough, or looks
// again when it will be (a Release starts the count again).
func (l *Lull) check() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held > 0 {
		l.timer = nil
		return
	}
	if left := l.after - time.Since(l.last); left > 0 {
		l.timer.Reset(left)
		return
	}
	close(l.quiet)
	l.timer = nil
}

// Quiet returns a channel that is closed while nothing is held and no stir came for the lull's
// length (Options.Quiet).
func (l *Lull) Quiet() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.quiet
}
