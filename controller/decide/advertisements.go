package decide

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

// References are the objects an advertisement can refer to, as the cache holds them.
type References struct {
	Pools []porticov1.IPAddressPool
	Nodes []corev1.Node
	Peers map[string]bool // BGPPeers by name; only for a BGPAdvertisement
}

// Advertised is what the two kinds of advertisement share, as Check reads it.
type Advertised struct {
	pools         []porticov1.Name
	poolSelectors []metav1.LabelSelector
	nodeSelectors []metav1.LabelSelector
	selectors     map[string][]metav1.LabelSelector // every selector, by field, to parse
	bgp           bool
	peers         []porticov1.Name
}

// L2Advertised is what an L2Advertisement names and selects.
func L2Advertised(ad *porticov1.L2Advertisement) Advertised {
	s := ad.Spec
	a := advertisedBy(s.IPAddressPools, s.IPAddressPoolSelectors, s.NodeSelectors, s.ServiceSelectors)
	for i := range s.PreferredNodeSelectors {
		a.selectors[fmt.Sprintf("preferredNodeSelectors[%d].preference", i)] = []metav1.LabelSelector{s.PreferredNodeSelectors[i].Preference}
	}
	return a
}

// BGPAdvertised is what a BGPAdvertisement names and selects.
func BGPAdvertised(ad *porticov1.BGPAdvertisement) Advertised {
	s := ad.Spec
	a := advertisedBy(s.IPAddressPools, s.IPAddressPoolSelectors, s.NodeSelectors, s.ServiceSelectors)
	a.bgp, a.peers = true, s.Peers
	return a
}

func advertisedBy(pools []porticov1.Name, poolSelectors, nodeSelectors, serviceSelectors []metav1.LabelSelector) Advertised {
	return Advertised{pools: pools, poolSelectors: poolSelectors, nodeSelectors: nodeSelectors,
		selectors: map[string][]metav1.LabelSelector{"ipAddressPoolSelectors": poolSelectors, "nodeSelectors": nodeSelectors, "serviceSelectors": serviceSelectors}}
}

// BGP says whether it is a BGPAdvertisement's: its references include the BGPPeers.
func (a Advertised) BGP() bool { return a.bgp }

// AdvertisementReady is an advertisement's Ready condition: every problem, the first one's
// reason. What an advertisement names that does not exist and what its selectors select are
// what the CRD cannot check, because the answer lies in other objects.
func AdvertisementReady(refs References, a Advertised) metav1.Condition {
	var reasons, problems []string
	add := func(reason, format string, args ...any) {
		reasons, problems = append(reasons, reason), append(problems, fmt.Sprintf(format, args...))
	}
	for _, field := range slices.Sorted(maps.Keys(a.selectors)) {
		for i := range a.selectors[field] {
			if _, err := metav1.LabelSelectorAsSelector(&a.selectors[field][i]); err != nil {
				add(porticov1.ReasonInvalidSelector, "%s[%d]: %v", field, i, err)
			}
		}
	}
	selected := checkPools(refs, a, add)
	checkPeers(refs, a, add)
	nodes := 0
	for _, n := range refs.Nodes {
		if len(a.nodeSelectors) == 0 || rules.MatchesAny(a.nodeSelectors, n.Labels) {
			nodes++
		}
	}
	if len(a.nodeSelectors) > 0 && nodes == 0 {
		add(porticov1.ReasonNoNode, "nodeSelectors match none of the %d Nodes, so no node announces", len(refs.Nodes))
	}
	if len(problems) > 0 {
		return metav1.Condition{Type: porticov1.ConditionReady, Status: metav1.ConditionFalse, Reason: reasons[0], Message: strings.Join(problems, "; ")}
	}
	return metav1.Condition{Type: porticov1.ConditionReady, Status: metav1.ConditionTrue, Reason: porticov1.ReasonValid,
		Message: fmt.Sprintf("selects IPAddressPools %s; %d of %d Nodes may announce", strings.Join(selected, ", "), nodes, len(refs.Nodes))}
}

// checkPools adds the problems of the pools an advertisement names and selects, and returns
// those it selects.
func checkPools(refs References, a Advertised, add func(reason, format string, args ...any)) (selected []string) {
	var missing []string
	for _, name := range a.pools {
		if !slices.ContainsFunc(refs.Pools, func(p porticov1.IPAddressPool) bool { return p.Name == string(name) }) {
			missing = append(missing, string(name))
		}
	}
	for _, p := range refs.Pools {
		if rules.Selectors(nil).Covers(a.pools, a.poolSelectors, nil, &p, &corev1.Service{}) {
			selected = append(selected, p.Name)
		}
	}
	if len(missing) > 0 {
		add(porticov1.ReasonUnknownPool, "ipAddressPools names IPAddressPools that do not exist: %s", strings.Join(missing, ", "))
	}
	switch {
	case len(refs.Pools) == 0:
		add(porticov1.ReasonNoPool, "no IPAddressPool exists, so there is nothing to announce")
	case len(selected) == 0 && len(missing) < len(a.pools)+len(a.poolSelectors):
		add(porticov1.ReasonNoPool, "ipAddressPools and ipAddressPoolSelectors select none of the %d IPAddressPools", len(refs.Pools))
	}
	return selected
}

// checkPeers adds the problems of the BGPPeers an advertisement names.
func checkPeers(refs References, a Advertised, add func(reason, format string, args ...any)) {
	var missing []string
	for _, name := range a.peers {
		if !refs.Peers[string(name)] {
			missing = append(missing, string(name))
		}
	}
	if len(missing) > 0 {
		add(porticov1.ReasonUnknownPeer, "peers names BGPPeers that do not exist: %s", strings.Join(missing, ", "))
	} else if a.bgp && len(refs.Peers) == 0 {
		add(porticov1.ReasonNoPeer, "no BGPPeer exists, so there is no router to advertise to")
	}
}

// ConditionWrite is an object's conditions with one condition set: Conditions, what to store
// (nil: they are right already), and Tell, the event that tells the change.
type ConditionWrite struct {
	Conditions []metav1.Condition
	Tell       []Notice
}

// SetCondition sets cond, observed at generation, among stored at now: a write when that
// changes anything, with an event when the condition's status or reason changes (not for a
// first condition that is True).
func SetCondition(stored []metav1.Condition, generation int64, cond metav1.Condition, now time.Time) ConditionWrite {
	conds := slices.Clone(stored)
	cond.ObservedGeneration, cond.LastTransitionTime = generation, metav1.NewTime(now)
	meta.SetStatusCondition(&conds, cond)
	if equality.Semantic.DeepEqual(stored, conds) {
		return ConditionWrite{}
	}
	rd := ConditionWrite{Conditions: conds}
	old := meta.FindStatusCondition(stored, cond.Type)
	if (old == nil || old.Status != cond.Status || old.Reason != cond.Reason) && (old != nil || cond.Status != metav1.ConditionTrue) {
		typ := corev1.EventTypeWarning
		if cond.Status == metav1.ConditionTrue {
			typ = corev1.EventTypeNormal
		}
		short := strings.TrimPrefix(cond.Type, "portico.dev/")
		rd.Tell = []Notice{{typ, cond.Reason, short, fmt.Sprintf("%s %s: %s", short, cond.Reason, cond.Message)}}
	}
	return rd
}
