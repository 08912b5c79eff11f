package controller

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
)

// teller is where the controller's news leaves: the events its decisions tell (decide.Notice,
// decide.EventOf) and the pools whose status the news changes. Every reconciler tells through
// it; the events wait for the status writer's lull (eventLull).
type teller struct {
	rec     events.EventRecorder // nil: nothing is sent
	reader  client.Reader        // the pools a news is told on
	metrics *Metrics
	clock   Clock
	// poolsDirty asks for pools' status to be written again: the problems their Services
	// share changed (decide.NewsDesk.Shared).
	poolsDirty func([]string)
	pokeMu     sync.Mutex
	poked      map[string]bool // pools asked for within the last poolWriteInterval
}

// eventLull is how long the writer must have had nothing pending before events go out. In a
// burst the Services arrive milliseconds apart and the writer is idle between them; events sent
// in those gaps cost the apiserver as much as the creations and writes of the burst itself
// (make bench, 1000 Services: its CPU for the burst rose by half). Half a second without a
// write means the burst is over; a lone Service's event follows its address by that much.
const eventLull = 500 * time.Millisecond

func newTeller(reader client.Reader, m *Metrics, clock Clock, poolsDirty func([]string)) *teller {
	return &teller{reader: reader, metrics: m, clock: clock, poolsDirty: poolsDirty}
}

// notice sends one event on regarding; the sender folds many events of one kind related to
// one object (related, may be nil) into one event on it.
func (t *teller) notice(regarding, related runtime.Object, n decide.Notice) {
	if t.rec != nil {
		t.rec.Eventf(regarding, related, n.Type, n.Reason, n.Action, "%s", n.Note)
	}
}

// condition sends the event that tells a condition's change on an object (decide.EventOf).
func (t *teller) condition(regarding, related runtime.Object, c metav1.Condition) {
	t.notice(regarding, related, decide.EventOf(c))
}

// conditionChanges tells a Service's health conditions that changed, and counts them.
func (t *teller) conditionChanges(regarding runtime.Object, changes []metav1.Condition) {
	for _, c := range changes {
		t.metrics.conditionChanges.WithLabelValues(c.Type, c.Reason).Inc()
		t.condition(regarding, nil, c)
	}
}

// pools sends the events that tell problems many Services share on their pools, and asks for
// the pools' status (their SharedProblem condition) to be written again.
func (t *teller) pools(ctx context.Context, n decide.News) {
	for _, news := range n.Pool {
		t.metrics.conditionChanges.WithLabelValues(news.Type, news.Notice().Reason).Inc()
		var pool porticov1.IPAddressPool
		if t.rec == nil {
			continue
		}
		if found, err := get(ctx, t.reader, client.ObjectKey{Name: news.Pool}, &pool); err != nil || !found {
			continue // a pool that is gone has nobody to tell
		}
		t.notice(&pool, nil, news.Notice())
	}
	pools := n.Pools
	if n.Known { // every pool's SharedProblem may be written now
		var all porticov1.IPAddressPoolList
		if err := t.reader.List(ctx, &all); err == nil {
			for i := range all.Items {
				pools = append(pools, all.Items[i].Name)
			}
		}
	}
	t.poke(pools)
}

// poke asks for the pools' status at most once a poolWriteInterval each, after it: in a
// backlog every review changes a pool's count, and every pool reconcile takes the allocator's
// lock that the allocations wait for. The pool reconciler writes at most that often anyway.
func (t *teller) poke(pools []string) {
	if t.poolsDirty == nil {
		return
	}
	t.pokeMu.Lock()
	defer t.pokeMu.Unlock()
	if t.poked == nil {
		t.poked = map[string]bool{}
	}
	for _, p := range pools {
		if t.poked[p] {
			continue
		}
		t.poked[p] = true
		t.clock.AfterFunc(poolWriteInterval, func() {
			t.pokeMu.Lock()
			delete(t.poked, p)
			t.pokeMu.Unlock()
			t.poolsDirty([]string{p})
		})
	}
}
