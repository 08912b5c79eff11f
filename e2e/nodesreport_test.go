package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// nodesReport is BenchmarkNodes' table: per node count and kind of change, the apiserver's CPU
// and bytes sent for the kube-proxy floor and for the speakers, and their ratio.
type nodesReport struct{ rows strings.Builder }

// add gives the rows of one speakers side (named side) against the floor at n nodes.
func (r *nodesReport) add(n int, side string, floor, speakers sideCost) {
	line := func(what string, f, s apiTotals) {
		fmt.Fprintf(&r.rows, "| %d | %s | %s | %.1f | %.1f | **%.2f** | %.1f | %.1f | **%.2f** | %.0f | %.0f | %.1f | %.1f |\n", n, side, what,
			f.apiserverCPU*1000, s.apiserverCPU*1000, ratio(s.apiserverCPU, f.apiserverCPU),
			f.bytesSent/1024, s.bytesSent/1024, ratio(s.bytesSent, f.bytesSent),
			f.watchEvents, s.watchEvents, f.writes, s.writes)
	}
	line("idle minute", floor.idleMinute, speakers.idleMinute)
	line("Service change", floor.service, speakers.service)
	line("EndpointSlice change", floor.slice, speakers.slice)
	line("node join", floor.joinOne, speakers.joinOne)
}

// metrics reports the speakers' side against the floor at n nodes as the benchmark's metrics.
func (r *nodesReport) metrics(b *testing.B, n int, floor, speakers sideCost) {
	b.ReportMetric(ratio(speakers.service.apiserverCPU, floor.service.apiserverCPU), "x-floor-cpu/service")
	b.ReportMetric(ratio(speakers.service.bytesSent, floor.service.bytesSent), "x-floor-bytes/service")
	b.ReportMetric(ratio(speakers.slice.bytesSent, floor.slice.bytesSent), "x-floor-bytes/slice")
	b.ReportMetric(ratio(speakers.joinOne.bytesSent, floor.joinOne.bytesSent), "x-floor-bytes/join")
	b.ReportMetric(speakers.idleMinute.writes/float64(n), "speaker-writes/node/idle-minute")
	b.ReportMetric(speakers.idleMinute.apiserverCPU/60, "speakers-idle-apiserver-cores")
	b.ReportMetric(floor.idleMinute.apiserverCPU/60, "floor-idle-apiserver-cores")
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func (r *nodesReport) String() string {
	return "| nodes | side | per | apiserver CPU, floor (ms) | speakers (ms) | × floor | bytes sent, floor (KiB) | speakers (KiB) | × floor | watch events, floor | speakers | writes, floor | speakers |\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|\n" + r.rows.String()
}

// save writes the table so far to PORTICO_BENCH_NODES_OUT, when set.
func (r *nodesReport) save(b *testing.B) {
	if out := os.Getenv("PORTICO_BENCH_NODES_OUT"); out != "" {
		must(b, os.WriteFile(out, []byte(r.String()), 0o644))
	}
}
