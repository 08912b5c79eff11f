package decide

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
	"github.com/portico-lb/portico/controller/internal/seeded"
	"github.com/portico-lb/portico/rules"
)

// Book is the allocator, what it was fed and what the decisions made with it. It is not safe
// for concurrent use: the controller holds it behind a lock.
type Book struct {
	alloc    *allocator.Allocator
	loaded   bool
	poolGen  map[string]int64     // pool → generation the allocator was given
	waiting  map[string]waiter    // Services without the address they want
	orphanOf map[string]string    // Service → pool it got an address from that no longer holds it
	uid      map[string]types.UID // Service → the object its addresses were decided for
	// fence is, after a rebuild from the apiserver, the resourceVersion it read of each Service
	// it restored addresses for, until the cache shows that version or a later one (Behind).
	fence map[string]string
	bugs  seeded.Bugs
}

// Seed switches on deliberately broken rules: for the simulator's positive controls only.
func (b *Book) Seed(bugs seeded.Bugs) { b.bugs = bugs }

// allocateSeeded is the allocator's Allocate, but for the broken rules Seed switched on.
func (b *Book) allocateSeeded(req allocator.Request) (allocator.Assignment, error) {
	if b.bugs.Repack {
		b.alloc.Release(req.Service)
	}
	asg, err := b.alloc.Allocate(req)
	if err != nil && b.bugs.RequestedOutsidePools && len(req.IPs) > 0 {
		return b.alloc.Restore(req, req.IPs)
	}
	return asg, err
}

// NewBook is an empty book: no pool, no Service, not yet rebuilt.
func NewBook() *Book {
	return &Book{alloc: allocator.New(), waiting: map[string]waiter{}, orphanOf: map[string]string{}, uid: map[string]types.UID{}}
}

// waiter is a Service waiting for an address.
type waiter struct {
	since time.Time // the Service's creation: the oldest waiter is served first
	pools []string  // pools it could get one from
	// asked is what its request is built from (nil: not known), so the backlog can be served
	// again against new pools (ServeBacklog).
	asked *Asked
}

// WaitingServices lists the Services waiting for an address, oldest first (OlderFirst).
func (b *Book) WaitingServices() []string {
	names := slices.Collect(maps.Keys(b.waiting))
	slices.SortFunc(names, func(x, y string) int {
		return OlderFirst(b.waiting[x].since, x, b.waiting[y].since, y)
	})
	return names
}

// OlderFirst is the order a backlog of Services is served in, and the order kubectl portico
// plan predicts: by creationTimestamp (whole seconds), then by namespace/name. It makes the
// result independent of the order the controller happens to see them in.
func OlderFirst(createdX time.Time, keyX string, createdY time.Time, keyY string) int {
	return cmp.Or(createdX.Compare(createdY), cmp.Compare(keyX, keyY))
}

// SetPools gives the allocator the pools if their generations changed, and returns whether
// they did and the Services whose pool changed as a result.
func (b *Book) SetPools(pools []porticov1.IPAddressPool) (changed bool, moved []string) {
	if b.sameGenerations(pools) {
		return false, nil
	}
	gen := make(map[string]int64, len(pools))
	for i := range pools {
		gen[pools[i].Name] = pools[i].Generation
	}
	b.poolGen = gen
	aps := make([]allocator.Pool, 0, len(pools))
	for i := range pools {
		aps = append(aps, AllocatorPool(&pools[i]))
	}
	return true, slices.DeleteFunc(b.alloc.SetPools(aps), isLeavingKey)
}

// sameGenerations reports whether pools are those the allocator was given, at the same
// generations: every reconcile asks, so it allocates nothing.
func (b *Book) sameGenerations(pools []porticov1.IPAddressPool) bool {
	if b.poolGen == nil || len(pools) != len(b.poolGen) {
		return false
	}
	for i := range pools {
		if g, ok := b.poolGen[pools[i].Name]; !ok || g != pools[i].Generation {
			return false
		}
	}
	return true
}

// PoolNames names the pools the allocator was last given.
func (b *Book) PoolNames() []string { return slices.Sorted(maps.Keys(b.poolGen)) }

// AllocatorPool is the allocator's view of a pool: its valid entries (the invalid ones are
// named on the pool's Ready condition).
func AllocatorPool(p *porticov1.IPAddressPool) allocator.Pool {
	ranges, _ := rules.PoolRanges(p)
	ap := allocator.Pool{
		Name:          p.Name,
		Ranges:        ranges,
		AutoAssign:    p.Spec.AutoAssign == nil || *p.Spec.AutoAssign,
		AvoidBuggyIPs: p.Spec.AvoidBuggyIPs,
		HoldFor:       p.HoldFor().Round(time.Second), // with goneAt in whole seconds: a hold's end is as its status stores it

		SharingAcrossNamespaces: p.Spec.AllowSharingAcrossNamespaces,
	}
	if sa := p.Spec.ServiceAllocation; sa != nil {
		ap.HasServiceAllocation = true
		ap.Priority = sa.Priority
	}
	return ap
}

// SetInUse tells the allocator the addresses foreign hosts answer for, each with the MAC that
// answers: it hands none of them out. It says whether they changed.
func (b *Book) SetInUse(found map[netip.Addr]string) (changed bool) {
	changed = !maps.Equal(found, b.alloc.Found())
	b.alloc.SetInUse(found)
	return changed
}

// PoolsContaining names every pool that contains ip.
func (b *Book) PoolsContaining(ip netip.Addr) []string { return b.alloc.PoolsContaining(ip) }

// poolsContaining names every pool that contains one of ips: each counts them, so each
// one's status changes when they are taken or freed.
func (b *Book) poolsContaining(ips []netip.Addr) []string {
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

// Stored is what a rebuild keeps of a Service whose stored status lists addresses; its key
// (namespace/name) is its Request's Service.
type Stored struct {
	Created         time.Time
	UID             types.UID
	ResourceVersion string
	Request         allocator.Request
	IPs             []netip.Addr
	// SharedUnder is the sharing key the controller wrote beside the addresses
	// (AnnotationAllocatedSharingKey).
	SharedUnder string
}

// StoredOf is what a rebuild keeps of svc, whose request is req.
func StoredOf(svc *corev1.Service, req allocator.Request) Stored {
	return Stored{Created: svc.CreationTimestamp.Time, UID: svc.UID, ResourceVersion: svc.ResourceVersion, Request: req, IPs: porticov1.IngressAddrs(svc),
		SharedUnder: svc.Annotations[porticov1.AnnotationAllocatedSharingKey]}
}

// Refused is a stored address a rebuild did not restore, and why.
type Refused struct {
	Service string
	Reason  error
}

// Loaded reports whether the book was rebuilt from the stored status (Rebuild).
func (b *Book) Loaded() bool { return b.loaded }

// Rebuild restores what the Services' stored status lists, once, before anything new is
// allocated: addresses never move across restarts. The pools are set first (SetPools). With
// fence, each restored Service is fenced at the resourceVersion read (Behind).
func (b *Book) Rebuild(stored []Stored, fence bool) []Refused {
	// Oldest first: if two Services claim one address, the older keeps it.
	stored = slices.Clone(stored)
	slices.SortFunc(stored, func(a, b Stored) int {
		return OlderFirst(a.Created, a.Request.Service, b.Created, b.Request.Service)
	})
	// Services whose status still meets their spec go first: one edited after its status was
	// written (moved to another pool, say) may still list an address that was freed and given
	// to another Service, whose write landed first (status writes go out in parallel) before
	// the old leader died. The edited one is moving anyway; the other must keep its address.
	// So does one whose sharing key changed since (keyKept): the others listing its address did
	// not.
	keyKept := keyKeptAmong(stored)
	// A changed key goes last: a Service moving to another pool may keep sharing until it
	// moves; one under another key may not share at all.
	var fit, moving, rekeyed []Stored
	for _, s := range stored {
		switch {
		case !keyKept(s):
			rekeyed = append(rekeyed, s)
		case b.alloc.Satisfies(s.Request, s.IPs):
			fit = append(fit, s)
		default:
			moving = append(moving, s)
		}
	}
	if fence {
		b.fence = map[string]string{}
	}
	var refused []Refused
	for _, s := range slices.Concat(fit, moving, rekeyed) {
		if _, err := b.alloc.Restore(s.Request, s.IPs); err != nil {
			refused = append(refused, Refused{s.Request.Service, err})
			continue
		}
		b.uid[s.Request.Service] = s.UID
		if fence {
			b.fence[s.Request.Service] = s.ResourceVersion
		}
	}
	b.loaded = true
	return refused
}

// keyKeptAmong says of a stored Service whether it still shares its addresses under the key
// written beside them, by every Service listing them.
func keyKeptAmong(stored []Stored) func(Stored) bool {
	recorded := map[netip.Addr][]string{} // address → the sharing keys written beside it
	for _, s := range stored {
		for _, ip := range s.IPs {
			if s.SharedUnder != "" {
				recorded[ip] = append(recorded[ip], s.SharedUnder)
			}
		}
	}
	return func(s Stored) bool {
		if s.SharedUnder != s.Request.SharingKey {
			return false
		}
		for _, ip := range s.IPs {
			// Its own key may not have been written since Services joined under another.
			if keys := recorded[ip]; len(keys) > 0 && !slices.Contains(keys, s.Request.SharingKey) {
				return false
			}
		}
		return true
	}
}

// Behind reports whether the cache's copy of a Service (nil: not in the cache) is older than
// what the rebuild read of it: a decision from that copy could give away an address its stored
// status lists. The cache catches up (a new leader's informers may have been cut off from an
// apiserver that restarted, and resume only after their backoff), and its event brings the
// Service back. Once the cache shows that version or a later one, the Service is no longer
// fenced. A fenced Service missing from the cache may be gone: the caller asks the apiserver,
// and Unfences it if so.
func (b *Book) Behind(key string, cached *corev1.Service) bool {
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

// replaced reports whether key's addresses were decided for another object than uid (one
// deleted, and created again under its name). An unknown uid cannot say: not replaced.
func (b *Book) replaced(key string, uid types.UID) bool {
	old, ok := b.uid[key]
	return ok && old != "" && uid != "" && old != uid
}

// Unfence decides the Service from the cache again: it is gone from the apiserver.
func (b *Book) Unfence(key string) { delete(b.fence, key) }

// Allocator is the book's allocator, for a what-if on a book of its own (PreviewPools):
// decisions step the book through Service, which keeps the rest of it in step.
func (b *Book) Allocator() *allocator.Allocator { return b.alloc }
