package cluster_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
)

// BenchmarkOperations is what a user sees at the client during the operations users do to a
// cluster (operations): a GET to gitea's EXTERNAL-IP every 10 ms, each on a new connection
// with a 1 s timeout, from just before the operation until the cluster has settled again and
// 100 more answers came back. It reports, per operation, the failed requests and the longest
// time between two answers of each run (PORTICO_BENCH_CLUSTER_RUNS, default 3), prints a table
// and writes it to PORTICO_BENCH_CLUSTER_OUT when set. PORTICO_BENCH_CLUSTER_OPS picks some
// operations by key.
func BenchmarkOperations(b *testing.B) {
	runs := 3
	if v := os.Getenv("PORTICO_BENCH_CLUSTER_RUNS"); v != "" {
		fmt.Sscan(v, &runs)
	}
	homeLab(b, installWithKubectl, func(e *labEnv) {
		// The probe alone first: its own jitter on this machine.
		p := startProbe(e, "http://"+giteaIP.String()+"/", "gitea")
		waitFor(b, "300 answers without an operation", 2*time.Minute, func() (bool, string) {
			n := p.answersSinceMark()
			return n >= 300, fmt.Sprintf("%d", n)
		})
		f, gap := p.stop()
		b.Logf("no operation: %d failed requests, longest gap %s", f, gap)
		var table strings.Builder
		fmt.Fprintf(&table, "| operation | failed requests (each run) | longest gap without an answer (each run) | median gap |\n|---|---|---|---|\n")
		fmt.Fprintf(&table, "| none (300 answers) | %d | %d ms | |\n", f, gap.Milliseconds())
		each := func(op operation, tg target, mode string) {
			var failed, gaps []float64
			for run := range runs {
				f, gap := measure(e, op, tg)
				b.Logf("%s (%s), run %d: %d failed requests, longest gap %s", op.name, mode, run+1, f, gap)
				failed, gaps = append(failed, float64(f)), append(gaps, float64(gap.Milliseconds()))
			}
			fmt.Fprintf(&table, "| %s (%s) | %s | %s ms | %.0f ms |\n", op.name, mode, joined(failed), joined(gaps), median(gaps))
			b.ReportMetric(median(failed), mode+"-"+op.key+"-failed")
			b.ReportMetric(median(gaps), mode+"-"+op.key+"-gap-ms")
		}
		ops := selectedOperations()
		for _, op := range ops {
			each(op, gitea, "L2")
		}
		// The rolling upgrades and the drain again, measured at a Service the nodes announce
		// over BGP.
		var bgpOps []operation
		for _, op := range ops {
			if strings.HasPrefix(op.key, "upgrade-") || op.key == "drain" {
				bgpOps = append(bgpOps, op)
			}
		}
		if len(bgpOps) > 0 {
			ip, router, bird := bgpLab(e)
			nextcloud := target{app: "nextcloud", ip: ip}
			for _, op := range bgpOps {
				if op.key == "drain" {
					op.name, op.do = "`kubectl drain` of an advertising node", drainWithdrawn(router, bird, ip)
				}
				each(keepingNextHops(op, router, ip), nextcloud, "BGP")
			}
		}
		b.Logf("results:\n%s", table.String())
		if out := os.Getenv("PORTICO_BENCH_CLUSTER_OUT"); out != "" {
			if err := os.WriteFile(out, []byte(table.String()), 0o644); err != nil {
				b.Error(err)
			}
		}
	})
}

func joined(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(s, ", ")
}

// probe GETs a URL from the client every 10 ms until stopped.
type probe struct {
	mu        sync.Mutex
	failed    int
	last      time.Time
	gap       time.Duration
	sinceMark int
	inARow    int
	failures  []string // the first few, with their time
	done      chan struct{}
	wg        sync.WaitGroup
}

func startProbe(e *labEnv, url, app string) *probe {
	get := netlab.HTTPClient(e.c.Client.NS, time.Second)
	p := &probe{last: time.Now(), done: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
			body, err := httpGet(get, url)
			now := time.Now()
			p.mu.Lock()
			if err != nil || !strings.HasPrefix(body, app+"-") {
				p.failed++
				p.inARow = 0
				if len(p.failures) < 5 {
					p.failures = append(p.failures, fmt.Sprintf("%s: %q %v", now.Format("15:04:05.000"), body, err))
				}
			} else {
				p.gap = max(p.gap, now.Sub(p.last))
				p.last = now
				p.sinceMark++
				p.inARow++
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// mark starts counting answers again from zero.
func (p *probe) mark() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sinceMark = 0
}

// reset forgets the failures and the longest gap so far.
func (p *probe) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failed, p.gap, p.last, p.failures = 0, 0, time.Now(), nil
}

// answersInARow counts the answers since the last failure.
func (p *probe) answersInARow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inARow
}

// answersSinceMark counts the answers since mark.
func (p *probe) answersSinceMark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sinceMark
}

func (p *probe) stop() (int, time.Duration) {
	close(p.done)
	p.wg.Wait()
	return p.failed, p.gap
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
