package speaker

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-lb/portico/speaker/election"
)

// L2Eligibility is what the configuration says about who may answer for one address of a
// Service over L2, computed by the same code every speaker runs (MakePlan), so the
// controller's Announced condition and the speakers never disagree on the rules.
type L2Eligibility struct {
	// Pool the address came from; "" when it is in no pool.
	Pool string
	// Advertised: some L2Advertisement selects the pool and the Service.
	Advertised bool
	// Eligible nodes, sorted, and the one elected to answer.
	Eligible []string
	Owner    string
	// WhyNone names what excluded every node (election.Eligible's reason), when none is eligible.
	WhyNone string
	// Nodes is how many nodes were considered (0: the cluster has no Node objects).
	Nodes int
	// NoLocalEndpoint: nodes would be eligible but for externalTrafficPolicy Local, none of
	// them holding a ready endpoint.
	NoLocalEndpoint bool
}

// L2EligibilityOf evaluates the L2 rules for ip of svc. alive says whether a node runs a live
// speaker.
func L2EligibilityOf(w World, svc *corev1.Service, ip netip.Addr, alive func(node string) bool) L2Eligibility {
	var e L2Eligibility
	var p Plan
	w.selectors = selectorCache{}
	pool, ok := poolOf(svc, ip, parsePools(w.Pools, &p))
	if !ok {
		return e
	}
	e.Pool = pool.Name
	ads := advertisementsFor(w, pool, svc)
	if len(ads) == 0 {
		return e
	}
	e.Advertised = true
	cands, _, _ := candidates(w, ads, localReadyNodes([]corev1.Service{*svc}, w.EndpointSlices)[svc.Namespace+"/"+svc.Name], "", alive)
	e.Nodes = len(cands)
	local := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	e.Eligible, e.WhyNone = election.Eligible(cands, election.Policy{LocalOnly: local})
	if len(e.Eligible) == 0 && local {
		anyway, _ := election.Eligible(cands, election.Policy{})
		e.NoLocalEndpoint = len(anyway) > 0
	}
	e.Owner, _ = election.Owner(ip, e.Eligible)
	return e
}
