package controller

import (
	"context"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Ports are what the controller's shell (its reconcilers, the book's lock, the status writer)
// reads and writes through. Setup fills them from the manager: the informer cache, the
// apiserver, the fenced client's status writes, the wall clock and goroutines. The simulator
// (controller/sim) fills them from its simulated world, so that it runs this shell, not a copy.
type Ports struct {
	Cache  client.Reader // the informer cache
	Live   client.Reader // the apiserver itself: a new leader's rebuild, the object after a conflict
	Stores Stores        // the cluster-wide kinds' informer stores (clusterKinds)
	Status StatusUpdater // every status write, each through the lease fence
	Clock  Clock
	Lanes  LaneScheduler
	Queues Queues // zero: channels the manager's controllers read
}

// Stores are the informer stores of the cluster-wide kinds the health conditions are folded
// from, read without a List's copies (clusterKinds).
type Stores struct {
	Speakers, L2Advertisements, BGPAdvertisements, BGPPeers, Pools, Nodes toolscache.Store
}

// StatusUpdater sends one status update (client.Client's Status().Update): the only way the
// controller writes an object's status, from the status writer's lanes.
type StatusUpdater interface {
	Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error
}

// Clock is the time the shell decides at, and its timers.
type Clock interface {
	Now() time.Time
	// AfterFunc runs f after d, in its own goroutine.
	AfterFunc(d time.Duration, f func())
}

// LaneScheduler runs the status writer's requests: one lane's in the order handed over, the
// lanes in parallel. leading is the leader's context: it ends when this replica stops
// leading (controller-runtime then stops the manager and the process exits).
type LaneScheduler interface {
	// Send runs send on lane i after what the lane was handed before; false when the writer
	// has stopped (send never runs).
	Send(lane int, send func(leading context.Context)) bool
	// After runs fn after d (a retry after a backoff), unless the writer stops first.
	After(d time.Duration, fn func(leading context.Context))
}

// wallClock is the machine's clock.
type wallClock struct{}

func (wallClock) Now() time.Time                      { return time.Now() }
func (wallClock) AfterFunc(d time.Duration, f func()) { time.AfterFunc(d, f) }
