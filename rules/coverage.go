package rules

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// Pool is an IPAddressPool with its parsed address ranges.
type Pool struct {
	*v1alpha1.IPAddressPool
	Ranges []Range
}

// ParsePools parses every pool's addresses, and says what is wrong with each invalid entry
// ("IPAddressPool NAME: ..."); a pool keeps its valid entries.
func ParsePools(in []v1alpha1.IPAddressPool) (pools []Pool, problems []string) {
	pools = make([]Pool, 0, len(in))
	for i := range in {
		ranges, errs := PoolRanges(&in[i])
		for _, err := range errs {
			problems = append(problems, "IPAddressPool "+in[i].Name+": "+err.Error())
		}
		pools = append(pools, Pool{IPAddressPool: &in[i], Ranges: ranges})
	}
	return pools, problems
}

// PoolOf finds the pool an address of svc came from: the controller's annotation when it
// names a pool holding the address (it names one pool, or two, "v4pool,v6pool", when a
// dual-stack Service took each family from another), otherwise the first pool (by name) that
// contains it.
func PoolOf(svc *corev1.Service, ip netip.Addr, pools []Pool) (*v1alpha1.IPAddressPool, bool) {
	named := v1alpha1.AllocatedFromPools(svc)
	var found *v1alpha1.IPAddressPool
	for _, p := range pools {
		if !slices.ContainsFunc(p.Ranges, func(r Range) bool { return r.Contains(ip) }) {
			continue
		}
		if slices.Contains(named, p.Name) {
			return p.IPAddressPool, true
		}
		if found == nil || p.Name < found.Name {
			found = p.IPAddressPool
		}
	}
	return found, found != nil
}

// Selectors holds the label selectors parsed while one pass over the cluster's objects is
// made: each advertisement's selectors would otherwise be parsed again for every address.
// Keys point into objects that do not change during the pass. A nil Selectors parses every
// time.
type Selectors map[*metav1.LabelSelector]labels.Selector

// MatchesAny reports whether any of sels matches set; an invalid selector matches nothing
// (the object's own status names it).
func (c Selectors) MatchesAny(sels []metav1.LabelSelector, set map[string]string) bool {
	for i := range sels {
		if c.Matches(&sels[i], set) {
			return true
		}
	}
	return false
}

// Matches reports whether sel matches set; an invalid selector matches nothing.
func (c Selectors) Matches(sel *metav1.LabelSelector, set map[string]string) bool {
	s, ok := c[sel]
	if !ok {
		var err error
		if s, err = metav1.LabelSelectorAsSelector(sel); err != nil {
			s = labels.Nothing()
		}
		if c != nil {
			c[sel] = s
		}
	}
	return s.Matches(labels.Set(set))
}

// MatchesAny is Selectors.MatchesAny without a cache.
func MatchesAny(sels []metav1.LabelSelector, set map[string]string) bool {
	return Selectors(nil).MatchesAny(sels, set)
}

// Covers reports whether an advertisement (L2 or BGP) with these pool names, pool selectors
// and Service selectors covers svc's address from pool. Empty pool lists select every pool.
func (c Selectors) Covers(names []v1alpha1.Name, poolSels, svcSels []metav1.LabelSelector, pool *v1alpha1.IPAddressPool, svc *corev1.Service) bool {
	poolOK := len(names) == 0 && len(poolSels) == 0 ||
		slices.Contains(names, v1alpha1.Name(pool.Name)) || c.MatchesAny(poolSels, pool.Labels)
	return poolOK && (len(svcSels) == 0 || c.MatchesAny(svcSels, svc.Labels))
}

// L2AdvertisementsFor returns the L2Advertisements that announce the pool's addresses for svc.
func (c Selectors) L2AdvertisementsFor(ads []v1alpha1.L2Advertisement, pool *v1alpha1.IPAddressPool, svc *corev1.Service) []*v1alpha1.L2Advertisement {
	var out []*v1alpha1.L2Advertisement
	for i := range ads {
		s := &ads[i].Spec
		if c.Covers(s.IPAddressPools, s.IPAddressPoolSelectors, s.ServiceSelectors, pool, svc) {
			out = append(out, &ads[i])
		}
	}
	return out
}

// BGPAdvertised reports whether a BGPAdvertisement covers svc's addresses from pool.
func (c Selectors) BGPAdvertised(ads []v1alpha1.BGPAdvertisement, pool *v1alpha1.IPAddressPool, svc *corev1.Service) bool {
	for i := range ads { // by index: the cache's keys point into ads
		s := &ads[i].Spec
		if c.Covers(s.IPAddressPools, s.IPAddressPoolSelectors, s.ServiceSelectors, pool, svc) {
			return true
		}
	}
	return false
}
