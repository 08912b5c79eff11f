// Package events sends a binary's Kubernetes events behind its more urgent writes. Both the
// controller and the speaker use it: an address in a Service's status, a route to a router or
// a Speaker's status is what users wait for; the event that tells it is read later (`kubectl
// get events`, alerting) and costs the apiserver as much as a write.
package events

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Sender is an events.EventRecorder whose events wait until its user is quiet, then go out one
// request at a time. One that has waited patience goes out anyway, at most one per overdueGap,
// so a steady stream of work cannot hold the news back for ever.
//
// Identical events that wait together are sent once, as a series with their count, as
// Kubernetes' own recorder aggregates them. More than foldAbove events of one kind (type,
// reason, action) about objects related to the same one (a pool the Services' addresses came
// from) that wait together are sent as one event on the related object, with their count and
// the first few: a backlog of 5000 allocations is one piece of news, not 5000 writes. At most
// maxPending wait: memory stays bounded whatever the backlog, and the newest beyond it are
// dropped and counted.
type Sender struct {
	o Options

	mu      sync.Mutex
	queue   []*pending // oldest first
	byKey   map[eventKey]*pending
	queued  chan struct{} // holds a token when something was queued since the sender last looked
	overdue time.Time     // when the last event that did not wait for quiet was sent
}

// Options are what a Sender's user supplies.
type Options struct {
	// Create sends one event to the apiserver; nil: nothing can be sent (a test of the queue
	// alone). A function rather than a client, so the speaker need not link controller-runtime's.
	Create     func(context.Context, *eventsv1.Event) error
	Scheme     *runtime.Scheme
	Controller string // reportingController
	Instance   string // reportingInstance
	// Quiet returns a channel that is closed while its user has nothing more urgent under way;
	// the oldest event waits for it (or for patience).
	Quiet   func() <-chan struct{}
	Metrics Metrics
}

// Metrics are a Sender's series. The controller and the speaker register the same names, each
// in its own process.
type Metrics struct {
	Pending prometheus.Gauge   // events waiting
	Dropped prometheus.Counter // events not queued because maxPending were waiting
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) Metrics {
	m := Metrics{
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "portico_events_pending",
			Help: "Events waiting to be sent: they wait while more urgent writes are under way, so addresses and routes come first."}),
		Dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_events_dropped_total",
			Help: "Events not sent because 10 000 were already waiting."}),
	}
	reg.MustRegister(m.Pending, m.Dropped)
	return m
}

const (
	maxPending   = 10000
	patience     = 10 * time.Second
	overdueGap   = 100 * time.Millisecond
	tries        = 3
	maxNoteBytes = 1024 // the events API's limit
	foldAbove    = 10   // events of one kind about one related object's objects sent each on its own
	foldNames    = 3    // the objects a folded event names
)

// eventKey is what makes two events identical (Kubernetes' recorder also ignores the
// regarding object's resourceVersion).
type eventKey struct {
	regarding                       corev1.ObjectReference // without its resourceVersion
	eventType, reason, action, note string
}

// pending is an event waiting to be sent, with how often it happened meanwhile.
type pending struct {
	key         eventKey
	regarding   corev1.ObjectReference
	related     *corev1.ObjectReference
	first, last time.Time
	count       int32
}

// NewSender returns a Sender; Start sends what it queues.
func NewSender(o Options) *Sender {
	return &Sender{o: o, byKey: map[eventKey]*pending{}, queued: make(chan struct{}, 1)}
}

// Eventf queues an event (events.EventRecorder); it never waits.
func (s *Sender) Eventf(regarding, related runtime.Object, eventType, reason, action, note string, args ...any) {
	log := logf.Log.WithName("events")
	ref, err := reference.GetReference(s.o.Scheme, regarding)
	if err != nil {
		log.Error(err, "no event: the object has no reference", "reason", reason)
		return
	}
	if !util.ValidateEventType(eventType) {
		log.Error(nil, "no event: unknown type", "type", eventType, "reason", reason)
		return
	}
	var relatedRef *corev1.ObjectReference
	if related != nil {
		relatedRef, _ = reference.GetReference(s.o.Scheme, related)
	}
	note = fmt.Sprintf(note, args...)
	if len(note) > maxNoteBytes {
		note = note[:maxNoteBytes]
	}
	key := eventKey{regarding: *ref, eventType: eventType, reason: reason, action: action, note: note}
	key.regarding.ResourceVersion = ""
	now := time.Now()

	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.byKey[key]; p != nil {
		p.count++
		p.last = now
		return
	}
	if len(s.queue) >= maxPending {
		s.o.Metrics.Dropped.Inc()
		return
	}
	p := &pending{key: key, regarding: *ref, related: relatedRef, first: now, last: now, count: 1}
	s.queue = append(s.queue, p)
	s.byKey[key] = p
	s.o.Metrics.Pending.Set(float64(len(s.queue)))
	select {
	case s.queued <- struct{}{}:
	default:
	}
}

// Start sends events until ctx ends; those still waiting then are dropped.
func (s *Sender) Start(ctx context.Context) error {
	for {
		p := s.next(ctx)
		if p == nil {
			return nil
		}
		s.send(ctx, p)
	}
}

// next waits for the oldest event's turn, takes it off the queue and returns it; nil once ctx
// ends.
func (s *Sender) next(ctx context.Context) *pending {
	for {
		s.mu.Lock()
		var oldest *pending
		if len(s.queue) > 0 {
			oldest = s.queue[0]
		}
		overdueAt := time.Time{}
		if oldest != nil {
			overdueAt = oldest.first.Add(patience)
			if next := s.overdue.Add(overdueGap); next.After(overdueAt) {
				overdueAt = next
			}
		}
		s.mu.Unlock()
		if oldest == nil {
			select {
			case <-s.queued:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		wait := time.NewTimer(time.Until(overdueAt))
		select {
		case <-s.o.Quiet():
		case <-wait.C:
			s.mu.Lock()
			s.overdue = time.Now()
			s.mu.Unlock()
		case <-ctx.Done():
			wait.Stop()
			return nil
		}
		wait.Stop()
		return s.take()
	}
}

// take removes the oldest waiting event from the queue, with those it folds into one (fold).
func (s *Sender) take() *pending {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.queue[0]
	var kin []*pending
	if p.related != nil {
		for _, q := range s.queue {
			if q.related != nil && sameObject(*q.related, *p.related) && q.key.eventType == p.key.eventType &&
				q.key.reason == p.key.reason && q.key.action == p.key.action {
				kin = append(kin, q)
			}
		}
	}
	taken := []*pending{p}
	if len(kin) > foldAbove {
		taken, p = kin, fold(kin)
	}
	gone := map[*pending]bool{}
	for _, q := range taken {
		delete(s.byKey, q.key)
		gone[q] = true
	}
	s.queue = slices.DeleteFunc(s.queue, func(q *pending) bool { return gone[q] })
	s.o.Metrics.Pending.Set(float64(len(s.queue)))
	return p
}

// sameObject compares two references, whatever their resourceVersions.
func sameObject(a, b corev1.ObjectReference) bool {
	a.ResourceVersion, b.ResourceVersion = "", ""
	return a == b
}

// fold makes one event, on their related object, of events of one kind (oldest first): "5000
// Services: apps/gitea: 10.0.0.200 from pool home-lab; apps/harbor: ...; and 4997 more".
func fold(kin []*pending) *pending {
	first := kin[0]
	f := &pending{regarding: *first.related, first: first.first, last: first.last, count: 1}
	var b strings.Builder
	fmt.Fprintf(&b, "%d %ss: ", len(kin), first.regarding.Kind)
	for i, q := range kin[:foldNames] {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", objectName(q.regarding), q.key.note)
	}
	fmt.Fprintf(&b, "; and %d more", len(kin)-foldNames)
	for _, q := range kin {
		if q.last.After(f.last) {
			f.last = q.last
		}
	}
	note := b.String()
	if len(note) > maxNoteBytes {
		note = note[:maxNoteBytes]
	}
	f.key = eventKey{regarding: f.regarding, eventType: first.key.eventType, reason: first.key.reason, action: first.key.action, note: note}
	return f
}

func objectName(r corev1.ObjectReference) string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

// send creates the event, trying again a few times while the apiserver fails.
func (s *Sender) send(ctx context.Context, p *pending) {
	namespace := p.regarding.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: util.GenerateEventName(p.regarding.Name, p.first.UnixNano()), Namespace: namespace},
		EventTime:           metav1.NewMicroTime(p.first),
		ReportingController: s.o.Controller,
		ReportingInstance:   s.o.Instance,
		Action:              p.key.action,
		Reason:              p.key.reason,
		Regarding:           p.regarding,
		Related:             p.related,
		Note:                p.key.note,
		Type:                p.key.eventType,
	}
	if p.count > 1 {
		ev.Series = &eventsv1.EventSeries{Count: p.count, LastObservedTime: metav1.NewMicroTime(p.last)}
	}
	var err error
	for try := 1; ; try++ {
		err = s.o.Create(ctx, ev.DeepCopy())
		if err == nil || apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) || try == tries {
			break
		}
		backoff := time.NewTimer(time.Duration(try) * time.Second)
		select {
		case <-backoff.C:
		case <-ctx.Done():
			backoff.Stop()
			return
		}
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		logf.Log.WithName("events").Error(err, "event not sent", "reason", p.key.reason, "object", p.regarding.Namespace+"/"+p.regarding.Name)
	}
}
