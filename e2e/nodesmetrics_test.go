package e2e

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"

	"github.com/portico-lb/portico/internal/controlplane"
)

// apiTotals are the apiserver's running totals the nodes benchmark reads: its and etcd's CPU,
// the bytes it sent (watch events and responses), the watch events, the writes, and the
// writes and watch events that are not Leases (what a change causes; busy).
type apiTotals struct {
	apiserverCPU, etcdCPU, bytesSent, watchEvents, writes, busy float64
	at                                                          time.Time
}

// sub is the totals' growth since before.
func (t apiTotals) sub(before apiTotals) apiTotals {
	return apiTotals{t.apiserverCPU - before.apiserverCPU, t.etcdCPU - before.etcdCPU, t.bytesSent - before.bytesSent,
		t.watchEvents - before.watchEvents, t.writes - before.writes, t.busy - before.busy, time.Time{}.Add(t.at.Sub(before.at))}
}

// seconds is how long a difference of totals (sub) spans.
func (t apiTotals) seconds() float64 { return t.at.Sub(time.Time{}).Seconds() }

// scale multiplies every total of a difference by f.
func (t apiTotals) scale(f float64) apiTotals {
	return apiTotals{t.apiserverCPU * f, t.etcdCPU * f, t.bytesSent * f, t.watchEvents * f, t.writes * f, t.busy * f, t.at}
}

func (t apiTotals) minus(u apiTotals) apiTotals {
	return apiTotals{t.apiserverCPU - u.apiserverCPU, t.etcdCPU - u.etcdCPU, t.bytesSent - u.bytesSent,
		t.watchEvents - u.watchEvents, t.writes - u.writes, t.busy - u.busy, t.at}
}

// apiserverMetrics reads the apiserver's /metrics.
func apiserverMetrics(b testing.TB, cp *controlplane.ControlPlane) map[string]*dto.MetricFamily {
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	must(b, err)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	must(b, err)
	return families
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// sumOf adds up a family's counters, gauges or histogram sums whose labels keep accepts.
func sumOf(f *dto.MetricFamily, keep func(*dto.Metric) bool) float64 {
	s := 0.0
	for _, m := range f.GetMetric() {
		if keep != nil && !keep(m) {
			continue
		}
		s += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetHistogram().GetSampleSum()
	}
	return s
}

func readAPITotals(b testing.TB, cp *controlplane.ControlPlane) apiTotals {
	fams := apiserverMetrics(b, cp)
	cpu := readPlaneCPU(b.(*testing.B), cp)
	isWrite := func(m *dto.Metric) bool {
		return slices.Contains([]string{"POST", "PUT", "PATCH", "APPLY", "DELETE"}, label(m, "verb"))
	}
	notLease := func(resourceLabel string) func(*dto.Metric) bool {
		return func(m *dto.Metric) bool { return m.GetLabel() != nil && !isLease(label(m, resourceLabel)) }
	}
	writes := sumOf(fams["apiserver_request_total"], isWrite)
	busyWrites := sumOf(fams["apiserver_request_total"], func(m *dto.Metric) bool { return isWrite(m) && !isLease(label(m, "resource")) })
	events := fams["apiserver_watch_events_total"]
	return apiTotals{
		apiserverCPU: cpu.apiserver, etcdCPU: cpu.etcd,
		bytesSent:   sumOf(fams["apiserver_watch_events_sizes"], nil) + sumOf(fams["apiserver_response_sizes"], nil),
		watchEvents: sumOf(events, nil), writes: writes,
		busy: busyWrites + sumOf(events, notLease("resource")) + sumOf(events, notLease("kind")), at: time.Now(),
	}
}

func isLease(resourceOrKind string) bool {
	return resourceOrKind == "leases" || resourceOrKind == "Lease"
}

// watchesOf counts the apiserver's open watches by resource.
func watchesOf(b testing.TB, cp *controlplane.ControlPlane) map[string]float64 {
	out := map[string]float64{}
	for _, m := range apiserverMetrics(b, cp)["apiserver_longrunning_requests"].GetMetric() {
		if label(m, "verb") == "WATCH" {
			out[label(m, "resource")] += m.GetGauge().GetValue()
		}
	}
	return out
}

// settle waits until nothing but Leases has been written or sent to a watcher for two seconds
// (polling the apiserver's counters at most every 250 ms), and returns the totals then.
func settle(b testing.TB, cp *controlplane.ControlPlane, what string) apiTotals {
	last := readAPITotals(b, cp)
	since := time.Now()
	waitFor(b, what+" to settle", 5*time.Minute, atMostEvery(250*time.Millisecond, func() bool {
		now := readAPITotals(b, cp)
		if now.busy != last.busy {
			since = now.at
		}
		last = now
		return time.Since(since) >= 2*time.Second
	}))
	return last
}
