package controller

import (
	"context"
	"sync"
	"time"
)

// writeLanes lanes of laneDepth requests each.
const (
	writeLanes = 8
	laneDepth  = 1024
)

// goLanes is the LaneScheduler of a running controller: a goroutine per lane, started with
// the other leader-only runnables.
type goLanes struct {
	lanes []chan func(context.Context)
	// stopped is closed once Start's context ends: Send then refuses requests instead of
	// queueing them for lanes that no longer read.
	stopped chan struct{}
	wg      sync.WaitGroup // the lanes and the retries waiting out a backoff
	leading context.Context
	started chan struct{} // closed once leading is set
}

func newGoLanes() *goLanes {
	l := &goLanes{stopped: make(chan struct{}), started: make(chan struct{})}
	for range writeLanes {
		l.lanes = append(l.lanes, make(chan func(context.Context), laneDepth))
	}
	return l
}

// NeedLeaderElection: only the leader writes. The manager starts the lanes once this replica
// is elected, with the reconcilers, and cancels their context when it stops leading.
func (l *goLanes) NeedLeaderElection() bool { return true }

// Start runs the lanes until ctx ends: when the lease is lost or the process stops. What is
// still queued is dropped, and the next leader decides again from what is stored. A request
// already sent is let finish (statusWriter.send): on a clean stop the lease is released only
// after it, so it cannot land behind the next leader's back. Start returns once every
// goroutine it started (the lanes, and retries waiting out a backoff) has ended. Lanes start
// once.
func (l *goLanes) Start(ctx context.Context) error {
	l.leading = ctx
	close(l.started)
	for _, lane := range l.lanes {
		l.wg.Go(func() { l.run(ctx, lane) })
	}
	<-ctx.Done()
	close(l.stopped)
	l.wg.Wait()
	return nil
}

func (l *goLanes) Send(i int, send func(context.Context)) bool {
	select {
	case l.lanes[i] <- send:
		return true
	case <-l.stopped:
		return false
	}
}

func (l *goLanes) After(d time.Duration, fn func(context.Context)) {
	<-l.started // After is called from a lane: started
	leading := l.leading
	l.wg.Go(func() {
		wait := time.NewTimer(d)
		defer wait.Stop()
		select {
		case <-leading.Done():
		case <-wait.C:
			fn(leading)
		}
	})
}

// run is one lane.
func (l *goLanes) run(leading context.Context, lane chan func(context.Context)) {
	for {
		select {
		case <-leading.Done():
			return
		case send := <-lane:
			send(leading)
		}
	}
}
