package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics served on the controller's metrics endpoint, all prefixed portico_.
var (
	poolAddresses = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "portico_pool_addresses",
		Help: "Addresses in a pool, by family (usable ones: avoidBuggyIPs excluded).",
	}, []string{"pool", "family"})
	poolAddressesInUse = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "portico_pool_addresses_in_use",
		Help: "Addresses of a pool held by Services, by family.",
	}, []string{"pool", "family"})
	poolServicesWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "portico_pool_services_waiting",
		Help: "Services that want an address from a pool and have none.",
	}, []string{"pool"})
	allocationFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portico_allocation_failures_total",
		Help: "Allocations that failed, by the IPAllocated condition's reason.",
	}, []string{"reason"})
	allocations = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "portico_allocations_total",
		Help: "Addresses given to Services.",
	})
)

func init() {
	metrics.Registry.MustRegister(poolAddresses, poolAddressesInUse, poolServicesWaiting, allocationFailures, allocations)
}

// conditionChanges counts the health conditions' changes on Services.
var conditionChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "portico_service_condition_changes_total",
	Help: "Changes of a Service's EndpointsReady, Announced or Reachable condition, by type and new reason.",
}, []string{"condition", "reason"})

func init() { metrics.Registry.MustRegister(conditionChanges) }
