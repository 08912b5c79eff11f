package controller

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
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
// never overwrite each other and never wait for a reconcile to try again.
type statusWriter struct {
	client client.Client
	reader client.Reader // uncached: the current object after a conflict
	lanes  []chan *writeJob
	// stopped is closed once Start's context ends: submit then drops writes instead of
	// queueing them for lanes that no longer read.
	stopped chan struct{}

	mu       sync.Mutex
	inflight map[string][]*writeJob // writes handed to a lane and not done yet, oldest first
	written  map[string][]written   // our writes the cache may not show yet
	failures map[string]int         // consecutive failures, for backoff
	// lull is quiet once no write has been pending for eventLull: events wait for it (the
	// event sender), so they go after a burst of Services, not between its writes.
	lull *events.Lull
}

// written is a write of ours that landed, or whose fate is unknown (a timeout, a cut
// connection), until the cache holds a copy of the Service newer than the one it replaced.
type written struct {
	base   string       // the resourceVersion the write replaced
	ips    []netip.Addr // the addresses it lists
	landed bool         // false: it may or may not have been stored
}

// writePart is one reconciler's share of a Service's status.
type writePart struct {
	apply func(*corev1.Service)     // sets this part's fields on a copy of the Service
	done  func(*corev1.Service)     // after a successful write (events, metrics); may be nil
	retry chan<- event.GenericEvent // the reconciler's queue: the Service decides again after a failure
}

// addrs returns the addresses the part itself writes. Only those can reach the stored status
// through its write: a part that leaves the ingress alone sends its copy's ingress under its
// copy's resourceVersion, so it lands only where that is stored already.
func (p writePart) addrs() []netip.Addr {
	var probe corev1.Service
	p.apply(&probe)
	return porticov1.IngressAddrs(&probe)
}

type writeJob struct {
	key string
	// want is the whole wanted object, at the resourceVersion it was computed from. It never
	// changes once submitted: submit compares new writes with it while a lane is sending the
	// job, so the lane sends a copy (the answer is decoded into what was sent).
	want *corev1.Service
	ips  []netip.Addr // the addresses the part writes
	from []netip.Addr // the addresses of the copy the decision was made from
	part writePart
}

// writeLanes lanes of laneDepth writes each.
const (
	writeLanes = 8
	laneDepth  = 1024
)

func newStatusWriter(c client.Client, reader client.Reader) *statusWriter {
	w := &statusWriter{client: c, reader: reader, stopped: make(chan struct{}),
		inflight: map[string][]*writeJob{}, written: map[string][]written{}, failures: map[string]int{},
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

// submit hands over a write unless it is redundant. cached is the object the decision was
// made from; p.apply makes it what it should become.
func (w *statusWriter) submit(key string, cached *corev1.Service, p writePart) {
	want := cached.DeepCopy()
	p.apply(want)
	w.mu.Lock()
	for _, wr := range w.unseen(key, cached) {
		if wr.landed {
			w.mu.Unlock()
			return // our write has not reached the cache; its watch event brings us back
		}
	}
	if js := w.inflight[key]; len(js) > 0 && sameWrite(js[len(js)-1].want, want) {
		w.mu.Unlock()
		return
	}
	if sameWrite(cached, want) {
		w.mu.Unlock()
		return
	}
	job := &writeJob{key: key, want: want, ips: p.addrs(), from: porticov1.IngressAddrs(cached), part: p}
	w.inflight[key] = append(w.inflight[key], job)
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
	if js := slices.DeleteFunc(w.inflight[job.key], func(j *writeJob) bool { return j == job }); len(js) > 0 {
		w.inflight[job.key] = js
	} else {
		delete(w.inflight, job.key)
	}
}

// quiet returns a channel that is closed once no status write has been pending for eventLull.
func (w *statusWriter) quiet() <-chan struct{} { return w.lull.Quiet() }

// eventLull is how long the writer must have had nothing pending before events go out. In a
// burst the Services arrive milliseconds apart and the writer is idle between them; events sent
// in those gaps cost the apiserver as much as the creations and writes of the burst itself
// (make bench, 1000 Services: its CPU for the burst rose by half). Half a second without a
// write means the burst is over; a lone Service's event follows its address by that much.
const eventLull = 500 * time.Millisecond

// unseen returns our writes to the Service that cached does not show, and forgets those it
// does. Call with mu held.
func (w *statusWriter) unseen(key string, cached *corev1.Service) []written {
	ws := slices.DeleteFunc(w.written[key], func(wr written) bool { return newer(cached.ResourceVersion, wr.base) })
	if len(ws) == 0 {
		delete(w.written, key)
		return nil
	}
	w.written[key] = ws
	return ws
}

// mayList returns the addresses our writes may have put in the Service's stored status that
// cached does not show: those of writes not done yet, and of writes the cache has not seen.
// What a Service gives up stays held while any of them lists it (see holdLeaving): another
// Service's write could otherwise land first, and both would list the address.
func (w *statusWriter) mayList(key string, cached *corev1.Service) []netip.Addr {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ips []netip.Addr
	for _, j := range w.inflight[key] {
		ips = append(ips, j.ips...)
	}
	for _, wr := range w.unseen(key, cached) {
		ips = append(ips, wr.ips...)
	}
	return ips
}

// newer reports whether resourceVersion a is later than b. Resource versions are comparable
// since Kubernetes 1.35; if either is not, only an equal one counts as not newer.
func newer(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	if err != nil {
		return a != b
	}
	return c > 0
}

// mayHaveLanded reports whether a failed write may still have been stored: the apiserver
// refused it if it answered with an error status, unless that is a timeout; a cut connection
// leaves its fate unknown. A write the lease fence stopped was never sent.
func mayHaveLanded(err error) bool {
	if errors.Is(err, errLeaseUnproven) {
		return false
	}
	var status apierrors.APIStatus
	return !errors.As(err, &status) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
}

func sameWrite(a, b *corev1.Service) bool {
	return equality.Semantic.DeepEqual(a.Status, b.Status) && equality.Semantic.DeepEqual(a.Annotations, b.Annotations)
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
		base := job.want.ResourceVersion
		sent := job.want.DeepCopy()
		// On kube-apiserver 1.37 a status update also stores metadata annotations: one request.
		err := w.client.Status().Update(ctx, sent)
		if apierrors.IsConflict(err) {
			sent, base, err = w.rebase(leading, job)
		}
		// sent == nil: nothing was sent (another write already put these fields there, and
		// told of it); base is then empty too.
		w.mu.Lock()
		w.done(job)
		if base != "" && (err == nil || mayHaveLanded(err)) {
			w.written[job.key] = append(w.written[job.key], written{base: base, ips: job.ips, landed: err == nil})
		}
		var backoff time.Duration
		if err == nil {
			delete(w.failures, job.key)
		} else {
			w.failures[job.key]++
			backoff = min(10*time.Millisecond<<min(w.failures[job.key], 10), 10*time.Second)
		}
		w.mu.Unlock()
		if err != nil {
			logf.Log.WithName("status-writer").V(1).Info("status write failed; retrying", "service", job.key, "error", err.Error(), "after", backoff)
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
	svc.Namespace, svc.Name = job.want.Namespace, job.want.Name
	select {
	case job.part.retry <- event.GenericEvent{Object: svc}:
	case <-leading.Done():
	}
}

// errDecidedFromOther refuses to rebase a write that would change addresses the decision did
// not see.
var errDecidedFromOther = errors.New("the Service lists other addresses than its decision was made from: deciding again")

// rebase applies the job's part to the Service as the apiserver has it now, after another
// part's write made the job's copy stale, and writes that (unless the fields are already
// right). It returns what it sent (nil: nothing) and the resourceVersion that replaced.
//
// A conflict may be the next leader's write, met by an old one that has not noticed yet that
// it lost the lease: it then holds a decision made from a state the new leader has changed.
// So a write never changes the addresses of a Service that lists other addresses than the
// copy its decision was made from: it is dropped unsent, and the Service decided again from
// what is there (errDecidedFromOther; run retries it through the part's queue). Conditions
// alone (the health part's, which leaves the addresses as stored) are still re-applied.
func (w *statusWriter) rebase(leading context.Context, job *writeJob) (sent *corev1.Service, base string, err error) {
	ctx := context.WithoutCancel(leading)
	var cur corev1.Service
	if err := w.reader.Get(ctx, client.ObjectKeyFromObject(job.want), &cur); err != nil {
		return nil, "", err
	}
	if cur.UID != job.want.UID {
		return nil, "", fmt.Errorf("service %s was recreated: deciding again", job.key)
	}
	sent = cur.DeepCopy()
	job.part.apply(sent)
	if sameWrite(&cur, sent) {
		return nil, "", nil
	}
	if now := porticov1.IngressAddrs(&cur); !slices.Equal(now, job.from) && !slices.Equal(porticov1.IngressAddrs(sent), now) {
		return nil, "", errDecidedFromOther
	}
	if err := leading.Err(); err != nil {
		return nil, "", err
	}
	return sent, cur.ResourceVersion, w.client.Status().Update(ctx, sent)
}

// forget drops what is remembered about a deleted Service.
func (w *statusWriter) forget(key string) {
	w.mu.Lock()
	delete(w.written, key)
	delete(w.failures, key)
	w.mu.Unlock()
}
