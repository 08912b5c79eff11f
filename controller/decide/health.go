package decide

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

// HealthFacts is what a Service's health conditions are folded from.
type HealthFacts struct {
	rules.Cluster                     // the nodes, the Service's EndpointSlices, the advertisements, BGPPeers and pools, the live speakers' subnets
	Speakers      []porticov1.Speaker // those of live speakers (rules.CountedSpeakers)
	// Stale are the nodes whose Speaker does not count, their speaker's Lease having run out, and
	// LastRenewed the latest renewal of any speaker's Lease (zero for none): what Announced says
	// when no speaker is live.
	Stale       []string
	LastRenewed time.Time
	// Pods are the labels of the namespace's pods, read only when NeedsPodLabels says so (the
	// hint in EndpointsReady).
	Pods []map[string]string
}

// NeedsPodLabels reports whether the Service's EndpointsReady reads its namespace's pods'
// labels: it has a selector and its slices list no endpoint.
func NeedsPodLabels(svc *corev1.Service, slices []discoveryv1.EndpointSlice) bool {
	return len(svc.Spec.Selector) > 0 && countEndpoints(slices).total == 0
}

// HealthConditionTypes are the condition types the health conditions are.
var HealthConditionTypes = []string{porticov1.ConditionEndpointsReady, porticov1.ConditionAnnounced, porticov1.ConditionReachable}

// healthConditions are the Service's health conditions, each from its owner.
func healthConditions(svc *corev1.Service, f HealthFacts) []metav1.Condition {
	return []metav1.Condition{endpointsCondition(svc, f.EndpointSlices, f.Pods), announcedCondition(svc, f), reachableCondition(svc, f.Speakers)}
}

// Health is the health reconciler's decision for a Service of ours that has its allocation:
// its health conditions when any changed, and what the news desk, which tells a stored problem
// only once it has lasted (on the Service, or on its pool when many share it), tells at now.
func Health(svc *corev1.Service, f HealthFacts, desk *NewsDesk, now time.Time) (rd Ready, again time.Duration) {
	// Problems many Services share are told on their (first) pool.
	news := desk.Review(svc.Namespace+"/"+svc.Name, firstPool(svc), svc.Status.Conditions, HealthConditionTypes, now)
	rd.Tell, rd.PoolTell, rd.Pools, again = news.Tell, news.Pool, news.Pools, news.Again
	conds := healthConditions(svc, f)
	if slices.ContainsFunc(conds, func(c metav1.Condition) bool { return conditionChanged(svc, c) }) {
		rd.Conditions = conds
	}
	return rd, again
}

// firstPool is the pool a Service's (first) address came from, "" if none is written.
func firstPool(svc *corev1.Service) string {
	if pools := porticov1.AllocatedFromPools(svc); len(pools) > 0 {
		return pools[0]
	}
	return ""
}
