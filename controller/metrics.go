package controller

import (
	"math/big"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-lb/portico/controller/decide"
	"github.com/portico-lb/portico/internal/events"
)

// Metrics are the controller's Prometheus series, all prefixed portico_. They are registered
// where the caller says (portico-controller: controller-runtime's registry, which its metrics
// endpoint serves), so tests and several managers in one process each have their own.
type Metrics struct {
	poolAddresses       *prometheus.GaugeVec
	poolAddressesInUse  *prometheus.GaugeVec
	poolServicesWaiting *prometheus.GaugeVec
	poolForeign         *prometheus.GaugeVec
	poolHeld            *prometheus.GaugeVec
	poolAvailable       *prometheus.GaugeVec
	poolProxies         *prometheus.GaugeVec
	allocationFailures  *prometheus.CounterVec
	allocations         prometheus.Counter
	conditionChanges    *prometheus.CounterVec // the health conditions' changes on Services
	events              events.Metrics
	// reg is where Setup registers the series read at scrape time (objectmetrics.go).
	reg prometheus.Registerer
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		poolAddresses: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portico_pool_addresses",
			Help: "Addresses in a pool, by family (usable ones: avoidBuggyIPs excluded).",
		}, []string{"pool", "family"}),
		poolAddressesInUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portico_pool_addresses_in_use",
			Help: "Addresses of a pool held by Services, by family.",
		}, []string{"pool", "family"}),
		poolForeign: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portico_pool_addresses_foreign",
			Help: "Addresses of a pool a foreign host answered for when a speaker probed them (the pool's status.inUse); automatic allocation skips them.",
		}, []string{"pool"}),
		poolHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portico_pool_addresses_held",
			Help: "Addresses of a pool kept for deleted Services (the pool's addressHold, status.holds): neither in use nor available.",
		}, []string{"pool"}),
		poolAvailable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portico_pool_addresses_available",
			Help: "Addresses of a pool neither in use nor held, by family: what allocation can still hand out (those a foreign host answers for included).",
		}, []string{"pool", "family"}),
		poolProxies: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portico_pool_proxy_answerers",
			Help: "MACs that answered for more of a pool's probed addresses than one host plausibly holds (the pool's status.proxyAnswerers): proxy ARP/NDP, whose answers hold no address back.",
		}, []string{"pool"}),
		poolServicesWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portico_pool_services_waiting",
			Help: "Services that want an address from a pool and have none.",
		}, []string{"pool"}),
		allocationFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_allocation_failures_total",
			Help: "Allocations that failed, by the IPAllocated condition's reason.",
		}, []string{"reason"}),
		allocations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portico_allocations_total",
			Help: "Addresses given to Services.",
		}),
		conditionChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_service_condition_changes_total",
			Help: "Changes of a Service's EndpointsReady, Announced or Reachable condition, by type and new reason.",
		}, []string{"condition", "reason"}),
		events: events.NewMetrics(reg),
		reg:    reg,
	}
	reg.MustRegister(m.poolAddresses, m.poolAddressesInUse, m.poolServicesWaiting, m.poolForeign, m.poolHeld, m.poolAvailable, m.poolProxies,
		m.allocationFailures, m.allocations, m.conditionChanges)
	return m
}

var families = []string{"IPv4", "IPv6"}

// pool exports what the allocator knows of one pool, and how many proxy answerers the probes
// heard on it.
func (m *Metrics) pool(name string, f decide.PoolFacts, proxies int) {
	for i, fam := range families {
		if f.Stats.Size[i] == nil {
			continue
		}
		avail, _ := new(big.Float).SetInt(f.Stats.Available[i]).Float64()
		m.poolAddresses.WithLabelValues(name, fam).Set(avail + float64(f.Stats.Assigned[i]+f.Stats.Held[i]))
		m.poolAddressesInUse.WithLabelValues(name, fam).Set(float64(f.Stats.Assigned[i]))
		m.poolAvailable.WithLabelValues(name, fam).Set(avail)
	}
	m.poolProxies.WithLabelValues(name).Set(float64(proxies))
	m.poolServicesWaiting.WithLabelValues(name).Set(float64(f.Waiting))
	m.poolForeign.WithLabelValues(name).Set(float64(len(f.InUse)))
	m.poolHeld.WithLabelValues(name).Set(float64(f.Stats.Held[0] + f.Stats.Held[1]))
}

// poolGone drops a deleted pool's series.
func (m *Metrics) poolGone(name string) {
	for _, fam := range families {
		m.poolAddresses.DeleteLabelValues(name, fam)
		m.poolAddressesInUse.DeleteLabelValues(name, fam)
		m.poolAvailable.DeleteLabelValues(name, fam)
	}
	m.poolProxies.DeleteLabelValues(name)
	m.poolServicesWaiting.DeleteLabelValues(name)
	m.poolForeign.DeleteLabelValues(name)
	m.poolHeld.DeleteLabelValues(name)
}
