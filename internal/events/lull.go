package events

import (
	"sync"
	"time"
)

// Lull is a Quiet signal for work that comes in bursts with no queue to look at (the speaker's
// reactions to changes): its channel is closed once Stir has not been called for a while.
type Lull struct {
	after time.Duration
	mu    sync.Mutex
	last  time.Time     // the latest Stir
	quiet chan struct{} // closed while quiet
	timer *time.Timer   // nil while quiet
}

// NewLull returns a Lull that is quiet until stirred, and again after stirs stop for after.
func NewLull(after time.Duration) *Lull {
	l := &Lull{after: after, quiet: make(chan struct{})}
	close(l.quiet)
	return l
}

// Stir says work is under way; it is cheap enough to call on every change.
func (l *Lull) Stir() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = time.Now()
	if l.timer == nil {
		l.quiet = make(chan struct{})
		l.timer = time.AfterFunc(l.after, l.check)
	}
}

// check closes the channel once the latest Stir is old enough, or looks again when it will be.
func (l *Lull) check() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if left := l.after - time.Since(l.last); left > 0 {
		l.timer.Reset(left)
		return
	}
	close(l.quiet)
	l.timer = nil
}

// Quiet returns a channel that is closed while no Stir came for the lull's length (Options.Quiet).
func (l *Lull) Quiet() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.quiet
}
