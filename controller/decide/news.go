package decide

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// defaultNewsAfter is how long a health problem lasts before an event tells it. A Service is
// usually created a moment before its pods (Helm and kubectl apply both do it), and before
// any speaker reports it: a state that lasts a second is not news. The condition says it at
// once; the event, which `kubectl get events` and alerting read, only if it lasts.
const defaultNewsAfter = 30 * time.Second

// NewsDesk decides which health conditions deserve an event: a problem (False, per reason)
// once it has lasted `after`, once; the end of a problem only if it was told (or an earlier
// reason of the same False was: whoever read that warning learns that it is over).
type NewsDesk struct {
	after   time.Duration
	started time.Time // a problem due before this was told by the leader before this one

	mu       sync.Mutex
	problems map[string]map[string]problem // Service → condition type → its current problem
}

// problem is a False condition as the desk follows it.
type problem struct {
	reason string
	since  time.Time // when it began: lastTransitionTime, or when its reason was first seen
	told   bool
	owed   bool // an earlier reason of the same False was told: its end is news
}

// NewNewsDesk makes a desk; started may be zero, and is then set by the first review (a
// leader's reconcilers start when it is elected, and review first then).
func NewNewsDesk(after time.Duration, started time.Time) *NewsDesk {
	if after <= 0 {
		after = defaultNewsAfter
	}
	return &NewsDesk{after: after, started: started, problems: map[string]map[string]problem{}}
}

// Review looks at the Service's stored conditions of the given types at time now: those to
// tell now, and how long until a problem becomes news (0: none is waiting).
func (d *NewsDesk) Review(key string, stored []metav1.Condition, types []string, now time.Time) (tell []metav1.Condition, again time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started.IsZero() {
		d.started = now
	}
	known := d.problems[key]
	if known == nil {
		known = map[string]problem{}
	}
	for _, typ := range types {
		c := meta.FindStatusCondition(stored, typ)
		if c == nil {
			continue
		}
		p, ok := known[typ]
		if c.Status != metav1.ConditionFalse {
			if p.told || p.owed {
				tell = append(tell, *c) // the end of a problem that was told
			}
			delete(known, typ)
			continue
		}
		if !ok || p.reason != c.Reason {
			p = problem{reason: c.Reason, since: c.LastTransitionTime.Time, owed: ok && (p.told || p.owed)}
			if ok { // the same False, for another reason: that one begins now
				p.since = now
			}
			// Due before this leader started, even if it began as late as its second-precision
			// lastTransitionTime allows: the leader before this one told it.
			p.told = p.since.Add(time.Second + d.after).Before(d.started)
		}
		switch due := p.since.Add(d.after); {
		case p.told:
		case now.Before(due):
			if wait := due.Sub(now); again == 0 || wait < again {
				again = wait
			}
		default:
			tell = append(tell, *c)
			p.told = true
		}
		known[typ] = p
	}
	if len(known) == 0 {
		delete(d.problems, key)
	} else {
		d.problems[key] = known
	}
	return tell, again
}

// Forget drops what is remembered about a deleted Service.
func (d *NewsDesk) Forget(key string) {
	d.mu.Lock()
	delete(d.problems, key)
	d.mu.Unlock()
}
