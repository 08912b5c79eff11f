package controller

import (
	"context"
	"hash/fnv"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/portico-lb/portico/controller/decide"
	"github.com/portico-lb/portico/internal/events"
)

// statusWriter writes Service status off the reconcile path: decisions stay in their
// reconcilers' workers, in queue order, while the requests (milliseconds each) go out in
// parallel. Writes for one Service keep their order (one lane per Service), and a write is
// skipped when the same result is already on its way or the cache has not yet seen the last
// one.
//
// Several reconcilers share it, each owning some fields of the Service (the allocation its
// ingress, IPAllocated and annotation; the health reconciler its conditions). Each write is
// computed from a cached copy; when another part's write got there first (a conflict), the
// lane re-applies this part's fields to the current object and writes again, so the parts
// never overwrite each other and never wait for a reconcile to try again; but a part that sets
// addresses is dropped, and its Service decided again, when the stored addresses changed
// (decide.Writes.Rebase). What is decided without I/O (redundant writes, what may be stored,
// the conflict rule) is decide.Writes; this file sends the requests.
type statusWriter struct {
	client client.Client
	reader client.Reader // uncached: the current object after a conflict
	lanes  []chan *writeJob
	// stopped is closed once Start's context ends: submit then drops writes instead of
	// queueing them for lanes that no longer read.
	stopped chan struct{}

	mu     sync.Mutex
	writes *decide.Writes // under mu
	// lull is quiet once no write has been pending for eventLull: events wait for it (the
	// event sender), so they go after a burst of Services, not between its writes.
	lull *events.Lull
}

// writePart is one reconciler's share of a Service's status.
type writePart struct {
	apply func(*corev1.Service)     // sets this part's fields on a copy of the Service
	done  func(*corev1.Service)     // after a successful write (events, metrics); may be nil
	retry chan<- event.GenericEvent // the reconciler's queue: the Service decides again after a failure
}

// writeJob is a write handed to a lane, with the part that made it.
type writeJob struct {
	*decide.Write
	part writePart
}

// writeLanes lanes of laneDepth writes each.
const (
	writeLanes = 8
	laneDepth  = 1024
)

func newStatusWriter(c client.Client, reader client.Reader) *statusWriter {
	w := &statusWriter{client: c, reader: reader, stopped: make(chan struct{}), writes: decide.NewWrites(),
		lull: events.NewLull(eventLull)}
	for range writeLanes {
		w.lanes = append(w.lanes, make(chan *writeJob, laneDepth))
	}
	return w
}

// NeedLeaderElection: only the leader writes. The manager starts the lanes once this replica
// is elected, with the reconcilers, and cancels their context when it stops leading.
func (w *statusWriter) NeedLeaderElection() bool { return true }

// Start runs the lanes until ctx ends: when the lease is lost (controller-runtime then stops
// the manager and the process exits) or the process stops. A lane checks ctx before every
// request, so an old leader never sends a write once it knows it lost the lease, even if it
// lingers; what is still queued is dropped, and the next leader decides again from what is
// stored. A write already sent is let finish: on a clean stop the lease is released only after
// it, so it cannot land behind the next leader's back. Start returns once every goroutine it
// started (the lanes, and retries waiting out a backoff) has ended. A writer starts once.
func (w *statusWriter) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, lane := range w.lanes {
		wg.Go(func() { w.run(ctx, lane, &wg) })
	}
	<-ctx.Done()
	close(w.stopped)
	wg.Wait()
	return nil
}

// submit hands over a write unless it is redundant (decide.Writes.Submit). cached is the object
// the decision was made from; p.apply makes it what it should become.
func (w *statusWriter) submit(key string, cached *corev1.Service, p writePart) {
	write := decide.NewWrite(key, cached, p.apply)
	w.mu.Lock()
	write = w.writes.Submit(write)
	if write == nil {
		w.mu.Unlock()
		return
	}
	job := &writeJob{Write: write, part: p}
	w.lull.Hold()
	w.mu.Unlock()
	h := fnv.New32a()
	h.Write([]byte(key))
	select {
	case w.lanes[h.Sum32()%writeLanes] <- job:
	case <-w.stopped: // nobody sends it; the next leader decides again from what is stored
		w.mu.Lock()
		w.done(job)
		w.mu.Unlock()
	}
}

// done forgets a write handed over: it is no longer on its way. Call with mu held.
func (w *statusWriter) done(job *writeJob) {
	w.lull.Release()
	w.writes.Done(job.Write)
}

// quiet returns a channel that is closed once no status write has been pending for eventLull.
func (w *statusWriter) quiet() <-chan struct{} { return w.lull.Quiet() }

// eventLull is how long the writer must have had nothing pending before events go out. In a
// burst the Services arrive milliseconds apart and the writer is idle between them; events sent
// in those gaps cost the apiserver as much as the creations and writes of the burst itself
// (make bench, 1000 Services: its CPU for the burst rose by half). Half a second without a
// write means the burst is over; a lone Service's event follows its address by that much.
const eventLull = 500 * time.Millisecond

// mayList returns the addresses our writes may have put in the Service's stored status that
// cached does not show (decide.Writes.MayList).
func (w *statusWriter) mayList(key string, cached *corev1.Service) []netip.Addr {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes.MayList(key, cached)
}

// run is one lane; retries go to wg, so that Start waits for them too.
func (w *statusWriter) run(leading context.Context, lane chan *writeJob, wg *sync.WaitGroup) {
	ctx := context.WithoutCancel(leading) // see Start: a request once sent is let finish
	for {
		var job *writeJob
		select {
		case <-leading.Done():
			return
		case job = <-lane:
		}
		if leading.Err() != nil {
			return
		}
		base := job.Want.ResourceVersion
		sent := job.Want.DeepCopy()
		// On kube-apiserver 1.37 a status update also stores metadata annotations: one request.
		err := w.client.Status().Update(ctx, sent)
		if apierrors.IsConflict(err) {
			sent, base, err = w.rebase(leading, job)
		}
		// sent == nil: nothing was sent (another write already put these fields there, and
		// told of it); base is then empty too.
		w.mu.Lock()
		w.done(job)
		backoff := w.writes.Finished(job.Write, base, err)
		w.mu.Unlock()
		if err != nil {
			logf.Log.WithName("status-writer").V(1).Info("status write failed; retrying", "service", job.Key, "error", err.Error(), "after", backoff)
			wg.Go(func() { retryAfter(leading, backoff, job) })
			continue
		}
		if sent != nil && job.part.done != nil {
			job.part.done(sent)
		}
	}
}

// retryAfter asks, after the backoff, for the job's Service to be decided again, unless the
// writer stops first: a stopped reconciler no longer reads its queue, and a full one must not
// keep this goroutine forever.
func retryAfter(leading context.Context, backoff time.Duration, job *writeJob) {
	wait := time.NewTimer(backoff)
	defer wait.Stop()
	select {
	case <-leading.Done():
		return
	case <-wait.C:
	}
	svc := &corev1.Service{}
	svc.Namespace, svc.Name = job.Want.Namespace, job.Want.Name
	select {
	case job.part.retry <- event.GenericEvent{Object: svc}:
	case <-leading.Done():
	}
}

// rebase sends, after another write made the job's copy stale, what decide.Writes.Rebase makes
// of it on the Service as the apiserver has it now (unless the fields are already right, or
// the job must be decided again). It returns what it sent (nil: nothing) and the
// resourceVersion that replaced. A conflict may be the next leader's write: an old leader that
// knows it lost the lease does not write over it.
func (w *statusWriter) rebase(leading context.Context, job *writeJob) (sent *corev1.Service, base string, err error) {
	ctx := context.WithoutCancel(leading)
	var cur corev1.Service
	if err := w.reader.Get(ctx, client.ObjectKeyFromObject(job.Want), &cur); err != nil {
		return nil, "", err
	}
	sent, err = w.writes.Rebase(job.Write, &cur)
	if sent == nil || err != nil {
		return nil, "", err
	}
	if err := leading.Err(); err != nil {
		return nil, "", err
	}
	return sent, cur.ResourceVersion, w.client.Status().Update(ctx, sent)
}

// forget drops what is remembered about a deleted Service.
func (w *statusWriter) forget(key string) {
	w.mu.Lock()
	w.writes.Forget(key)
	w.mu.Unlock()
}
