package decide

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// defaultNewsAfter is how long a health problem lasts before an event tells it. A Service is
// usually created a moment before its pods (Helm and kubectl apply both do it), and before
// any speaker reports it: a state that lasts a second is not news. The condition says it at
// once; the event, which `kubectl get events` and alerting read, only if it lasts.
const defaultNewsAfter = 30 * time.Second

// sharedAbove is how many of a pool's Services may have the same problem (condition type and
// reason) before it is the pool's news rather than each one's: past it, one event on the pool
// with the count says what a thousand events on the Services would, and costs the apiserver
// one write instead of a thousand (a cluster restored from a backup, a namespace scaled to
// zero).
const sharedAbove = 10

// clusterReasons are the problems that are the cluster's or the pool's, not the Service's:
// no speaker runs anywhere, no advertisement selects the pool. They are the pool's news
// however few Services have them.
var clusterReasons = map[[2]string]bool{
	{porticov1.ConditionAnnounced, porticov1.ReasonNoSpeakers}:      true,
	{porticov1.ConditionAnnounced, porticov1.ReasonNoAdvertisement}: true,
}

// sharedBeyond is how many Services of a pool may have the problem before it is the pool's.
func sharedBeyond(typ, reason string) int {
	if clusterReasons[[2]string{typ, reason}] {
		return 0
	}
	return sharedAbove
}

// NewsDesk decides which health conditions deserve an event: a problem (False, per reason)
// once it has lasted `after`, once; the end of a problem only if it was told (or an earlier
// reason of the same False was: whoever read that warning learns that it is over). A problem
// many of a pool's Services share (sharedBeyond) is told once on the pool, with a count, and
// its end once when no Service has it any more; each Service's condition still says it.
type NewsDesk struct {
	after   time.Duration
	started time.Time // a problem due before this was told by the leader before this one

	mu       sync.Mutex
	problems map[string]map[string]problem // Service → condition type → its current problem
	shared   map[sharedKey]*sharedProblem
	// unreviewed are the Services a new leader found with their conditions and has not
	// reviewed yet (nil: none); held, that it has not listed them yet. Until both are done the
	// pools' shared problems are not known: a pool's status keeps what the leader before wrote.
	unreviewed map[string]bool
	held       bool
	early      map[string]bool // reviewed while held: not to wait for
}

// problem is a False condition as the desk follows it.
type problem struct {
	reason    string
	pool      string    // where it counts as shared ("": nowhere)
	since     time.Time // when it began: lastTransitionTime, or when its reason was first seen
	told      bool      // on the Service
	pooled    bool      // as its pool's news
	inherited bool      // due before this leader started: the one before told it, one way or the other
	owed      bool      // an earlier reason of the same False was told: its end is news
}

// sharedKey is a problem as a pool's Services share it.
type sharedKey struct{ pool, typ, reason string }

// sharedProblem is the Services of a pool that have one problem now.
type sharedProblem struct {
	services map[string]bool
	message  string // what the condition of the last one to join says
	peak     int    // the most that had it at once
	told     bool   // as the pool's news
}

// PoolNews is a problem that many of a pool's Services share, told once on the pool (an event)
// and, while it lasts, in the pool's status (SharedCondition).
type PoolNews struct {
	Pool, Type, Reason string
	Message            string   // what their conditions say
	Count              int      // the Services that have it now; the most that had it, once Over
	Names              []string // a few of them, the first by name
	Over               bool     // no Service has it any more
}

// News is what a review finds.
type News struct {
	Tell  []metav1.Condition // changes told on the Service
	Pool  []PoolNews         // told on a pool
	Pools []string           // pools whose shared problems changed (their status says them)
	// Known: the desk has now reviewed every Service a new leader found: every pool's shared
	// problems are known, and each pool's status may say them.
	Known bool
	Again time.Duration // how long until a problem becomes news (0: none is waiting)
}

// NewNewsDesk makes a desk; started may be zero, and is then set by the first review (a
// leader's reconcilers start when it is elected, and review first then).
func NewNewsDesk(after time.Duration, started time.Time) *NewsDesk {
	if after <= 0 {
		after = defaultNewsAfter
	}
	return &NewsDesk{after: after, started: started, problems: map[string]map[string]problem{}, shared: map[sharedKey]*sharedProblem{}}
}

// Hold keeps the pools' shared problems unknown until Expect has been told which Services to
// review first and each of them has been: a new leader's pool reconciler must not write a
// pool's SharedProblem from a desk that has seen only some of its Services (it would take it
// off and put it back on every restart).
func (d *NewsDesk) Hold() {
	d.mu.Lock()
	d.held, d.early = true, map[string]bool{}
	d.mu.Unlock()
}

// Expect names the Services that have their conditions when a new leader starts; the pools'
// shared problems are known once each has been reviewed or forgotten (News.Known).
func (d *NewsDesk) Expect(keys []string) (n News) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unreviewed = map[string]bool{}
	for _, k := range keys {
		if !d.early[k] {
			d.unreviewed[k] = true
		}
	}
	d.held, d.early = false, nil
	d.reviewed("", &n)
	return n
}

// reviewed strikes key off the Services still to review; the last one makes every pool known.
func (d *NewsDesk) reviewed(key string, n *News) {
	if d.held {
		d.early[key] = true
	}
	if d.unreviewed == nil {
		return
	}
	delete(d.unreviewed, key)
	if len(d.unreviewed) == 0 && !d.held {
		d.unreviewed, n.Known = nil, true
	}
}

// Review looks at the stored conditions of the given types of a Service whose address came
// from pool ("" when none did), at time now.
func (d *NewsDesk) Review(key, pool string, stored []metav1.Condition, types []string, now time.Time) (n News) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started.IsZero() {
		d.started = now
	}
	defer d.reviewed(key, &n)
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
			if ok {
				d.end(key, typ, p, c, &n)
			}
			delete(known, typ)
			continue
		}
		if !ok || p.reason != c.Reason || p.pool != pool {
			p = d.begin(key, typ, pool, p, ok, c, now, &n)
		}
		d.tellWhenDue(&p, typ, c, now, &n)
		known[typ] = p
	}
	if len(known) == 0 {
		delete(d.problems, key)
	} else {
		d.problems[key] = known
	}
	return n
}

// end is the end of the Service's known problem p with condition c: told where it was told.
func (d *NewsDesk) end(key, typ string, p problem, c *metav1.Condition, n *News) {
	if d.endTold(key, typ, p) {
		n.Tell = append(n.Tell, *c) // the end of a problem that was told
	}
	d.leave(key, typ, p, n)
}

// begin is a problem that begins with condition c, or, when known (was), goes on for another
// reason or pool: the one before ends, and the new one begins now.
func (d *NewsDesk) begin(key, typ, pool string, was problem, known bool, c *metav1.Condition, now time.Time, n *News) problem {
	if known {
		d.leave(key, typ, was, n)
	}
	p := problem{reason: c.Reason, pool: pool, since: c.LastTransitionTime.Time, owed: known && (was.told || was.owed)}
	if known { // the same False, for another reason: that one begins now
		p.since = now
	}
	// Due before this leader started, even if it began as late as its second-precision
	// lastTransitionTime allows: the leader before this one told it.
	p.inherited = p.since.Add(time.Second + d.after).Before(d.started)
	d.join(key, typ, p, c.Message, n)
	return p
}

// tellWhenDue tells problem p once it has lasted the desk's delay: on the Service, or once as its
// pool's news when many of the pool's Services share it; until then n.Again says when it is due.
func (d *NewsDesk) tellWhenDue(p *problem, typ string, c *metav1.Condition, now time.Time, n *News) {
	switch due := p.since.Add(d.after); {
	case p.told || p.pooled || p.inherited:
	case now.Before(due):
		if wait := due.Sub(now); n.Again == 0 || wait < n.Again {
			n.Again = wait
		}
	default:
		g := d.shared[sharedKey{p.pool, typ, p.reason}]
		if g == nil || len(g.services) <= sharedBeyond(typ, p.reason) {
			n.Tell = append(n.Tell, *c)
			p.told = true
			return
		}
		p.pooled = true
		if !g.told {
			g.told = true
			n.Pool = append(n.Pool, g.news(sharedKey{p.pool, typ, p.reason}))
		}
	}
}

// endTold reports whether the end of the Service's problem is news on the Service: it was
// told there, or the leader before this one told it and it was not the pool's news.
func (d *NewsDesk) endTold(key, typ string, p problem) bool {
	if p.told || p.owed {
		return true
	}
	if !p.inherited {
		return false
	}
	g := d.shared[sharedKey{p.pool, typ, p.reason}]
	return g == nil || !g.told
}

// join counts the Service's new problem in its pool's share of it.
func (d *NewsDesk) join(key, typ string, p problem, message string, n *News) {
	if p.pool == "" {
		return
	}
	k := sharedKey{p.pool, typ, p.reason}
	g := d.shared[k]
	if g == nil {
		g = &sharedProblem{services: map[string]bool{}}
		d.shared[k] = g
	}
	g.services[key], g.message = true, message
	g.peak = max(g.peak, len(g.services))
	beyond := sharedBeyond(typ, p.reason)
	if p.inherited && g.peak > beyond {
		g.told = true // the leader before this one told it on the pool
	}
	if len(g.services) > beyond {
		n.Pools = appendOnce(n.Pools, p.pool)
	}
}

// leave takes the Service's problem out of its pool's share; the last one out ends the pool's
// news, if it was told.
func (d *NewsDesk) leave(key, typ string, p problem, n *News) {
	k := sharedKey{p.pool, typ, p.reason}
	g := d.shared[k]
	if g == nil || !g.services[key] {
		return
	}
	if len(g.services) > sharedBeyond(typ, p.reason) {
		n.Pools = appendOnce(n.Pools, p.pool)
	}
	delete(g.services, key)
	if len(g.services) > 0 {
		return
	}
	delete(d.shared, k)
	if g.told {
		over := g.news(k)
		over.Over, over.Count = true, g.peak
		n.Pool = append(n.Pool, over)
	}
}

func appendOnce(pools []string, pool string) []string {
	if slices.Contains(pools, pool) {
		return pools
	}
	return append(pools, pool)
}

// news is the shared problem as its pool tells it.
func (g *sharedProblem) news(k sharedKey) PoolNews {
	return PoolNews{Pool: k.pool, Type: k.typ, Reason: k.reason, Message: g.message, Count: len(g.services), Names: firstNames(g.services, 3)}
}

// firstNames are the first n keys by name, without sorting thousands to name three (the pool's
// status is written from them while a backlog is allocated).
func firstNames(set map[string]bool, n int) []string {
	first := make([]string, 0, n+1)
	for s := range set {
		if len(first) == n && s > first[n-1] {
			continue
		}
		i, _ := slices.BinarySearch(first, s)
		first = slices.Insert(first, i, s)
		if len(first) > n {
			first = first[:n]
		}
	}
	return first
}

// Shared lists the problems that are the pool's now, the most widely shared first; known is
// false while a new leader has not reviewed every Service yet (Hold).
func (d *NewsDesk) Shared(pool string) (out []PoolNews, known bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held || d.unreviewed != nil {
		return nil, false
	}
	for k, g := range d.shared {
		if k.pool == pool && len(g.services) > sharedBeyond(k.typ, k.reason) {
			out = append(out, g.news(k))
		}
	}
	slices.SortFunc(out, func(a, b PoolNews) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Type, b.Type), cmp.Compare(a.Reason, b.Reason))
	})
	return out, true
}

// Forget drops what is remembered about a deleted Service; it returns what that changes for
// its pools.
func (d *NewsDesk) Forget(key string) (n News) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for typ, p := range d.problems[key] {
		d.leave(key, typ, p, &n)
	}
	delete(d.problems, key)
	d.reviewed(key, &n)
	return n
}

// SharedCondition is the pool's SharedProblem condition: True while some problem is shared by
// more of its Services than one Service's news (shared, from NewsDesk.Shared).
func SharedCondition(shared []PoolNews) metav1.Condition {
	c := metav1.Condition{Type: porticov1.ConditionSharedProblem, Status: metav1.ConditionFalse, Reason: porticov1.ReasonNoSharedProblem,
		Message: fmt.Sprintf("no problem is shared by more than %d of the pool's Services", sharedAbove)}
	if len(shared) == 0 {
		return c
	}
	parts := make([]string, len(shared))
	for i, s := range shared {
		parts[i] = s.Summary()
	}
	c.Status, c.Reason, c.Message = metav1.ConditionTrue, shared[0].Reason, strings.Join(parts, "; ")
	return c
}

// Summary says the shared problem in a line: "5000 Services (default/a, default/b, default/c
// ...): Announced NoSpeakers: no speaker has reported ...".
func (s PoolNews) Summary() string {
	who := strings.Join(s.Names, ", ")
	if s.Count > len(s.Names) {
		who += fmt.Sprintf(" and %d more", s.Count-len(s.Names))
	}
	noun := "Services"
	if s.Count == 1 {
		noun = "Service"
	}
	short := strings.TrimPrefix(s.Type, "portico.dev/")
	if s.Over {
		return fmt.Sprintf("%s %s is over for every Service of the pool (it held for %d at most)", short, s.Reason, s.Count)
	}
	return fmt.Sprintf("%d %s (%s): %s %s: %s", s.Count, noun, who, short, s.Reason, s.Message)
}

// Notice is the event on the pool that tells a shared problem, or its end.
func (s PoolNews) Notice() Notice {
	short := strings.TrimPrefix(s.Type, "portico.dev/")
	if s.Over {
		return Notice{"Normal", porticov1.ReasonSharedProblemOver, short, s.Summary()}
	}
	return Notice{"Warning", s.Reason, short, s.Summary()}
}
