package cluster_test

import (
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
)

// BenchmarkOperations is what a user sees at the client during the operations users do to a
// cluster (operations): a GET to gitea's EXTERNAL-IP every 10 ms, each on a new connection
// with a 1 s timeout, and at the same time PORTICO_BENCH_CLUSTER_CONNS (default 50) keep-alive
// connections each sending a GET every 10 ms, from just before the operation until the cluster
// has settled again and 100 more answers came back. It reports, per operation and run
// (PORTICO_BENCH_CLUSTER_RUNS, default 3): how often each address moved to another node (L2,
// as a machine on the LAN sees who answers ARP) or the router's next hops changed (BGP); the
// new connections' failed requests and longest time between two answers; the keep-alive
// connections' failed requests and those reset; and the load average. It prints a table and
// writes it to PORTICO_BENCH_CLUSTER_OUT when set. PORTICO_BENCH_CLUSTER_OPS picks some
// operations by key.
func BenchmarkOperations(b *testing.B) {
	runs := 3
	if v := os.Getenv("PORTICO_BENCH_CLUSTER_RUNS"); v != "" {
		fmt.Sscan(v, &runs)
	}
	conns := keepAliveConns()
	homeLab(b, installWithKubectl, func(e *labEnv) {
		// The probe alone first: its own jitter on this machine.
		p := startProbe(e, "http://"+giteaIP.String()+"/", "gitea", conns)
		waitFor(b, "300 answers without an operation", 2*time.Minute, func() (bool, string) {
			n := p.answersSinceMark()
			return n >= 300, fmt.Sprintf("%d", n)
		})
		idle := p.stop()
		b.Logf("no operation: %d failed requests, longest gap %s; keep-alive: %d failed, %d reset; %s", idle.failed, idle.gap, idle.kaFailed, idle.kaResets,
			strings.Join(p.failures, "; "))
		var table strings.Builder
		fmt.Fprintf(&table, "%d keep-alive connections; moves: L2, of gitea's address and the mean over the four home-lab addresses; BGP, changes of the router's next hops.\n\n", conns)
		fmt.Fprintf(&table, "| operation | moves (each run) | moves per Service, mean of 4 (each run) | new connections: failed requests (each run) | longest gap without an answer (each run) | keep-alive: failed requests (each run) | keep-alive: reset connections (each run) | keep-alive: connections stalled 10 s or lost otherwise (each run) | load average, 1 min (each run) | medians: moves, failed, gap, keep-alive failed, resets |\n|---|---|---|---|---|---|---|---|---|---|\n")
		fmt.Fprintf(&table, "| none (300 answers) | | | %d | %d ms | %d | %d | %d | %s | |\n", idle.failed, idle.gap.Milliseconds(), idle.kaFailed, idle.kaResets,
			idle.kaStalled+idle.kaOther, strings.Fields(loadAverage())[0])
		each := func(op operation, tg target, mode string) {
			var moves, perService, failed, gaps, kaFailed, resets, lost []float64
			var loads []string
			for run := range runs {
				r := measure(e, op, tg, conns)
				m, mean := float64(r.nextHopChanges), math.NaN()
				if tg.l2 {
					m, mean = float64(r.moves[tg.ip]), 0
					for _, a := range homeLabAddresses {
						mean += float64(r.moves[a]) / float64(len(homeLabAddresses))
					}
				}
				b.Logf("%s (%s), run %d: moves %v (this address %.0f); %d failed requests, longest gap %s; keep-alive: %d failed, %d reset, %d stalled, %d lost otherwise; load %s; keep-alive: %d late, %d failed dials",
					op.name, mode, run+1, r.moves, m, r.failed, r.gap, r.kaFailed, r.kaResets, r.kaStalled, r.kaOther, r.load, r.kaLate, r.kaRedials)
				moves, perService = append(moves, m), append(perService, mean)
				failed, gaps = append(failed, float64(r.failed)), append(gaps, float64(r.gap.Milliseconds()))
				kaFailed, resets = append(kaFailed, float64(r.kaFailed)), append(resets, float64(r.kaResets))
				lost = append(lost, float64(r.kaStalled+r.kaOther))
				loads = append(loads, strings.Fields(r.load)[0])
			}
			perServiceCell := "–"
			if tg.l2 {
				perServiceCell = joinedPrec(perService, 2)
			}
			fmt.Fprintf(&table, "| %s (%s) | %s | %s | %s | %s ms | %s | %s | %s | %s | %.0f, %.0f, %.0f ms, %.0f, %.0f |\n", op.name, mode, joined(moves), perServiceCell,
				joined(failed), joined(gaps), joined(kaFailed), joined(resets), joined(lost), strings.Join(loads, ", "),
				median(moves), median(failed), median(gaps), median(kaFailed), median(resets))
			b.ReportMetric(median(failed), mode+"-"+op.key+"-failed")
			b.ReportMetric(median(gaps), mode+"-"+op.key+"-gap-ms")
			b.ReportMetric(median(moves), mode+"-"+op.key+"-moves")
			b.ReportMetric(median(kaFailed), mode+"-"+op.key+"-keepalive-failed")
			b.ReportMetric(median(resets), mode+"-"+op.key+"-keepalive-resets")
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
			nextcloud := target{app: "nextcloud", ip: ip, routerNS: router}
			for _, op := range bgpOps {
				if op.key == "drain" {
					op.name, op.do = "`kubectl drain` of an advertising node", drainWithdrawn(router, bird, ip)
				}
				each(op, nextcloud, "BGP")
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

func joined(xs []float64) string { return joinedPrec(xs, 0) }

func joinedPrec(xs []float64, prec int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatFloat(x, 'f', prec, 64)
	}
	return strings.Join(s, ", ")
}

// probe GETs a URL from the client every 10 ms, each time on a new connection, and keeps
// keep-alive connections that each GET it every 10 ms too (keepAlive), until stopped.
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

	conns        []net.Conn  // the keep-alive connections open now
	kaUp         []bool      // whether each one's last request was answered
	kaSent       []time.Time // when each one's request waiting for its answer was sent (zero: none waits)
	kaFailed     int
	kaEnded      [3]int // lost keep-alive connections, by connEnd
	kaLate       int    // answers later than 1 s, or not from the app
	kaDialFailed int    // dials again after a loss that failed
}

// clientFigures are what the probe saw.
type clientFigures struct {
	failed    int           // new connections that got no answer within 1 s
	gap       time.Duration // the longest time between two answers on new connections
	kaFailed  int           // keep-alive requests not answered within 1 s
	kaResets  int           // keep-alive connections ended by ECONNRESET or EOF
	kaStalled int           // keep-alive connections given up after stallAfter without an answer
	kaOther   int           // keep-alive connections lost to other errors
	kaLate    int           // keep-alive answers later than 1 s (or not from the app)
	kaRedials int           // keep-alive dials after a loss that failed
}

func startProbe(e *labEnv, url, app string, keepAlive int) *probe {
	get := netlab.HTTPClient(e.c.Client.NS, time.Second)
	p := &probe{last: time.Now(), done: make(chan struct{}), conns: make([]net.Conn, keepAlive), kaUp: make([]bool, keepAlive),
		kaSent: make([]time.Time, keepAlive)}
	host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
	p.wg.Add(1 + keepAlive)
	for i := range keepAlive {
		go p.keepAlive(e.c.Client.NS, host+":80", app, i)
	}
	go func() {
		defer p.wg.Done()
		p.every10ms(func() bool {
			body, err := httpGet(get, url)
			now := time.Now()
			p.mu.Lock()
			if err != nil || !answeredBy(body, app) {
				p.failed++
				p.inARow = 0
				p.note("new connection", fmt.Errorf("%q %v", body, err))
			} else {
				p.gap = max(p.gap, now.Sub(p.last))
				p.last = now
				p.sinceMark++
				p.inARow++
			}
			p.mu.Unlock()
			return true
		})
	}()
	return p
}

// every10ms calls fn every 10 ms until the probe stops or fn returns false; a call that takes
// longer skips the ticks it overran.
func (p *probe) every10ms(fn func() bool) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-tick.C:
		}
		if !fn() {
			return
		}
	}
}

func answeredBy(body, app string) bool { return strings.HasPrefix(body, app+"-") }

// note keeps the first few failures with their time, for the log; p.mu is held.
func (p *probe) note(what string, err error) {
	if len(p.failures) < 8 {
		p.failures = append(p.failures, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), what, err))
	}
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
	p.kaFailed, p.kaEnded, p.kaLate, p.kaDialFailed = 0, [3]int{}, 0, 0
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

func (p *probe) stop() clientFigures {
	close(p.done)
	p.mu.Lock()
	for i, c := range p.conns {
		if c != nil {
			_ = c.SetDeadline(time.Now()) // a read waiting for an answer returns now
		}
		// A request unanswered for over a second now has failed, though stop ends the wait
		// (before, one stalled in a run's last ten seconds counted nowhere).
		if sent := p.kaSent[i]; !sent.IsZero() && time.Since(sent) > time.Second {
			p.countFailed(&p.kaLate, fmt.Errorf("no answer %s after the request, at the stop", time.Since(sent).Round(time.Millisecond)))
			p.kaSent[i] = time.Time{} // counted
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
	return clientFigures{failed: p.failed, gap: p.gap, kaFailed: p.kaFailed,
		kaResets: p.kaEnded[connReset], kaStalled: p.kaEnded[connStalled], kaOther: p.kaEnded[connOther],
		kaLate: p.kaLate, kaRedials: p.kaDialFailed}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
