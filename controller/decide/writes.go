package decide

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/internal/seeded"
)

// Writes is the status writer's bookkeeping, with no I/O: which writes are on their way, which
// landed (or may have) and the cache does not show yet, whether a new write is redundant, and
// what a write that met a conflict becomes. The writer's lanes send the requests and call it
// under their lock: it is not safe for concurrent use.
type Writes struct {
	inflight map[string][]*Write  // writes handed to a lane and not done yet, oldest first
	written  map[string][]written // our writes the cache may not show yet
	failures map[string]int       // consecutive failures, for backoff
	bugs     seeded.Bugs
}

// Seed switches on deliberately broken rules: for the simulator's positive controls only.
func (w *Writes) Seed(b seeded.Bugs) { w.bugs = b }

// NewWrites is the bookkeeping of a writer that has sent nothing yet.
func NewWrites() *Writes {
	return &Writes{inflight: map[string][]*Write{}, written: map[string][]written{}, failures: map[string]int{}}
}

// Write is one status write: one reconciler's share of the Service's status (its part),
// applied to the cached copy it was decided from.
type Write struct {
	Key string
	// Want is the whole wanted object, at the resourceVersion it was computed from. It never
	// changes once submitted: Submit compares new writes with it while a lane is sending it, so
	// the lane sends a copy (the answer is decoded into what was sent).
	Want  *corev1.Service
	apply func(*corev1.Service) // sets the part's fields on a copy of the Service
	// addresses says whether the part sets the ingress; ips are those it sets. Only those can
	// reach the stored status through its write: a part that leaves the ingress alone sends
	// its copy's ingress under its copy's resourceVersion, so it lands only where that is
	// stored already.
	addresses bool
	ips       []netip.Addr
	base      *corev1.Service // the copy it was decided from
}

// written is a write of ours that landed, or whose fate is unknown (a timeout, a cut
// connection), until the cache holds a copy of the Service newer than the one it replaced.
type written struct {
	base   string       // the resourceVersion the write replaced
	ips    []netip.Addr // the addresses it lists
	landed bool         // false: it may or may not have been stored
}

// NewWrite is the write that makes cached what apply says. It touches no bookkeeping, so the
// writer builds it (a copy of the Service, apply run twice) before it takes its lock.
func NewWrite(key string, cached *corev1.Service, apply func(*corev1.Service)) *Write {
	want := cached.DeepCopy()
	apply(want)
	job := &Write{Key: key, Want: want, apply: apply, base: cached}
	job.addresses, job.ips = setsIngress(apply)
	return job
}

// Submit puts job on its way and returns it, or returns nil when it is redundant: the same
// write is already on its way, the cache already shows it, or a write of ours landed that the
// cache has not seen yet (its watch event brings the Service back). A returned write is on its
// way until Done.
func (w *Writes) Submit(job *Write) *Write {
	for _, wr := range w.unseen(job.Key, job.base) {
		if wr.landed {
			return nil
		}
	}
	if js := w.inflight[job.Key]; len(js) > 0 && sameWrite(js[len(js)-1].Want, job.Want) {
		return nil
	}
	if sameWrite(job.base, job.Want) {
		return nil
	}
	w.inflight[job.Key] = append(w.inflight[job.Key], job)
	return job
}

// setsIngress reports whether apply sets the ingress, and to what: it is run on a Service whose
// ingress is a marker no write sets.
func setsIngress(apply func(*corev1.Service)) (bool, []netip.Addr) {
	const marker = "unset.portico.invalid"
	probe := &corev1.Service{}
	probe.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: marker}}
	apply(probe)
	if in := probe.Status.LoadBalancer.Ingress; len(in) == 1 && in[0].Hostname == marker {
		return false, nil
	}
	return true, porticov1.IngressAddrs(probe)
}

// Done forgets a write: it is no longer on its way (it was dropped, or its request ended).
func (w *Writes) Done(job *Write) {
	if js := slices.DeleteFunc(w.inflight[job.Key], func(j *Write) bool { return j == job }); len(js) > 0 {
		w.inflight[job.Key] = js
	} else {
		delete(w.inflight, job.Key)
	}
}

// Finished records how a write's request ended (after Done): base is the resourceVersion the
// request replaced ("" when nothing was sent), err its error. A write that landed, or may
// have, is remembered until the cache shows a newer copy. It returns how long to wait before
// the Service is decided again after a failure.
func (w *Writes) Finished(job *Write, base string, err error) (backoff time.Duration) {
	if base != "" && (err == nil || mayHaveLanded(err)) {
		w.written[job.Key] = append(w.written[job.Key], written{base: base, ips: job.ips, landed: err == nil})
	}
	return w.Backoff(job.Key, err)
}

// Backoff records how the write of key (any object's) ended and returns how long to wait
// before it is decided again after a failure: longer after each consecutive one.
func (w *Writes) Backoff(key string, err error) time.Duration {
	if err == nil {
		delete(w.failures, key)
		return 0
	}
	w.failures[key]++
	return min(10*time.Millisecond<<min(w.failures[key], 10), 10*time.Second)
}

// unseen returns our writes to the Service that cached does not show, and forgets those it
// does.
func (w *Writes) unseen(key string, cached *corev1.Service) []written {
	ws := slices.DeleteFunc(w.written[key], func(wr written) bool { return newer(cached.ResourceVersion, wr.base) })
	if len(ws) == 0 {
		delete(w.written, key)
		return nil
	}
	w.written[key] = ws
	return ws
}

// MayList returns the addresses our writes may have put in the Service's stored status that
// cached does not show: those of writes not done yet, and of writes the cache has not seen.
// What a Service gives up stays held while any of them lists it (Book.holdLeaving): another
// Service's write could otherwise land first, and both would list the address.
func (w *Writes) MayList(key string, cached *corev1.Service) []netip.Addr {
	var ips []netip.Addr
	for _, j := range w.inflight[key] {
		ips = append(ips, j.ips...)
	}
	for _, wr := range w.unseen(key, cached) {
		ips = append(ips, wr.ips...)
	}
	return ips
}

// Forget drops what is remembered about a deleted Service.
func (w *Writes) Forget(key string) {
	delete(w.written, key)
	delete(w.failures, key)
}

// errDecideAgain is why a write was dropped after a conflict: what is stored now is not what
// it was decided from.
var errDecideAgain = errors.New("deciding again")

// Rebase is what a write that met a conflict (another write got there first) sends instead,
// given the Service as stored now: its part applied to that (nil: the fields are right
// already), or errDecideAgain. A part that sets addresses is dropped when the stored addresses
// are not those it was decided from: the other write may be the next leader's, which gave them
// out anew, and re-applying an old decision over it puts one address on two Services. It is
// dropped too when the Service's request changed (spec, labels, annotations): an address given
// for the old one (shared under a sharing key since edited away) may be another's by now.
// Conditions alone may be rebased. It reads only the write (and the switches): no lock needed.
func (w *Writes) Rebase(job *Write, cur *corev1.Service) (*corev1.Service, error) {
	if cur.UID != job.Want.UID {
		return nil, fmt.Errorf("service %s was recreated: %w", job.Key, errDecideAgain)
	}
	if job.addresses && !w.bugs.OldConflictRule {
		if !slices.Equal(porticov1.IngressAddrs(cur), porticov1.IngressAddrs(job.base)) {
			return nil, fmt.Errorf("service %s lists other addresses than when its write was decided: %w", job.Key, errDecideAgain)
		}
		if !sameRequest(cur, job.base) {
			return nil, fmt.Errorf("service %s was edited since its write was decided: %w", job.Key, errDecideAgain)
		}
	}
	sent := cur.DeepCopy()
	job.apply(sent)
	if sameWrite(cur, sent) {
		return nil, nil
	}
	return sent, nil
}

// sameRequest reports whether two copies of a Service ask for the same: spec, labels and
// annotations but the one the allocation writes.
func sameRequest(a, b *corev1.Service) bool {
	ann := func(s *corev1.Service) map[string]string {
		m := maps.Clone(s.Annotations)
		delete(m, porticov1.AnnotationAllocatedFromPool)
		delete(m, porticov1.AnnotationAllocatedSharingKey)
		return m
	}
	return equality.Semantic.DeepEqual(a.Spec, b.Spec) && equality.Semantic.DeepEqual(a.Labels, b.Labels) &&
		equality.Semantic.DeepEqual(ann(a), ann(b))
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

// ErrNotSent marks a write refused before its request left (the controller's lease fence):
// it did not land.
var ErrNotSent = errors.New("not sent")

// mayHaveLanded reports whether a failed write may still have been stored: the apiserver
// refused it if it answered with an error status, unless that is a timeout; a cut connection
// leaves its fate unknown; a write never sent (ErrNotSent) did not land.
func mayHaveLanded(err error) bool {
	if errors.Is(err, ErrNotSent) {
		return false
	}
	var status apierrors.APIStatus
	return !errors.As(err, &status) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
}

// sameWrite reports whether two copies of a Service carry the same status write: the status
// and the annotations, which a status update stores too (kube-apiserver 1.37).
func sameWrite(a, b *corev1.Service) bool {
	return equality.Semantic.DeepEqual(a.Status, b.Status) && equality.Semantic.DeepEqual(a.Annotations, b.Annotations)
}
