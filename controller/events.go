package controller

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// eventSender sends the controller's events behind its status writes. A Service's address is
// what its user waits for; the event that tells it is read later (`kubectl get events`,
// alerting), and costs the apiserver as much as the write. So an event waits while status
// writes are pending, and events go out one request at a time. One that has waited
// eventPatience goes out anyway, at most one per overdueGap, so a steady stream of writes
// cannot hold the news back for ever.
//
// Identical events that wait together are sent once, as a series with their count, as
// Kubernetes' own recorder aggregates them. At most maxPendingEvents wait: memory stays bounded
// whatever the backlog, and the newest beyond it are dropped and counted.
type eventSender struct {
	client     client.Client
	scheme     *runtime.Scheme
	controller string // reportingController
	instance   string // reportingInstance
	writes     *statusWriter
	metrics    *Metrics

	mu      sync.Mutex
	queue   []*pendingEvent // oldest first
	byKey   map[eventKey]*pendingEvent
	queued  chan struct{} // holds a token when something was queued since the sender last looked
	overdue time.Time     // when the last event that did not wait for quiet was sent
}

const (
	maxPendingEvents = 10000
	eventPatience    = 10 * time.Second
	overdueGap       = 100 * time.Millisecond
	eventTries       = 3
	maxNoteBytes     = 1024 // the events API's limit
)

// eventKey is what makes two events identical (Kubernetes' recorder also ignores the
// regarding object's resourceVersion).
type eventKey struct {
	regarding                       corev1.ObjectReference // without its resourceVersion
	eventType, reason, action, note string
}

// pendingEvent is an event waiting to be sent, with how often it happened meanwhile.
type pendingEvent struct {
	key         eventKey
	regarding   corev1.ObjectReference
	related     *corev1.ObjectReference
	first, last time.Time
	count       int32
}

func newEventSender(c client.Client, scheme *runtime.Scheme, controller string, writes *statusWriter, m *Metrics) *eventSender {
	host, _ := os.Hostname()
	return &eventSender{client: c, scheme: scheme, controller: controller, instance: controller + "-" + host,
		writes: writes, metrics: m, byKey: map[eventKey]*pendingEvent{}, queued: make(chan struct{}, 1)}
}

// Eventf queues an event (events.EventRecorder); it never waits.
func (s *eventSender) Eventf(regarding, related runtime.Object, eventType, reason, action, note string, args ...any) {
	log := logf.Log.WithName("events")
	ref, err := reference.GetReference(s.scheme, regarding)
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
		relatedRef, _ = reference.GetReference(s.scheme, related)
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
	if len(s.queue) >= maxPendingEvents {
		s.metrics.eventsDropped.Inc()
		return
	}
	p := &pendingEvent{key: key, regarding: *ref, related: relatedRef, first: now, last: now, count: 1}
	s.queue = append(s.queue, p)
	s.byKey[key] = p
	s.metrics.eventsPending.Set(float64(len(s.queue)))
	select {
	case s.queued <- struct{}{}:
	default:
	}
}

// NeedLeaderElection: events come from the reconcilers, which run on the leader only.
func (s *eventSender) NeedLeaderElection() bool { return true }

// Start sends events until ctx ends; those still waiting then are dropped.
func (s *eventSender) Start(ctx context.Context) error {
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
func (s *eventSender) next(ctx context.Context) *pendingEvent {
	for {
		s.mu.Lock()
		var oldest *pendingEvent
		if len(s.queue) > 0 {
			oldest = s.queue[0]
		}
		overdueAt := time.Time{}
		if oldest != nil {
			overdueAt = oldest.first.Add(eventPatience)
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
		case <-s.writes.quiet():
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

// take removes the oldest waiting event from the queue.
func (s *eventSender) take() *pendingEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.queue[0]
	s.queue = slices.Delete(s.queue, 0, 1)
	delete(s.byKey, p.key)
	s.metrics.eventsPending.Set(float64(len(s.queue)))
	return p
}

// send creates the event, trying again a few times while the apiserver fails.
func (s *eventSender) send(ctx context.Context, p *pendingEvent) {
	namespace := p.regarding.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: util.GenerateEventName(p.regarding.Name, p.first.UnixNano()), Namespace: namespace},
		EventTime:           metav1.NewMicroTime(p.first),
		ReportingController: s.controller,
		ReportingInstance:   s.instance,
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
		err = s.client.Create(ctx, ev.DeepCopy())
		if err == nil || apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) || try == eventTries {
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
