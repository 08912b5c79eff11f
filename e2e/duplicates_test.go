package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/controlplane"
)

// duplicateWatch follows every Service through one watch for a whole test and records each
// moment two Services held one address they may not share. The invariant checker sees only
// the end of a storm; the watch sees every state the apiserver stored, in the order it stored
// them (one watch stream is ordered; an informer's queue is not, across objects), keeps the
// last state of each Service and checks each event against the others.
//
// A user's edit that makes two sharers incompatible (a new key on one) is reported too until
// the controller moves one of them; the tests that use it never make such an edit.
type duplicateWatch struct {
	cs   kubernetes.Interface
	done chan struct{}

	mu       sync.Mutex
	last     map[string]*corev1.Service     // namespace/name → its last state, when Portico's
	holders  map[netip.Addr]map[string]bool // address → the Services listing it
	events   int
	relists  int             // the watch was lost and the Services read again: states in the gap are unseen
	gap      gapSeen         // what the relists found changed in their gaps
	failed   string          // why the Services could not be read again after the watch was lost
	found    []string        // every moment of two holders, first seen
	reported map[string]bool // address and pair already in found
}

// gapSeen is what relists found changed while the watch was lost: the Services whose state
// changed unseen, and the addresses that went from one Service to another unseen (whether
// both held one at some moment in the gap cannot be known; the relisted moment is checked).
type gapSeen struct {
	changed   int
	handovers []string
}

// relistWithin is how long the watch may go without reading the Services again after losing
// its place (the apiserver restarts in seconds); after that the run fails.
const relistWithin = 2 * time.Minute

// watchDuplicates starts the watch; it runs until the test ends.
func watchDuplicates(t testing.TB, cp *controlplane.ControlPlane) *duplicateWatch {
	t.Helper()
	w := &duplicateWatch{cs: kubernetes.NewForConfigOrDie(cp.Config), done: make(chan struct{}), reported: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	list, err := w.cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.last, w.holders = map[string]*corev1.Service{}, map[netip.Addr]map[string]bool{}
	for i := range list.Items {
		w.observe(&list.Items[i], list.ResourceVersion)
	}
	go w.run(ctx, list.ResourceVersion)
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

func (w *duplicateWatch) run(ctx context.Context, rv string) {
	defer close(w.done)
	var lost time.Time // when the watch lost its place; zero while it has one
	for ctx.Err() == nil {
		if rv == "" {
			if lost.IsZero() {
				lost = time.Now()
			}
			var err error
			if rv, err = w.relist(ctx); err != nil {
				if time.Since(lost) > relistWithin && ctx.Err() == nil {
					w.mu.Lock()
					w.failed = fmt.Sprintf("the Services could not be read again for %s after the watch lost its place: %v", relistWithin, err)
					w.mu.Unlock()
					return
				}
				pause(ctx) // the apiserver is down (restarting): try again
				continue
			}
			lost = time.Time{}
		}
		rv = w.follow(ctx, rv)
	}
}

func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(100 * time.Millisecond):
	}
}

// follow watches from rv until the watch ends, and returns where to go on from, or "" when
// that is too old and the Services must be read again.
func (w *duplicateWatch) follow(ctx context.Context, rv string) string {
	wi, err := w.cs.CoreV1().Services("").Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return ""
		}
		pause(ctx)
		return rv
	}
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		if ev.Type == watch.Error {
			if err := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return ""
			}
			return rv
		}
		obj, err := meta.Accessor(ev.Object)
		if err != nil {
			continue
		}
		rv = obj.GetResourceVersion()
		svc, ok := ev.Object.(*corev1.Service)
		switch {
		case !ok || ev.Type == watch.Bookmark:
		case ev.Type == watch.Deleted:
			w.mu.Lock()
			w.events++
			w.drop(svc.Namespace + "/" + svc.Name)
			w.mu.Unlock()
		default:
			w.mu.Lock()
			w.events++
			w.observe(svc, rv)
			w.mu.Unlock()
		}
	}
	return rv
}

// relist reads every Service afresh after the watch lost its place (a consistent moment),
// checks it, and compares it with what the watch knew before the gap: which Services changed
// unseen, and which addresses went from one Service to another unseen.
func (w *duplicateWatch) relist(ctx context.Context) (string, error) {
	list, err := w.cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.relists++
	before := map[netip.Addr]string{}
	for key, svc := range w.last {
		for _, ip := range porticov1.IngressAddrs(svc) {
			before[ip] = key
		}
	}
	known := w.last
	w.last, w.holders = map[string]*corev1.Service{}, map[netip.Addr]map[string]bool{}
	now := map[string]bool{}
	for i := range list.Items {
		svc := &list.Items[i]
		key := svc.Namespace + "/" + svc.Name
		now[key] = true
		if old := known[key]; old == nil || old.ResourceVersion != svc.ResourceVersion {
			w.gap.changed++
		}
		w.observe(svc, list.ResourceVersion)
		for _, ip := range porticov1.IngressAddrs(svc) {
			if from := before[ip]; from != "" && from != key {
				w.gap.handovers = append(w.gap.handovers, fmt.Sprintf("%s from %s to %s", ip, from, key))
			}
		}
	}
	for key := range known {
		if !now[key] {
			w.gap.changed++ // deleted in the gap
		}
	}
	return list.ResourceVersion, nil
}

// drop forgets what key held. Call with mu held.
func (w *duplicateWatch) drop(key string) {
	if old := w.last[key]; old != nil {
		for _, ip := range porticov1.IngressAddrs(old) {
			delete(w.holders[ip], key)
		}
	}
	delete(w.last, key)
}

// observe takes the Service's new state and checks its addresses against every other holder's
// last state. Call with mu held.
func (w *duplicateWatch) observe(svc *corev1.Service, rv string) {
	key := svc.Namespace + "/" + svc.Name
	w.drop(key)
	if !handled(svc, porticov1.DefaultLoadBalancerClass) {
		return
	}
	w.last[key] = svc
	for _, ip := range porticov1.IngressAddrs(svc) {
		for other := range w.holders[ip] {
			why := cannotShare(svc, w.last[other])
			pair := []string{key, other}
			slices.Sort(pair)
			id := ip.String() + " " + strings.Join(pair, " ")
			if why == "" || w.reported[id] {
				continue
			}
			w.reported[id] = true
			w.found = append(w.found, fmt.Sprintf("%s held by %s at resourceVersion %s and by %s since %s, seen at %s: %s",
				ip, key, svc.ResourceVersion, other, w.last[other].ResourceVersion, rv, why))
		}
		if w.holders[ip] == nil {
			w.holders[ip] = map[string]bool{}
		}
		w.holders[ip][key] = true
	}
}

// check waits until the watch has seen every Service as it is now, and fails the test for
// every moment two Services held one address. It returns the number of events seen and of
// such moments.
func (w *duplicateWatch) check(t testing.TB) (events, moments int) {
	t.Helper()
	var lag string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := w.cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
		if err != nil {
			lag = err.Error()
			return false, nil
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		lag = ""
		for i := range list.Items {
			svc := &list.Items[i]
			if seen := w.last[svc.Namespace+"/"+svc.Name]; handled(svc, porticov1.DefaultLoadBalancerClass) && (seen == nil || seen.ResourceVersion != svc.ResourceVersion) {
				lag = fmt.Sprintf("%s/%s at resourceVersion %s not seen yet", svc.Namespace, svc.Name, svc.ResourceVersion)
				break
			}
		}
		return lag == "", nil
	})
	if err != nil {
		t.Errorf("the duplicate watch did not catch up: %s", lag)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != "" {
		t.Errorf("the duplicate watch stopped: %s", w.failed)
	}
	for _, f := range w.found {
		t.Errorf("two holders at once: %s", f)
	}
	t.Logf("duplicate watch: %d Service events, %d moments with an address held twice, %d relists (watch lost; each relisted moment checked): %d Services changed in the gaps, %d addresses handed over unseen %v",
		w.events, len(w.found), w.relists, w.gap.changed, len(w.gap.handovers), w.gap.handovers)
	return w.events, len(w.found)
}
