package controller

import (
	"cmp"
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
	"github.com/portico-lb/portico/internal/guarded"
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

	book *guarded.Value[book] // reached through withLock or book.Do only

	retry chan event.GenericEvent // Services to reconcile again
	dirty chan event.GenericEvent // pools whose status may have changed
}

// book is the allocator, what it was fed and what the reconcilers decided with it.
type book struct {
	alloc    *allocator.Allocator
	loaded   bool
	poolGen  map[string]int64  // pool → generation the allocator was given
	waiting  map[string]waiter // Services without the address they want
	orphanOf map[string]string // Service → pool it got an address from that no longer holds it
	// fence is, after a rebuild from the apiserver, the resourceVersion it read of each Service
	// it restored addresses for, until the cache shows that version or a later one (behind).
	fence map[string]string
}

func newBook() book {
	return book{alloc: allocator.New(), waiting: map[string]waiter{}, orphanOf: map[string]string{}}
}

func newState(reader client.Reader, class string) *state {
	return &state{
		reader: reader,
		class:  class,
		book:   guarded.New(newBook()),
		retry:  make(chan event.GenericEvent, 4096),
		dirty:  make(chan event.GenericEvent, 1024),
	}
}

// waiter is a Service waiting for an address.
type waiter struct {
	since time.Time // the Service's creation: the oldest waiter is retried first
	pools []string  // pools it could get one from
}

// waitingServices lists the waiting Services, oldest first.
func (b *book) waitingServices() []string {
	names := slices.Collect(maps.Keys(b.waiting))
	slices.SortFunc(names, func(x, y string) int {
		return cmp.Or(b.waiting[x].since.Compare(b.waiting[y].since), cmp.Compare(x, y))
	})
	return names
}

// waiting lists the waiting Services, oldest first.
func (s *state) waiting() []string {
	var names []string
	s.book.Do(func(b *book) { names = b.waitingServices() })
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
func (s *state) load(ctx context.Context, b *book) error {
	if b.loaded {
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
	var pools porticov1.IPAddressPoolList
	if err := s.reader.List(ctx, &pools); err != nil {
		return err
	}
	// What foreign hosts answer for is known before anything is allocated: the pool
	// reconciler, which keeps it up to date, may run after the first Service's.
	var speakers porticov1.SpeakerList
	if err := s.reader.List(ctx, &speakers, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	b.alloc.SetInUse(findingAddrs(judgeProbes(speakers.Items, pools.Items, time.Now()).inUse))
	// Only what the rebuild needs is kept of each Service, not the Service.
	type held struct {
		created time.Time
		key, rv string
		req     allocator.Request
		ips     []netip.Addr
	}
	var all []held
	err := eachService(ctx, services, paged, func(svc *corev1.Service) {
		ips := porticov1.IngressAddrs(svc)
		if !s.ours(svc) || len(ips) == 0 {
			return
		}
		req, _ := s.requestFrom(ctx, svc, pools.Items) // a bad annotation does not stop the Service keeping its address
		all = append(all, held{svc.CreationTimestamp.Time, svc.Namespace + "/" + svc.Name, svc.ResourceVersion, req, ips})
	})
	if err != nil {
		return err
	}
	// Oldest first: if two Services claim one address, the older keeps it.
	slices.SortFunc(all, func(a, b held) int { return cmp.Or(a.created.Compare(b.created), cmp.Compare(a.key, b.key)) })
	// Services whose status still meets their spec go first: one edited after its status was
	// written (moved to another pool, say) may still list an address that was freed and given
	// to another Service, whose write landed first (status writes go out in parallel) before
	// the old leader died. The edited one is moving anyway; the other must keep its address.
	var fit, stale []held
	for _, h := range all {
		if b.alloc.Satisfies(h.req, h.ips) {
			fit = append(fit, h)
		} else {
			stale = append(stale, h)
		}
	}
	log := logf.FromContext(ctx)
	restored := 0
	if paged {
		b.fence = map[string]string{}
	}
	for _, h := range append(fit, stale...) {
		if _, err := b.alloc.Restore(h.req, h.ips); err != nil {
			log.Info("not restoring an address from status", "service", h.req.Service, "reason", err.Error())
			continue
		}
		if paged {
			b.fence[h.key] = h.rv
		}
		restored++
	}
	log.Info("state rebuilt from Service status", "services", restored)
	b.loaded = true
	return nil
}

// behind reports whether the cache's copy of a Service (nil: not in the cache) is older than
// what the rebuild read of it: a decision from that copy could give away an address its stored
// status lists. The cache catches up (a new leader's informers may have been cut off from an
// apiserver that restarted, and resume only after their backoff), and its event brings the
// Service back. Once the cache shows that version or a later one, the Service is no longer
// fenced. A fenced Service missing from the cache may be gone: the caller asks the apiserver.
func (b *book) behind(key string, cached *corev1.Service) bool {
	rv, fenced := b.fence[key]
	if !fenced {
		return false
	}
	if cached == nil {
		return true
	}
	// Versions that do not compare (an apiserver older than 1.35) cannot say: not fenced.
	if c, err := resourceversion.CompareResourceVersion(rv, cached.ResourceVersion); err == nil && c > 0 {
		return true
	}
	delete(b.fence, key)
	return false
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
// cache. The lock is released however fn ends (guarded.Value.Do). When the pools changed, it
// then retries the waiting Services and those whose pool changed, and refreshes every pool's
// status.
func (s *state) withLock(ctx context.Context, fn func(*book)) error {
	var retry, pools []string
	var err error
	s.book.Do(func(b *book) {
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
			retry, pools = append(moved, b.waitingServices()...), slices.Collect(maps.Keys(b.poolGen))
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
func (s *state) syncPools(ctx context.Context, b *book) (changed bool, moved []string, err error) {
	var list porticov1.IPAddressPoolList
	if err := s.reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil { // read only
		return false, nil, err
	}
	gen := make(map[string]int64, len(list.Items))
	for i := range list.Items {
		gen[list.Items[i].Name] = list.Items[i].Generation
	}
	if b.poolGen != nil && maps.Equal(gen, b.poolGen) {
		return false, nil, nil
	}
	b.poolGen = gen
	pools := make([]allocator.Pool, 0, len(list.Items))
	for i := range list.Items {
		pools = append(pools, allocatorPool(&list.Items[i]))
	}
	return true, slices.DeleteFunc(b.alloc.SetPools(pools), isLeavingKey), nil
}

// allocatorPool is the allocator's view of a pool: its valid entries (the invalid ones are
// named on the pool's Ready condition).
func allocatorPool(p *porticov1.IPAddressPool) allocator.Pool {
	ranges, _ := rules.PoolRanges(p)
	ap := allocator.Pool{
		Name:          p.Name,
		Ranges:        ranges,
		AutoAssign:    p.Spec.AutoAssign == nil || *p.Spec.AutoAssign,
		AvoidBuggyIPs: p.Spec.AvoidBuggyIPs,

		SharingAcrossNamespaces: p.Spec.AllowSharingAcrossNamespaces,
	}
	if sa := p.Spec.ServiceAllocation; sa != nil {
		ap.HasServiceAllocation = true
		ap.Priority = sa.Priority
	}
	return ap
}

// request builds the allocator request for a Service, evaluating pools' serviceAllocation.
func (s *state) request(ctx context.Context, svc *corev1.Service) (allocator.Request, error) {
	var pools porticov1.IPAddressPoolList
	if err := s.reader.List(ctx, &pools, client.UnsafeDisableDeepCopy); err != nil { // read only
		return allocator.Request{}, err
	}
	return s.requestFrom(ctx, svc, pools.Items)
}

// requestFrom builds the allocator request for a Service against the given pools.
func (s *state) requestFrom(ctx context.Context, svc *corev1.Service, pools []porticov1.IPAddressPool) (allocator.Request, error) {
	var nsLabels map[string]string
	var selected []string
	for i := range pools {
		sa := pools[i].Spec.ServiceAllocation
		if sa == nil {
			continue
		}
		if nsLabels == nil && len(sa.NamespaceSelectors) > 0 {
			var ns corev1.Namespace
			if err := s.reader.Get(ctx, client.ObjectKey{Name: svc.Namespace}, &ns); err == nil {
				nsLabels = ns.Labels
			}
		}
		if selects(sa, svc, nsLabels) {
			selected = append(selected, pools[i].Name)
		}
	}
	return buildRequest(svc, selected)
}

// poolsContaining names every pool that contains one of ips: each counts them, so each
// one's status changes when they are taken or freed.
func (b *book) poolsContaining(ips []netip.Addr) []string {
	var names []string
	for _, ip := range ips {
		for _, n := range b.alloc.PoolsContaining(ip) {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names
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
