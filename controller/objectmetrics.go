package controller

import (
	"context"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

var (
	serviceConditionsDesc = prometheus.NewDesc("portico_service_conditions",
		"LoadBalancer Services by the status and reason of each of Portico's conditions on them.",
		[]string{"condition", "status", "reason"}, nil)
	configErrorsDesc = prometheus.NewDesc("portico_config_errors",
		"Portico objects of a kind whose configuration is in error: pools not Ready or Overlapping, advertisements not Ready, Speakers listing configErrors.",
		[]string{"kind"}, nil)
	speakersDesc = prometheus.NewDesc("portico_speakers",
		"Speaker objects by whether their speaker renews its Lease (live) or not (stale: the Services' conditions do not count it).",
		[]string{"state"}, nil)
)

// configKinds are the kinds portico_config_errors always has a series for.
var configKinds = []string{"IPAddressPool", "L2Advertisement", "BGPAdvertisement", "Speaker"}

// objectsCollector exports, at scrape time, what the cached objects say: Services by
// condition, configuration problems and live speakers. It reads the cache the reconcilers
// read and keeps no state of its own; like the pool series, only the leader exports them.
type objectsCollector struct {
	services client.Reader
	cluster  *clusterKinds
	elected  <-chan struct{}
}

func (c *objectsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- serviceConditionsDesc
	ch <- configErrorsDesc
	ch <- speakersDesc
}

func (c *objectsCollector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.elected:
	default:
		return
	}
	var services corev1.ServiceList
	if err := c.services.List(context.Background(), &services, client.UnsafeDisableDeepCopy); err == nil {
		for k, n := range countServiceConditions(services.Items) {
			ch <- prometheus.MustNewConstMetric(serviceConditionsDesc, prometheus.GaugeValue, float64(n), k.condition, k.status, k.reason)
		}
	}
	speakers := storeItems[porticov1.Speaker](c.cluster.Speakers)
	errs := countConfigErrors(storeItems[porticov1.IPAddressPool](c.cluster.Pools), storeItems[porticov1.L2Advertisement](c.cluster.L2Advertisements),
		storeItems[porticov1.BGPAdvertisement](c.cluster.BGPAdvertisements), speakers)
	for _, kind := range configKinds {
		ch <- prometheus.MustNewConstMetric(configErrorsDesc, prometheus.GaugeValue, float64(errs[kind]), kind)
	}
	leases, _ := c.cluster.liveness.leaseList()
	_, stale := rules.CountedSpeakers(speakers, leases, c.cluster.clock.Now())
	ch <- prometheus.MustNewConstMetric(speakersDesc, prometheus.GaugeValue, float64(len(speakers)-len(stale)), "live")
	ch <- prometheus.MustNewConstMetric(speakersDesc, prometheus.GaugeValue, float64(len(stale)), "stale")
}

type conditionKey struct{ condition, status, reason string }

// countServiceConditions counts the Services carrying each of Portico's conditions, by type,
// status and reason.
func countServiceConditions(services []corev1.Service) map[conditionKey]int {
	out := map[conditionKey]int{}
	for i := range services {
		for _, c := range services[i].Status.Conditions {
			if strings.HasPrefix(c.Type, porticov1.GroupVersion.Group+"/") {
				out[conditionKey{c.Type, string(c.Status), c.Reason}]++
			}
		}
	}
	return out
}

// countConfigErrors counts, by kind, the objects whose configuration is in error.
func countConfigErrors(pools []porticov1.IPAddressPool, l2 []porticov1.L2Advertisement, bgp []porticov1.BGPAdvertisement,
	speakers []porticov1.Speaker) map[string]int {
	out := map[string]int{}
	for i := range pools {
		c := pools[i].Status.Conditions
		if meta.IsStatusConditionFalse(c, porticov1.ConditionReady) || meta.IsStatusConditionTrue(c, porticov1.ConditionOverlapping) {
			out["IPAddressPool"]++
		}
	}
	for i := range l2 {
		if meta.IsStatusConditionFalse(l2[i].Status.Conditions, porticov1.ConditionReady) {
			out["L2Advertisement"]++
		}
	}
	for i := range bgp {
		if meta.IsStatusConditionFalse(bgp[i].Status.Conditions, porticov1.ConditionReady) {
			out["BGPAdvertisement"]++
		}
	}
	for i := range speakers {
		if len(speakers[i].Status.ConfigErrors) > 0 {
			out["Speaker"]++
		}
	}
	return out
}

// registerObjectMetrics registers the scrape-time series: the objects' (leader only) and,
// with leader election, the lease's.
func (m *Metrics) registerObjectMetrics(services client.Reader, cluster *clusterKinds, elected <-chan struct{}, lease *LeaseFence) error {
	if err := m.reg.Register(&objectsCollector{services: services, cluster: cluster, elected: elected}); err != nil {
		return err
	}
	if lease == nil {
		return nil
	}
	return registerLeaseMetrics(m.reg, lease)
}

// registerLeaseMetrics registers the lease fence's series.
func registerLeaseMetrics(reg prometheus.Registerer, lease *LeaseFence) error {
	if err := reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "portico_lease_writes_refused_total",
		Help: "Writes this replica did not send because it could not prove it still holds the leader lease (no renewal within the renew deadline)."},
		func() float64 { return float64(lease.refused.Load()) })); err != nil {
		return err
	}
	return reg.Register(leaderTransitions{lease})
}

var leaderTransitionsDesc = prometheus.NewDesc("portico_leader_transitions",
	"The leader Lease's leaseTransitions (how often the leader changed) as this replica last read or wrote it.", nil, nil)

// leaderTransitions exports the count once the replica has read or written the Lease: before,
// a 0 would look like the count falling and rising again, which PorticoLeaderChangingOften
// takes for leader changes.
type leaderTransitions struct{ lease *LeaseFence }

func (c leaderTransitions) Describe(ch chan<- *prometheus.Desc) { ch <- leaderTransitionsDesc }

func (c leaderTransitions) Collect(ch chan<- prometheus.Metric) {
	if n := c.lease.transitions.Load(); n >= 0 {
		ch <- prometheus.MustNewConstMetric(leaderTransitionsDesc, prometheus.GaugeValue, float64(n))
	}
}
