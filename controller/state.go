package controller

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	clock Clock
	class string
	// ignoreClassless leaves Services without a loadBalancerClass alone (rules.Handles).
	ignoreClassless bool

	book *locked.Value[decide.Book] // reached through withLock or book.Do only
	// fed counts the feeds that changed the book's pools, loaded says the book was rebuilt:
	// both are written under the book's lock and read before it (withLock).
	fed    atomic.Uint64
	loaded atomic.Bool

	retry Queue // Services to reconcile again
	dirty Queue // pools whose status may have changed
}

func newState(reader client.Reader, class string) *state {
	return &state{
		reader: reader,
		clock:  wallClock{},
		class:  class,
		book:   locked.New(*decide.NewBook()),
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

// rebuildFacts is what a rebuild reads from the apiserver, gathered before the book's lock.
type rebuildFacts struct {
	pools  []porticov1.IPAddressPool // as stored: the holds the old leader made are in their status
	stored []decide.Stored           // only what the rebuild needs of each Service holding addresses
	inUse  map[netip.Addr]string     // what foreign hosts answer for, and their MACs
	paged  bool                      // read from the apiserver, not the cache: fence what was read
	// pending are the Services of ours holding no address, read from the cache (each is
	// decided once its event comes): the backlog, served oldest first before any of them is.
	pending []*decide.Asked
}

// gatherRebuild reads what the book is rebuilt from, once, before anything new is allocated:
// addresses never move across restarts.
func (s *state) gatherRebuild(ctx context.Context) (*rebuildFacts, error) {
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
		return nil, err
	}
	// What foreign hosts answer for is known before anything is allocated: the pool
	// reconciler, which keeps it up to date, may run after the first Service's.
	var speakers porticov1.SpeakerList
	if err := s.reader.List(ctx, &speakers, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	f := &rebuildFacts{pools: pools.Items, paged: paged,
		inUse: decide.JudgeProbes(speakers.Items, pools.Items, s.clock.Now()).Answerers()}
	err := eachService(ctx, services, paged, func(svc *corev1.Service) {
		if !s.ours(svc) {
			return
		}
		if len(porticov1.IngressAddrs(svc)) == 0 {
			if !paged {
				f.pending = s.appendPending(ctx, f.pending, svc)
			}
			return
		}
		// A bad annotation does not stop the Service keeping its address.
		req, _ := decide.Request(svc, pools.Items, s.namespaceLabels(ctx, svc.Namespace, pools.Items))
		f.stored = append(f.stored, decide.StoredOf(svc, req))
	})
	if err == nil && paged {
		// From the cache: each of them is decided when its event comes, gone ones too.
		err = eachService(ctx, s.reader, false, func(svc *corev1.Service) {
			if s.ours(svc) && len(porticov1.IngressAddrs(svc)) == 0 {
				f.pending = s.appendPending(ctx, f.pending, svc)
			}
		})
	}
	return f, err
}

// appendPending adds a Service holding no address to the backlog, unless it is Terminating.
func (s *state) appendPending(ctx context.Context, pending []*decide.Asked, svc *corev1.Service) []*decide.Asked {
	if svc.DeletionTimestamp != nil {
		return pending
	}
	return append(pending, decide.AskedOf(svc, s.labelsOf(ctx, svc.Namespace)))
}

// rebuild loads the book, fed its pools first, from what gatherRebuild read: pure work, under
// the book's lock. It returns what to log once the lock is released.
func rebuild(b *decide.Book, f *rebuildFacts, now time.Time) rebuilt {
	b.SetInUse(f.inUse)
	r := rebuilt{services: len(f.stored), holds: holdCount(f.pools)}
	r.refused = b.Rebuild(f.stored, f.paged)
	r.dropped = b.RestoreHolds(f.pools)
	b.ExpireHolds(now) // those that ended while no controller ran; every pool's status is written at start
	return r
}

// rebuilt is what a rebuild restored and refused, for the log.
type rebuilt struct {
	services, holds int
	refused         []decide.Refused
	dropped         []allocator.Hold
}

func (r rebuilt) log(ctx context.Context) {
	log := logf.FromContext(ctx)
	for _, x := range r.refused {
		log.Info("not restoring an address from status", "service", x.Service, "reason", x.Reason.Error())
	}
	for _, x := range r.dropped {
		log.Info("not restoring a hold from a pool's status: the pool no longer holds that address, or a Service does", "pool", x.Pool, "address", x.IP, "service", x.Service)
	}
	log.Info("state rebuilt from Service status", "services", r.services-len(r.refused), "holds", r.holds-len(r.dropped))
}

// load rebuilds b from the apiserver with no lock: a book of its own (PreviewPools). It
// returns the backlog, not served yet.
func (s *state) load(ctx context.Context, b *decide.Book) ([]*decide.Asked, error) {
	pools, err := s.cachedPools(ctx)
	if err != nil {
		return nil, err
	}
	f, err := s.gatherRebuild(ctx)
	if err != nil {
		return nil, err
	}
	b.SetPools(pools)
	rebuild(b, f, s.clock.Now()).log(ctx)
	return f.pending, nil
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

// withLock runs fn holding the book's lock, with the book loaded and fed the pools in the cache.
// Everything it reads is read before the lock: the pools, then what gather (nil: nothing)
// reads with them; the lock holds pure work only. The pools are fed in the cache's order: when
// another reconciler fed the book newer pools meanwhile, they are read again (fed counts
// the feeds that changed the book's pools). fn is given the pools the book was fed, so a
// request is built from the pools the allocator holds. The lock is released however fn ends
// (locked.Value.Do). When the pools changed, it then retries the waiting Services and those
// whose pool changed, and refreshes every pool's status.
func (s *state) withLock(ctx context.Context, gather func([]porticov1.IPAddressPool) error, fn func(*decide.Book, []porticov1.IPAddressPool)) error {
	for {
		fed := s.fed.Load()
		pools, err := s.cachedPools(ctx)
		if err != nil {
			return err
		}
		var load *rebuildFacts
		if !s.loaded.Load() {
			if load, err = s.gatherRebuild(ctx); err != nil {
				return err
			}
		}
		if gather != nil {
			if err := gather(pools); err != nil {
				return err
			}
		}
		var retry, dirty []string
		var loaded *rebuilt
		stale := false
		s.book.Do(func(b *decide.Book) {
			if stale = s.fed.Load() != fed; stale {
				return
			}
			changed, moved := b.SetPools(pools)
			if changed {
				s.fed.Add(1)
			}
			var served []string
			if !b.Loaded() { // load is set: s.loaded is stored only below
				r := rebuild(b, load, s.clock.Now())
				loaded, changed = &r, false
				s.loaded.Store(true)
				// Each of them is decided when its event comes: no retry needed.
				b.Await(load.pending)
				b.ServeBacklog(pools)
			} else if changed {
				served = b.ServeBacklog(pools)
			}
			fn(b, pools)
			if changed {
				retry, dirty = slices.Concat(moved, served, b.WaitingServices()), b.PoolNames()
			}
		})
		if loaded != nil {
			loaded.log(ctx)
		}
		if stale {
			continue
		}
		s.retryServices(retry)
		s.poolsDirty(dirty)
		return nil
	}
}

// cachedPools lists the pools in the cache, read only.
func (s *state) cachedPools(ctx context.Context) ([]porticov1.IPAddressPool, error) {
	var list porticov1.IPAddressPoolList
	if err := s.reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil { // read only
		return nil, err
	}
	return list.Items, nil
}

// namespaceLabels reads a namespace's labels from the cache when a pool selects by them
// (decide.NeedsNamespaceLabels); nil otherwise, or when it cannot be read.
func (s *state) namespaceLabels(ctx context.Context, namespace string, pools []porticov1.IPAddressPool) map[string]string {
	if !decide.NeedsNamespaceLabels(pools) {
		return nil
	}
	return s.labelsOf(ctx, namespace)
}

// labelsOf reads a namespace's labels from the cache: those a waiting Service's request is
// built with again when the pools change (a new pool may select by them). nil when it cannot
// be read.
func (s *state) labelsOf(ctx context.Context, namespace string) map[string]string {
	var ns corev1.Namespace
	if err := s.reader.Get(ctx, client.ObjectKey{Name: namespace}, &ns); err != nil {
		return nil
	}
	return ns.Labels
}

// retryServices asks for the named Services to be reconciled again. Never call it inside
// withLock: a full channel would wait for a reconcile that waits for the lock.
func (s *state) retryServices(names []string) {
	for _, n := range names {
		ns, name, _ := strings.Cut(n, "/")
		s.retry.Add(context.Background(), types.NamespacedName{Namespace: ns, Name: name})
	}
}

// poolsDirty asks for the named pools' status to be written again. Not inside withLock either.
func (s *state) poolsDirty(names []string) {
	for _, n := range names {
		s.dirty.Add(context.Background(), types.NamespacedName{Name: n})
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
