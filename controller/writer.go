package controller

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	status StatusUpdater
	reader client.Reader // uncached: the current object after a conflict
	lanes  LaneScheduler

	mu     sync.Mutex
	writes *decide.Writes // under mu
	// lull is quiet once no Service write has been pending for eventLull: events wait for it
	// (tell.go), so they go after a burst of Services, not between its writes. nil: no events
	// wait (the simulator's).
	lull *events.Lull
}

// writePart is one reconciler's share of an object's status.
type writePart struct {
	apply func(*corev1.Service) // a Service's: sets this part's fields on a copy of it
	done  func(client.Object)   // after a successful write (events, metrics); may be nil
	retry Queue                 // the reconciler's: the object is decided again after a failure
}

// writeJob is a write handed to a lane, with the part that made it: a Service's (Write, whose
// bookkeeping is decide.Writes') or another object's whole status (object).
type writeJob struct {
	*decide.Write
	object client.Object
	key    string
	part   writePart
}

func newStatusWriter(p Ports) *statusWriter {
	return &statusWriter{status: p.Status, reader: p.Live, lanes: p.Lanes, writes: decide.NewWrites()}
}

// submit hands over a Service's write unless it is redundant (decide.Writes.Submit). cached is
// the object the decision was made from; p.apply makes it what it should become.
func (w *statusWriter) submit(key string, cached *corev1.Service, p writePart) {
	write := decide.NewWrite(key, cached, p.apply)
	w.mu.Lock()
	write = w.writes.Submit(write)
	if write == nil {
		w.mu.Unlock()
		return
	}
	job := &writeJob{Write: write, key: key, part: p}
	if w.lull != nil {
		w.lull.Hold()
	}
	w.mu.Unlock()
	w.enqueue(job)
}

// submitStatus hands over the status write of an object other than a Service: want is the
// whole object its reconciler decided (which asks only when the status changes), from a cached
// copy. Any failure, a conflict too, has the reconciler decide again after a backoff.
func (w *statusWriter) submitStatus(want client.Object, p writePart) {
	w.enqueue(&writeJob{object: want, key: objectKey(want), part: p})
}

// objectKey names an object other than a Service among the writer's jobs.
func objectKey(obj client.Object) string {
	return fmt.Sprintf("%T %s", obj, client.ObjectKeyFromObject(obj))
}

// enqueue gives the job to its lane (one per object, so that its writes keep their order), or
// drops it once the writer stopped: the next leader decides again from what is stored.
func (w *statusWriter) enqueue(job *writeJob) {
	if !w.lanes.Send(laneOf(job.key), func(leading context.Context) { w.send(leading, job) }) {
		w.mu.Lock()
		w.done(job)
		w.mu.Unlock()
	}
}

// laneOf is the lane an object's writes go out in: Services are keyed namespace/name, other
// objects by their type and key (submitStatus).
func laneOf(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % writeLanes)
}

// done forgets a write handed over: it is no longer on its way. Call with mu held.
func (w *statusWriter) done(job *writeJob) {
	if job.Write != nil && w.lull != nil {
		w.lull.Release()
	}
	if job.Write != nil {
		w.writes.Done(job.Write)
	}
}

// mayList returns the addresses our writes may have put in the Service's stored status that
// cached does not show (decide.Writes.MayList).
func (w *statusWriter) mayList(key string, cached *corev1.Service) []netip.Addr {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes.MayList(key, cached)
}

// send sends one write from its lane: a lane checks leading before every request, so an old
// leader never sends a write once it knows it lost the lease, even if it lingers (LaneScheduler).
// After a failure the object is decided again, after a backoff.
func (w *statusWriter) send(leading context.Context, job *writeJob) {
	if leading.Err() != nil {
		w.mu.Lock()
		w.done(job)
		w.mu.Unlock()
		return
	}
	var sent client.Object
	var base string
	var err error
	if job.Write == nil {
		sent = job.object.DeepCopyObject().(client.Object)
		err = w.status.Update(context.WithoutCancel(leading), sent) // a request once sent is let finish
	} else {
		sent, base, err = w.sendService(leading, job)
	}
	var backoff time.Duration
	w.mu.Lock()
	w.done(job)
	if job.Write != nil {
		backoff = w.writes.Finished(job.Write, base, err)
	} else {
		backoff = w.writes.Backoff(job.key, err)
	}
	w.mu.Unlock()
	if err != nil {
		logf.Log.WithName("status-writer").V(1).Info("status write failed; retrying", "object", job.key, "error", err.Error(), "after", backoff)
		w.lanes.After(backoff, func(leading context.Context) { retry(leading, job) })
		return
	}
	if sent != nil && job.part.done != nil {
		job.part.done(sent)
	}
}

// sendService sends a Service's write, rebased after a conflict. sent is nil when nothing was
// sent (another write already put these fields there, and told of it); base is then empty too.
func (w *statusWriter) sendService(leading context.Context, job *writeJob) (sent client.Object, base string, err error) {
	base = job.Want.ResourceVersion
	svc := job.Want.DeepCopy()
	// On kube-apiserver 1.37 a status update also stores metadata annotations: one request.
	if err = w.status.Update(context.WithoutCancel(leading), svc); !apierrors.IsConflict(err) {
		return svc, base, err
	}
	rebased, base, err := w.rebase(leading, job)
	if rebased == nil {
		return nil, base, err
	}
	return rebased, base, err
}

// retry asks for the job's object to be decided again, unless the writer stops first: a
// stopped reconciler no longer reads its queue, and a full one must not keep the lane's
// retry forever.
func retry(leading context.Context, job *writeJob) {
	var obj client.Object = job.object
	if job.Write != nil {
		obj = job.Want
	}
	job.part.retry.Add(leading, client.ObjectKeyFromObject(obj))
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
	return sent, cur.ResourceVersion, w.status.Update(ctx, sent)
}

// forget drops what is remembered about a deleted Service.
func (w *statusWriter) forget(key string) {
	w.mu.Lock()
	w.writes.Forget(key)
	w.mu.Unlock()
}
