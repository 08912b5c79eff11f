package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// sample reads one series from reg: the value of the metric name whose labels include want.
func sample(t *testing.T, reg prometheus.Gatherer, name string, want map[string]string) (value float64, found bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestMetrics: the series go to the registry the controller is given. A two-address pool and
// three Services: the pool's gauges, the allocations and the failure are counted there; the
// pool's series go when the pool does.
func TestMetrics(t *testing.T) {
	reg := startManager(t)
	pool := createPool(t, "metered", addresses("198.51.100.240/31"))
	ns := namespace(t, nil)
	for _, name := range []string{"a", "b", "c"} {
		createService(t, ns, name)
	}
	waitReason(t, ns, "c", porticov1.ReasonPoolExhausted)
	ofPool := map[string]string{"pool": "metered"}
	v4 := map[string]string{"pool": "metered", "family": "IPv4"}
	want := []struct {
		name   string
		labels map[string]string
		ok     func(float64) bool
		says   string
	}{
		{"portico_pool_addresses", v4, func(v float64) bool { return v == 2 }, "2"},
		{"portico_pool_addresses_in_use", v4, func(v float64) bool { return v == 2 }, "2"},
		{"portico_pool_services_waiting", ofPool, func(v float64) bool { return v == 1 }, "1"},
		{"portico_pool_addresses_available", v4, func(v float64) bool { return v == 0 }, "0"},
		{"portico_pool_proxy_answerers", ofPool, func(v float64) bool { return v == 0 }, "0"},
		// Read from the cache at scrape time, over every test's Services and objects.
		{"portico_service_conditions", map[string]string{"condition": porticov1.ConditionIPAllocated, "status": "False", "reason": porticov1.ReasonPoolExhausted},
			func(v float64) bool { return v >= 1 }, "at least 1"},
		{"portico_service_conditions", map[string]string{"condition": porticov1.ConditionIPAllocated, "status": "True", "reason": porticov1.ReasonAllocated},
			func(v float64) bool { return v >= 2 }, "at least 2"},
		{"portico_config_errors", map[string]string{"kind": "L2Advertisement"}, func(v float64) bool { return v >= 0 }, "a series"},
		{"portico_speakers", map[string]string{"state": "stale"}, func(v float64) bool { return v == 0 }, "0 (no Lease is read)"},
		// Services other tests left behind may be told something too.
		{"portico_allocations_total", nil, func(v float64) bool { return v >= 2 }, "at least 2"},
		{"portico_allocation_failures_total", map[string]string{"reason": porticov1.ReasonPoolExhausted}, func(v float64) bool { return v >= 1 }, "at least 1"},
	}
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, w := range want {
			if v, found := sample(t, reg, w.name, w.labels); !found || !w.ok(v) {
				last = fmt.Sprintf("%s%v is %v (found: %v), want %s", w.name, w.labels, v, found, w.says)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s: %v", last, err)
	}

	if err := cp.Client.Delete(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, found := sample(t, reg, "portico_pool_addresses", v4)
		return !found, nil
	})
	if err != nil {
		t.Fatalf("portico_pool_addresses of a deleted pool is still exported: %v", err)
	}
}
