package controller

import (
	"context"
	"hash/fnv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// statusWriter writes Service status off the reconcile path: decisions stay in one worker, in
// queue order, while the requests (milliseconds each) go out in parallel. Writes for one
// Service keep their order (one lane per Service), and a write is skipped when the same
// result is already on its way or the cache has not yet seen the last one.
type statusWriter struct {
	client client.Client
	done   func(svc *corev1.Service, cond *metav1.Condition) // after a successful write
	retry  func(key string)                                  // ask for the Service to be reconciled again
	lanes  []chan *writeJob

	mu       sync.Mutex
	inflight map[string]*writeJob // the last write handed to a lane, until it is done
	replaced map[string]string    // resourceVersion our last write replaced: a cached copy still at it is stale
	failures map[string]int       // consecutive failures, for backoff
}

type writeJob struct {
	key  string
	obj  *corev1.Service   // the whole wanted object, at the resourceVersion it was computed from
	cond *metav1.Condition // the condition that changed, for the event; nil if none
}

const writeLanes = 8

func newStatusWriter(c client.Client, done func(*corev1.Service, *metav1.Condition), retry func(string)) *statusWriter {
	w := &statusWriter{client: c, done: done, retry: retry,
		inflight: map[string]*writeJob{}, replaced: map[string]string{}, failures: map[string]int{}}
	for range writeLanes {
		lane := make(chan *writeJob, 1024)
		w.lanes = append(w.lanes, lane)
		go w.run(lane)
	}
	return w
}

// submit hands over a write unless it is redundant. cached is the object the decision was
// made from; want is what it should become.
func (w *statusWriter) submit(key string, cached, want *corev1.Service, cond *metav1.Condition) {
	w.mu.Lock()
	if rv, ok := w.replaced[key]; ok {
		if rv == cached.ResourceVersion {
			w.mu.Unlock()
			return // our write has not reached the cache; its watch event brings us back
		}
		delete(w.replaced, key)
	}
	if j := w.inflight[key]; j != nil && sameWrite(j.obj, want) {
		w.mu.Unlock()
		return
	}
	if sameWrite(cached, want) {
		w.mu.Unlock()
		return
	}
	job := &writeJob{key: key, obj: want, cond: cond}
	w.inflight[key] = job
	w.mu.Unlock()
	h := fnv.New32a()
	h.Write([]byte(key))
	w.lanes[h.Sum32()%writeLanes] <- job
}

func sameWrite(a, b *corev1.Service) bool {
	return equality.Semantic.DeepEqual(a.Status, b.Status) && equality.Semantic.DeepEqual(a.Annotations, b.Annotations)
}

func (w *statusWriter) run(lane chan *writeJob) {
	for job := range lane {
		base := job.obj.ResourceVersion
		// On kube-apiserver 1.37 a status update also stores metadata annotations: one request.
		err := w.client.Status().Update(context.Background(), job.obj)
		w.mu.Lock()
		if w.inflight[job.key] == job {
			delete(w.inflight, job.key)
		}
		var backoff time.Duration
		if err == nil {
			w.replaced[job.key] = base
			delete(w.failures, job.key)
		} else {
			w.failures[job.key]++
			backoff = min(10*time.Millisecond<<min(w.failures[job.key], 10), 10*time.Second)
		}
		w.mu.Unlock()
		if err != nil {
			logf.Log.WithName("status-writer").V(1).Info("status write failed; retrying", "service", job.key, "error", err.Error(), "after", backoff)
			time.AfterFunc(backoff, func() { w.retry(job.key) })
			continue
		}
		w.done(job.obj, job.cond)
	}
}

// forget drops what is remembered about a deleted Service.
func (w *statusWriter) forget(key string) {
	w.mu.Lock()
	delete(w.replaced, key)
	delete(w.failures, key)
	w.mu.Unlock()
}
