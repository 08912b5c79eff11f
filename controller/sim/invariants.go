package sim

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
	"github.com/portico-lb/portico/rules"
)

// checkChange checks the invariants a change of one Service's stored addresses may break
// (before → after), made by the write or edit by names:
//   - one address, one sharing key: a write never puts an address on a Service while another
//     Service of another sharing key (or none), or one with a port of the same number and
//     protocol, lists it;
//   - an address a write adds was in a pool the deciding replica knew (an address it gave while
//     it was in a pool may be written after the pool shrank) or in a stored status it restored
//     (an orphan it keeps); one already held may stay outside
//     every pool (the orphan rule: a pool edit never takes an address from its Service,
//     docs/controller.md);
//   - an address changes only on a Service that was edited since it was given: once an
//     allocation write stores addresses that meet the request it was decided for (IPAllocated
//     Allocated; not an orphan kept), only a decision from a later edit may change them.
//
// A Service may share its addresses under any sharing key its spec named while it held them:
// after a user edits the key, a Service holding an address alone keeps it under the new key,
// and one that may no longer share it lets it go, but a write reaches the apiserver only later.
// decision is what a controller's write was decided from: the Service's edit, whether it is the
// allocation's write, every pool version the deciding replica's book was fed and the addresses
// it restored from stored status.
type decision struct {
	replica    string
	key        string
	rv         string // of the copy it was decided from
	edit       int
	allocation bool // the Service reconciler's write (else the health reconciler's)
	pool       bool // the pool reconciler's: no invariant reads it
	pools      []porticov1.IPAddressPool
	kept       []netip.Addr
}

// what names the write a decision makes, for the transcript.
func (d *decision) what() string {
	switch {
	case d.pool:
		return "status write for pool " + d.key
	case d.allocation:
		return "allocation write for " + d.key
	}
	return "health write for " + d.key
}

func (a *apiserver) checkChange(key string, before, after []netip.Addr, d *decision, by string) {
	svc := a.services[key]
	for _, ip := range after {
		if d == nil || slices.Contains(before, ip) {
			continue
		}
		if other, ok := a.holder(ip, key, sharingKey(svc)); ok {
			a.w.fail("%s is on %s and %s (sharing key %q; %s may share under %q), after %s", ip, key, other, sharingKey(svc), other, a.sharedAs[other], by)
			return
		}
		if other, port, ok := a.portSharer(ip, key, svc); ok {
			a.w.fail("%s is on %s and %s, both on port %s, after %s", ip, key, other, port, by)
			return
		}
		if !inPool(ip, d.pools) && !slices.Contains(d.kept, ip) {
			a.w.fail("%s on %s was in no pool the controller knew, after %s", ip, key, by)
			return
		}
	}
	if !slices.Equal(before, after) {
		if d != nil && len(before) > 0 && d.edit <= a.metAt[key] {
			a.w.fail("%s's addresses changed from %v to %v though nobody edited it (decided at edit %d; %v met edit %d), after %s",
				key, before, after, d.edit, before, a.metAt[key], by)
			return
		}
		a.metAt[key], a.sharedAs[key] = 0, []string{sharingKey(svc)}
	} else if k := sharingKey(svc); !slices.Contains(a.sharedAs[key], k) {
		a.sharedAs[key] = append(a.sharedAs[key], k)
	}
	// The addresses meet the request of the generation they were decided for: from now on only
	// a decision for a later one may change them.
	if c := meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionIPAllocated); d != nil && d.allocation &&
		c != nil && c.Reason == porticov1.ReasonAllocated && len(after) > 0 {
		a.metAt[key] = d.edit
	}
}

// holder is a Service other than key listing ip that may not share it with sharing key k.
func (a *apiserver) holder(ip netip.Addr, key, k string) (string, bool) {
	for _, other := range slices.Sorted(maps.Keys(a.services)) {
		o := a.services[other]
		if other != key && slices.Contains(porticov1.IngressAddrs(o), ip) && (k == "" || !slices.Contains(a.sharedAs[other], k)) {
			return other, true
		}
	}
	return "", false
}

// portSharer is a Service other than key listing ip with a port svc has too (protocol and
// number): two such Services cannot share an address.
func (a *apiserver) portSharer(ip netip.Addr, key string, svc *corev1.Service) (string, string, bool) {
	for _, other := range slices.Sorted(maps.Keys(a.services)) {
		o := a.services[other]
		if other == key || !slices.Contains(porticov1.IngressAddrs(o), ip) {
			continue
		}
		for _, p := range svc.Spec.Ports {
			for _, q := range o.Spec.Ports {
				if p.Protocol == q.Protocol && p.Port == q.Port {
					return other, fmt.Sprintf("%s/%d", p.Protocol, p.Port), true
				}
			}
		}
	}
	return "", "", false
}

// terminatingHolds reports whether a Terminating Service lists one of ips. A Terminating
// Service keeps its addresses under the request it had (decide's keep), while a rebuild reads
// its request from its spec: if a user edited its sharing key, a waiting Service may share its
// address after a restart and not before. The oracle, a rebuild, does not judge that case.
// A Terminating Service no longer of type LoadBalancer keeps whatever the controller's book
// gave it until it is gone (decide's keep, ours or not), which its cleared status does not
// show (and a replica that missed the type edit keeps what it last gave): the oracle cannot
// tell which addresses, so it does not judge while such a Service exists.
func (a *apiserver) terminatingHolds(ips []netip.Addr) bool {
	for _, svc := range a.services {
		if svc.DeletionTimestamp != nil && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			return true
		}
		if svc.DeletionTimestamp != nil && slices.ContainsFunc(porticov1.IngressAddrs(svc), func(ip netip.Addr) bool { return slices.Contains(ips, ip) }) {
			return true
		}
	}
	return false
}

func sharingKey(svc *corev1.Service) string {
	return svc.Annotations[porticov1.AnnotationAllowSharedIP]
}

func inPool(ip netip.Addr, pools []porticov1.IPAddressPool) bool {
	for _, p := range pools {
		ranges, _ := rules.PoolRanges(&p)
		for _, r := range ranges {
			if r.Contains(ip) {
				return true
			}
		}
	}
	return false
}

// checkQuiet is the last invariant, once the world has been quiet a while: every Service of
// ours that can get an address has one, and every one says in IPAllocated how it went. Can:
// the allocator, rebuilt from what is stored, gives it one when asked (oldest first, as the
// controller retries waiting Services).
func (w *world) checkQuiet() {
	pools := w.api.poolList()
	oracle := decide.NewBook()
	oracle.SetPools(pools)
	var stored []decide.Stored
	var without []*corev1.Service
	for _, svc := range w.api.list() {
		if !rules.Handles(svc, porticov1.DefaultLoadBalancerClass, true) {
			continue
		}
		key := svc.Namespace + "/" + svc.Name
		if meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionIPAllocated) == nil {
			w.fail("%s has no IPAllocated condition once the world is quiet", key)
			return
		}
		req, _ := decide.Request(svc, pools, w.api.namespaces[svc.Namespace])
		if ips := porticov1.IngressAddrs(svc); len(ips) > 0 {
			stored = append(stored, decide.StoredOf(svc, req))
		} else if svc.DeletionTimestamp == nil {
			without = append(without, svc)
		}
	}
	oracle.Rebuild(stored, false)
	slices.SortFunc(without, func(a, b *corev1.Service) int {
		return decide.OlderFirst(a.CreationTimestamp.Time, a.Namespace+"/"+a.Name, b.CreationTimestamp.Time, b.Namespace+"/"+b.Name)
	})
	for _, svc := range without {
		in := decide.Seen{Key: svc.Namespace + "/" + svc.Name, Svc: svc, Ours: true}
		in.Req, in.ReqErr = decide.Request(svc, pools, w.api.namespaces[svc.Namespace])
		probe := svc.DeepCopy()
		decide.Service(oracle, in).Apply(probe)
		if ips := porticov1.IngressAddrs(probe); len(ips) > 0 && !w.api.terminatingHolds(ips) {
			w.fail("%s has no address once the world is quiet, but could get %v", in.Key, ips)
			return
		}
	}
}
