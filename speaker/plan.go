package speaker

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
	"github.com/portico-lb/portico/speaker/bgp"
	"github.com/portico-lb/portico/speaker/election"
)

// World is everything the speaker reads from the apiserver, as listed from its cache.
type World struct {
	Services       []corev1.Service
	EndpointSlices []discoveryv1.EndpointSlice
	Nodes          []corev1.Node
	Advertisements []v1alpha1.L2Advertisement
	Pools          []v1alpha1.IPAddressPool
	BGPPeers       []v1alpha1.BGPPeer
	BGPAds         []v1alpha1.BGPAdvertisement
	// Secrets holds the Secrets BGPPeers reference for their passwords (as far as the speaker
	// could read them).
	Secrets []corev1.Secret

	selectors selectorCache // filled while one plan is made
}

// Claim is one address this node answers for.
type Claim struct {
	Service string // namespace/name
	// Interfaces to answer on; nil means every suitable interface.
	Interfaces []string
}

// Plan is what this node should answer for (L2) and advertise (BGP), and what it finds wrong
// with the configuration.
type Plan struct {
	Mine     map[netip.Addr]Claim
	BGP      bgp.Desired
	Routed   map[netip.Addr]BGPClaim // addresses this node advertises over BGP
	Problems []string
}

// MakePlan decides, from the cluster's objects and the live members, which addresses node me
// answers for. Every speaker runs it on the same inputs and election.Owner makes them agree.
func MakePlan(w World, me, lbClass string, alive func(node string) bool) Plan {
	p := Plan{Mine: map[netip.Addr]Claim{}}
	w.selectors = selectorCache{}
	pools := parsePools(w.Pools, &p)
	ready := localReadyNodes(w.Services, w.EndpointSlices)
	forEachAddress(w, lbClass, pools, &p, func(svc *corev1.Service, key string, ip netip.Addr, pool *v1alpha1.IPAddressPool) {
		ads := advertisementsFor(w, pool, svc)
		if len(ads) == 0 {
			return // not announced over L2; the controller reports NoAdvertisement
		}
		cands, myIfaces, problems := candidates(w, ads, ready[key], me, alive)
		p.Problems = append(p.Problems, problems...)
		eligible, _ := election.Eligible(cands, election.Policy{
			LocalOnly: svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
		})
		if owner, ok := election.Owner(ip, eligible); ok && owner == me {
			p.Mine[ip] = Claim{Service: key, Interfaces: myIfaces}
		}
	})
	planBGP(w, me, lbClass, pools, ready, &p)
	sort.Strings(p.Problems)
	p.Problems = slices.Compact(p.Problems)
	return p
}

// forEachAddress calls fn for every address in the status of a LoadBalancer Service of our
// class, with the pool it came from; an address in no pool is a problem.
func forEachAddress(w World, lbClass string, pools []parsedPool, p *Plan, fn func(svc *corev1.Service, key string, ip netip.Addr, pool *v1alpha1.IPAddressPool)) {
	for i := range w.Services {
		svc := &w.Services[i]
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		if c := svc.Spec.LoadBalancerClass; c != nil && *c != lbClass {
			continue
		}
		key := svc.Namespace + "/" + svc.Name
		for _, ip := range v1alpha1.IngressAddrs(svc) {
			pool, ok := poolOf(svc, ip, pools)
			if !ok {
				p.Problems = append(p.Problems, fmt.Sprintf("%s: address %s is in no IPAddressPool", key, ip))
				continue
			}
			fn(svc, key, ip, pool)
		}
	}
}

type parsedPool struct {
	pool   *v1alpha1.IPAddressPool
	ranges []allocator.Range
}

func parsePools(in []v1alpha1.IPAddressPool, p *Plan) []parsedPool {
	out := make([]parsedPool, 0, len(in))
	for i := range in {
		entries := make([]string, len(in[i].Spec.Addresses))
		for j, a := range in[i].Spec.Addresses {
			entries[j] = string(a)
		}
		ranges, errs := allocator.ParsePool(entries)
		for _, err := range errs {
			p.Problems = append(p.Problems, fmt.Sprintf("IPAddressPool %s: %v", in[i].Name, err))
		}
		out = append(out, parsedPool{pool: &in[i], ranges: ranges})
	}
	return out
}

// poolOf finds the pool an address came from: the controller's annotation when it names a pool
// holding the address, otherwise the first pool (by name) that contains it.
func poolOf(svc *corev1.Service, ip netip.Addr, pools []parsedPool) (*v1alpha1.IPAddressPool, bool) {
	named := svc.Annotations[v1alpha1.AnnotationAllocatedFromPool]
	var found *v1alpha1.IPAddressPool
	for _, pp := range pools {
		if !slices.ContainsFunc(pp.ranges, func(r allocator.Range) bool { return r.Contains(ip) }) {
			continue
		}
		if pp.pool.Name == named {
			return pp.pool, true
		}
		if found == nil || pp.pool.Name < found.Name {
			found = pp.pool
		}
	}
	return found, found != nil
}

// selectorCache holds the label selectors parsed while one plan is made: each advertisement's
// selectors would otherwise be parsed again for every address. Keys point into the World's
// objects, which do not change during a plan. A nil cache parses every time.
type selectorCache map[*metav1.LabelSelector]labels.Selector

// matchesAny reports whether any of sels matches set; an invalid selector matches nothing.
func (c selectorCache) matchesAny(sels []metav1.LabelSelector, set map[string]string) bool {
	for i := range sels {
		s, ok := c[&sels[i]]
		if !ok {
			var err error
			if s, err = metav1.LabelSelectorAsSelector(&sels[i]); err != nil {
				s = labels.Nothing()
			}
			if c != nil {
				c[&sels[i]] = s
			}
		}
		if s.Matches(labels.Set(set)) {
			return true
		}
	}
	return false
}

// advertisementsFor returns the L2Advertisements that announce the pool's addresses for svc.
func advertisementsFor(w World, pool *v1alpha1.IPAddressPool, svc *corev1.Service) []*v1alpha1.L2Advertisement {
	var out []*v1alpha1.L2Advertisement
	for i := range w.Advertisements {
		s := &w.Advertisements[i].Spec
		if w.selectors.selects(s.IPAddressPools, s.IPAddressPoolSelectors, s.ServiceSelectors, pool, svc) {
			out = append(out, &w.Advertisements[i])
		}
	}
	return out
}

// selects reports whether an advertisement (L2 or BGP) with these pool names, pool selectors
// and Service selectors covers svc's address from pool. Empty pool lists select every pool.
func (c selectorCache) selects(names []v1alpha1.Name, poolSels, svcSels []metav1.LabelSelector, pool *v1alpha1.IPAddressPool, svc *corev1.Service) bool {
	poolOK := len(names) == 0 && len(poolSels) == 0 ||
		slices.Contains(names, v1alpha1.Name(pool.Name)) || c.matchesAny(poolSels, pool.Labels)
	return poolOK && (len(svcSels) == 0 || c.matchesAny(svcSels, svc.Labels))
}

// candidates describes every node for election, and the interfaces node me would answer on
// (nil: all suitable; the union over the advertisements selecting me). local holds the nodes
// with a ready endpoint of the Service.
func candidates(w World, ads []*v1alpha1.L2Advertisement, local map[string]bool, me string, alive func(string) bool) ([]election.Candidate, []string, []string) {
	var myIfaces []string
	allIfaces := false
	var problems []string
	cands := make([]election.Candidate, 0, len(w.Nodes))
	for i := range w.Nodes {
		n := &w.Nodes[i]
		c := election.Candidate{Name: n.Name, Alive: alive(n.Name), LocalEndpoint: local[n.Name]}
		_, c.Excluded = n.Labels[v1alpha1.LabelExcludeFromExternalLoadBalancers]
		for _, ad := range ads {
			if len(ad.Spec.NodeSelectors) > 0 && !w.selectors.matchesAny(ad.Spec.NodeSelectors, n.Labels) {
				continue
			}
			c.Selected = true
			if n.Name == me {
				if len(ad.Spec.Interfaces) == 0 {
					allIfaces = true
				}
				for _, ifc := range ad.Spec.Interfaces {
					myIfaces = append(myIfaces, string(ifc))
				}
			}
		}
		cands = append(cands, c)
	}
	if allIfaces {
		return cands, nil, problems
	}
	sort.Strings(myIfaces)
	return cands, slices.Compact(myIfaces), problems
}

// localReadyNodes maps each Service with externalTrafficPolicy Local (namespace/name) to the
// nodes holding a ready endpoint of it; no other Service needs to know. Built once per plan, so
// a plan costs Services + EndpointSlices, not their product.
func localReadyNodes(svcs []corev1.Service, slices []discoveryv1.EndpointSlice) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for i := range svcs {
		if svcs[i].Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
			out[svcs[i].Namespace+"/"+svcs[i].Name] = map[string]bool{}
		}
	}
	if len(out) == 0 {
		return out
	}
	for i := range slices {
		s := &slices[i]
		nodes, ok := out[s.Namespace+"/"+s.Labels[discoveryv1.LabelServiceName]]
		if !ok {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.NodeName != nil && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
				nodes[*ep.NodeName] = true
			}
		}
	}
	return out
}
