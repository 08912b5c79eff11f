package decide

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// The backlog: Services of ours that hold no address and wait for one. It is served oldest
// first (OlderFirst) whenever it may be served at all (at start, and when the pools change),
// all at once under the book's lock, so who gets which address does not depend on the order the
// Services' own decisions happen to come in (the informers' list order at start, a Service
// decided just as a pool appears). Their decisions then find the addresses held for them, keep
// them and write them.

// Asked is what a Service's request is built from (Request): the Service as seen and its
// namespace's labels.
type Asked struct {
	Svc      *corev1.Service
	NSLabels map[string]string
}

// AskedOf keeps of svc what Request reads: its name, labels, annotations, creation and spec.
func AskedOf(svc *corev1.Service, nsLabels map[string]string) *Asked {
	kept := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID,
			Labels: svc.Labels, Annotations: svc.Annotations, CreationTimestamp: svc.CreationTimestamp},
		Spec: *svc.Spec.DeepCopy(),
	}
	return &Asked{Svc: kept, NSLabels: nsLabels}
}

func (a *Asked) key() string { return a.Svc.Namespace + "/" + a.Svc.Name }

// Await puts in the backlog the Services a rebuild found holding no address (their decisions
// come later, in whatever order the informers list them).
func (b *Book) Await(pending []*Asked) {
	for _, a := range pending {
		if _, waits := b.waiting[a.key()]; waits || b.holdsAny(a.key()) {
			continue
		}
		b.waiting[a.key()] = waiter{since: a.Svc.CreationTimestamp.Time, asked: a}
	}
}

// ServeBacklog allocates, oldest first, for the waiting Services that hold nothing, against
// pools (those the book was just fed). It returns the Services it gave addresses: their own
// decisions keep and write them.
func (b *Book) ServeBacklog(pools []porticov1.IPAddressPool) (served []string) {
	for _, key := range b.WaitingServices() {
		w := b.waiting[key]
		if w.asked == nil || b.holdsAny(key) {
			continue // one that holds addresses waits for its own decision, which may move them
		}
		req, err := Request(w.asked.Svc, pools, w.asked.NSLabels)
		if err != nil {
			continue
		}
		if _, err := b.allocateSeeded(req); err != nil {
			w.pools = b.alloc.PoolsFor(req)
			b.waiting[key] = w
			continue
		}
		delete(b.waiting, key)
		b.uid[key] = w.asked.Svc.UID
		served = append(served, key)
	}
	return served
}

// holdsAny reports whether the Service holds addresses, or its status may still list some it left.
func (b *Book) holdsAny(key string) bool {
	_, held := b.alloc.Assignment(key)
	_, leaving := b.alloc.Assignment(leavingKey(key))
	return held || leaving
}
