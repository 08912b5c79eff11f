package controller

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
	"github.com/portico-lb/portico/controller/decide"
	"github.com/portico-lb/portico/internal/locked"
	"github.com/portico-lb/portico/rules"
)

// state is what the Service and pool reconcilers share: the book, behind its lock, and the
// channels that bring Services and pools back to them.
type state struct {
	reader client.Reader
	// live, when set, reads from the apiserver, not the cache: see load.
	live  client.Reader
	class string
	// ignoreClassless leaves Services without a loadBalancerClass alone (rules.Handles).
	ignoreClassless bool

	book *locked.Value[decide.Book] // reached through withLock or book.Do only

	retry chan event.GenericEvent // Services to reconcile again
	dirty chan event.GenericEvent // pools whose status may have changed
}

func newState(reader client.Reader, class string) *state {
	return &state{
		reader: reader,
		class:  class,
		book:   locked.New(*decide.NewBook()),
		retry:  make(chan event.GenericEvent, 4096),
		dirty:  make(chan event.GenericEvent, 1024),
	}
}

// waiting lists the waiting Services, oldest first.
func (s *state) waiting() []string {
	var names []string
	s.book.Do(func(b *decide.Book) { names = b.WaitingServices() })
	return names
}

// ours reports whether Portico handles the Service. A Terminating one (deleted, held by a
// finalizer) still is: kube-proxy and the speakers go on using its addresses until the object
// is gone, so nobody else may have them meanwhile.
func (s *state) ours(svc *corev1.Service) bool {
	return rules.Handles(svc, s.class, !s.ignoreClassless)
}

// load rebuilds the book's allocator from the pools and from every Service's status, once,
// before anything new is allocated: addresses never move across restarts.
func (s *state) load(ctx context.Context, b *decide.Book) error {
	if b.Loaded() {
		return nil
	}
	if _, _, err := s.syncPools(ctx, b); err != nil {
		return err
	}
	// A new leader rebuilds from the apiserver, not from its cache: the cache may not yet have
	// seen the old leader's last status writes (an address moved to another Service just before
	// it died), and a rebuild without them gives those addresses away again.
	services, paged := s.reader, false
	if s.live != nil {
		services, paged = s.live, true
	}
	// The pools' status holds the holds (spec.addressHold) the old leader made: read from
	// the apiserver too.
	var pools porticov1.IPAddressPoolList
	if err := services.List(ctx, &pools); err != nil {
		return err
	}
	// What foreign hosts answer for is known before anything is allocated: the pool
	// reconciler, which keeps it up to date, may run after the first Service's.
	var speakers porticov1.SpeakerList
	if err := s.reader.List(ctx, &speakers, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	b.SetInUse(findingAddrs(judgeProbes(speakers.Items, pools.Items, time.Now()).inUse))
	// Only what the rebuild needs is kept of each Service, not the Service.
	var stored []decide.Stored
	err := eachService(ctx, services, paged, func(svc *corev1.Service) {
		ips := porticov1.IngressAddrs(svc)
		if !s.ours(svc) || len(ips) == 0 {
			return
		}
		req, _ := s.requestFrom(ctx, svc, pools.Items) // a bad annotation does not stop the Service keeping its address
		stored = append(stored, decide.StoredOf(svc, req))
	})
	if err != nil {
		return err
	}
	log := logf.FromContext(ctx)
	refused := b.Rebuild(stored, paged)
	for _, r := range refused {
		log.Info("not restoring an address from status", "service", r.Service, "reason", r.Reason.Error())
	}
	dropped := b.RestoreHolds(pools.Items)
	b.ExpireHolds(time.Now()) // those that ended while no controller ran; every pool's status is written at start
	for _, x := range dropped {
		log.Info("not restoring a hold from a pool's status: the pool no longer holds that address, or a Service does", "pool", x.Pool, "address", x.IP, "service", x.Service)
	}
	log.Info("state rebuilt from Service status", "services", len(stored)-len(refused), "holds", holdCount(pools.Items)-len(dropped))
	return nil
}

// eachService calls fn with every Service r lists, a page of servicesPage at a time when
// paged (the apiserver's pages are one consistent list): a rebuild at 20 000 Services would
// otherwise hold them all, and the response they came in, at once.
func eachService(ctx context.Context, r client.Reader, paged bool, fn func(*corev1.Service)) error {
	for next := ""; ; {
		var page corev1.ServiceList
		var opts []client.ListOption
		if paged {
			opts = []client.ListOption{client.Limit(servicesPage), client.Continue(next)}
		}
		if err := r.List(ctx, &page, opts...); err != nil {
			return err
		}
		for i := range page.Items {
			fn(&page.Items[i])
		}
		if next = page.Continue; !paged || next == "" {
			return nil
		}
	}
}

const servicesPage = 500

// withLock runs fn holding the book's lock, with the allocator loaded and fed the pools in the
// cache. The lock is released however fn ends (locked.Value.Do). When the pools changed, it
// then retries the waiting Services and those whose pool changed, and refreshes every pool's
// status.
func (s *state) withLock(ctx context.Context, fn func(*decide.Book)) error {
	var retry, pools []string
	var err error
	s.book.Do(func(b *decide.Book) {
		if err = s.load(ctx, b); err != nil {
			return
		}
		var changed bool
		var moved []string
		if changed, moved, err = s.syncPools(ctx, b); err != nil {
			return
		}
		fn(b)
		if changed {
			retry, pools = append(moved, b.WaitingServices()...), b.PoolNames()
		}
	})
	if err != nil {
		return err
	}
	s.retryServices(retry)
	s.poolsDirty(pools)
	return nil
}

// syncPools gives the book's allocator the pools in the cache if they changed, and returns the
// Services whose pool changed as a result.
func (s *state) syncPools(ctx context.Context, b *decide.Book) (changed bool, moved []string, err error) {
	var list porticov1.IPAddressPoolList
	if err := s.reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil { // read only
		return false, nil, err
	}
	changed, moved = b.SetPools(list.Items)
	return changed, moved, nil
}

// request builds the allocator request for a Service, evaluating pools' serviceAllocation.
func (s *state) request(ctx context.Context, svc *corev1.Service) (allocator.Request, error) {
	var pools porticov1.IPAddressPoolList
	if err := s.reader.List(ctx, &pools, client.UnsafeDisableDeepCopy); err != nil { // read only
		return allocator.Request{}, err
	}
	return s.requestFrom(ctx, svc, pools.Items)
}

// requestFrom builds the allocator request for a Service against the given pools, reading its
// namespace's labels when a pool selects by them.
func (s *state) requestFrom(ctx context.Context, svc *corev1.Service, pools []porticov1.IPAddressPool) (allocator.Request, error) {
	var nsLabels map[string]string
	if decide.NeedsNamespaceLabels(pools) {
		var ns corev1.Namespace
		if err := s.reader.Get(ctx, client.ObjectKey{Name: svc.Namespace}, &ns); err == nil {
			nsLabels = ns.Labels
		}
	}
	return decide.Request(svc, pools, nsLabels)
}

// retryServices asks for the named Services to be reconciled again. Never call it inside
// withLock: a full channel would wait for a reconcile that waits for the lock.
func (s *state) retryServices(names []string) {
	for _, n := range names {
		ns, name, _ := strings.Cut(n, "/")
		svc := &corev1.Service{}
		svc.Namespace, svc.Name = ns, name
		s.retry <- event.GenericEvent{Object: svc}
	}
}

// poolsDirty asks for the named pools' status to be written again. Not inside withLock either.
func (s *state) poolsDirty(names []string) {
	for _, n := range names {
		p := &porticov1.IPAddressPool{}
		p.Name = n
		s.dirty <- event.GenericEvent{Object: p}
	}
}

// get reads an object that may be gone: found is false, and err nil, when it is.
func get(ctx context.Context, c client.Reader, key client.ObjectKey, obj client.Object) (found bool, err error) {
	err = c.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// holdCount counts the holds the pools' status lists.
func holdCount(pools []porticov1.IPAddressPool) int {
	n := 0
	for i := range pools {
		n += len(pools[i].Status.Holds)
	}
	return n
}
