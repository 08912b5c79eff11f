package e2e

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/speaker/bgpproc"
)

// TestMonitoringQuiet: a lab doing nothing wrong (three speakers, two controller replicas,
// bird with BFD, L2, BGP and home-lab Services) fires no alert, the rules loaded and evaluated
// the whole time, for five minutes or, if longer, as long as it takes every alert to count over
// its whole window of the quiet lab and then wait out the longest for: (quietPeriod). With the
// rules' durations divided by 20 that is 5 minutes: 100 minutes of the shipped rules.
func TestMonitoringQuiet(t *testing.T) {
	requirePrometheus(t)
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		start := time.Now()
		leases, pressure := watchLeaseRenewals(t, e.cp), sampleCPUPressure(t)
		m := startMonitoredLab(t, e)
		m.checkRulesEvaluate(t)
		quietPeriod := m.quietPeriod()
		// The test's subject is this span of time: nothing to wait for but the clock.
		<-time.After(quietPeriod)
		m.checkRulesEvaluate(t)
		if fired := m.unexplained(t, m.watch.everFired(), start, leases, pressure); len(fired) > 0 {
			t.Errorf("alerts fired in a quiet lab within %v: %v", quietPeriod, fired)
		}
		t.Logf("no alert fired in %v of a quiet lab (rules' durations divided by %d: %v of the shipped rules)",
			quietPeriod, durationScale, quietPeriod*durationScale)
	})
}

// quietPeriod is the longest window an alert counts over and then the longest for:, both
// scaled: by then an alert that the quiet lab's steady behaviour fires has fired. It is five
// minutes at least, the time users' noise reports speak of.
func (m *monitoredLab) quietPeriod() time.Duration {
	return max(5*time.Minute, m.window+slices.Max(slices.Collect(maps.Values(m.fors))))
}

// checkRulesEvaluate waits until Prometheus has every alert loaded and evaluated without error,
// and checks the series the pools' alerts read are there: a quiet lab whose rules never ran
// would prove nothing.
func (m *monitoredLab) checkRulesEvaluate(t *testing.T) {
	var last string
	if !pollUntil(30*time.Second, func() bool {
		rules, err := m.prom.API.Rules(context.Background(), nil)
		if err != nil {
			last = err.Error()
			return false
		}
		var good []string
		last = ""
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				if a, isAlert := r.(promv1.AlertingRule); isAlert {
					if a.Health != promv1.RuleHealthGood {
						last += fmt.Sprintf("%s: health %s %s; ", a.Name, a.Health, a.LastError)
					}
					good = append(good, a.Name)
				}
			}
		}
		if last != "" || len(good) != len(m.fors) {
			return false
		}
		// Seen in the last minute: a scrape of the controller that timed out under load leaves
		// the series stale for a moment, which is not a lab without them.
		v, _, err := m.prom.API.Query(context.Background(), `count(max_over_time(portico_pool_addresses_available[1m])) >= 3`, time.Now())
		vec, _ := v.(model.Vector)
		last = fmt.Sprintf("the pools' series: %v %v", v, err)
		return err == nil && len(vec) > 0
	}) {
		t.Fatalf("Prometheus does not evaluate every alert on the lab's series: %s", last)
	}
}

// faultResult is one alert's record for a fault.
type faultResult struct {
	fault, alert        string
	firing, resolved    time.Duration // fault → firing; end of the fault → resolved
	scaledFor, detected time.Duration
}

// TestMonitoringFaults: in one lab, the faults the labs make, two lanes at once (the
// controller's pools and addresses; the speakers and BGP), each one firing its alerts within
// its detection time, its for: and two scrape intervals, and resolving them once it ends. No
// other alert fires meanwhile. Then every dashboard panel's queries return data.
func TestMonitoringFaults(t *testing.T) {
	requirePrometheus(t)
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		m := startMonitoredLab(t, e)
		var mu sync.Mutex
		var results []faultResult
		record := func(r []faultResult) { mu.Lock(); results = append(results, r...); mu.Unlock() }
		t.Run("faults", func(t *testing.T) {
			t.Run("pools and addresses", func(t *testing.T) {
				t.Parallel()
				record(m.exhaustHomeLab(t))
				record(m.foreignAnswer(t))
			})
			t.Run("speakers and BGP", func(t *testing.T) {
				t.Parallel()
				record(m.killSpeaker(t))
				m.plannedRestart(t)
				record(m.birdDown(t))
				record(m.crashBGPProcess(t))
			})
		})
		var expected []string
		var table strings.Builder
		fmt.Fprintf(&table, "| fault | alert | for (scaled) | detection allowed | fault → firing | fault over → resolved |\n|---|---|---|---|---|---|\n")
		for _, r := range results {
			expected = append(expected, r.alert)
			fmt.Fprintf(&table, "| %s | %s | %v | %v | %v | %v |\n", r.fault, r.alert, r.scaledFor, r.detected,
				r.firing.Round(100*time.Millisecond), r.resolved.Round(100*time.Millisecond))
		}
		t.Logf("alerts the faults fired:\n%s", table.String())
		for _, a := range m.watch.everFired() {
			if !slices.Contains(expected, a) {
				t.Errorf("%s fired, which no fault should have fired", a)
			}
		}
		m.checkPanels(t)
	})
}

// fault runs one fault: do at start, its alerts firing (firingFor), then undo, and its alerts
// resolved within resolve.
func (m *monitoredLab) fault(t *testing.T, name string, detect, resolve time.Duration, do, undo func(), alerts ...string) []faultResult {
	start := time.Now()
	do()
	took := m.firingFor(t, start, detect, alerts...)
	end := time.Now()
	undo()
	resolved := m.resolvedWithin(t, end, resolve, alerts...)
	var out []faultResult
	for _, a := range alerts {
		out = append(out, faultResult{fault: name, alert: a, firing: took[a], resolved: resolved, scaledFor: m.fors[a], detected: detect})
	}
	return out
}

// exhaustHomeLab fills the home-lab pool (16 addresses, 4 in use) as users would, one Service
// after another (every 500 ms), once Prometheus has seen the pool a while: 12 more take its
// last addresses, and the 13th, the fault, waits. Its end deletes them.
func (m *monitoredLab) exhaustHomeLab(t *testing.T) []faultResult {
	ctx := context.Background()
	waitFor(t, "ten samples of the home-lab pool", time.Minute, func() bool {
		v, _, err := m.prom.API.Query(ctx, `count_over_time(portico_pool_addresses_available{pool="home-lab"}[1m]) >= 10`, time.Now())
		vec, _ := v.(model.Vector)
		return err == nil && len(vec) > 0
	})
	var fill []*corev1.Service
	for i := range 13 {
		fill = append(fill, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fill-%02d", i), Namespace: "default",
			Annotations: map[string]string{v1alpha1.AnnotationAddressPool: "home-lab"}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "fill"},
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}})
	}
	for _, svc := range fill[:12] {
		must(t, m.e.c.Create(ctx, svc))
		<-time.After(500 * time.Millisecond) // a user's pace, not a wait for anything
	}
	return m.fault(t, "home-lab pool exhausted (a 17th Service waits)", 3*time.Second, 30*time.Second, func() {
		must(t, m.e.c.Create(ctx, fill[12]))
	}, func() {
		for _, svc := range fill {
			must(t, m.e.c.Delete(ctx, svc))
		}
	}, "PorticoPoolExhausted", "PorticoPoolNearlyExhausted")
}

// foreignAnswer makes the client answer ARP for web-a's address besides node-a: the
// self-check (every 2 s) hears a second MAC no speaker owns.
func (m *monitoredLab) foreignAnswer(t *testing.T) []faultResult {
	addr := m.otherIP.String() + "/32"
	return m.fault(t, "a second MAC answers web-a's address", 6*time.Second, 30*time.Second, func() {
		run(t, "ip", "-n", m.e.Client.NS, "addr", "add", addr, "dev", "eth0")
		t.Cleanup(func() { _ = exec.Command("ip", "-n", m.e.Client.NS, "addr", "del", addr, "dev", "eth0").Run() })
	}, func() {
		run(t, "ip", "-n", m.e.Client.NS, "addr", "del", addr, "dev", "eth0")
	}, "PorticoAddressAnsweredByForeignHost")
}

// killSpeaker SIGKILLs node-c's speaker, which answers for web-c (it fails over, which the
// failover histogram measures); its Lease runs out after 3 s. Its end starts the speaker again.
func (m *monitoredLab) killSpeaker(t *testing.T) []faultResult {
	before := m.failovers(t)
	r := m.fault(t, "node-c's speaker killed", 4*time.Second, 60*time.Second, func() {
		m.e.kill("node-c", syscall.SIGKILL)
	}, func() {
		waitFor(t, "web-c's failover measured", 30*time.Second, func() bool { return m.failovers(t) > before })
		m.e.startSpeaker("node-c")
	}, "PorticoSpeakerDown", "PorticoSpeakerNotReporting")
	m.e.waitEstablished("tor", 60*time.Second, "node-c")
	return r
}

// plannedRestart stops the speaker answering web-b's address (node-b's, unless a fault before
// moved it) with SIGTERM, as a rolling update does, and starts it again once another node
// answers it: no alert fires (the test checks none but the faults' did). The move is not
// always a failover the histogram counts: a taker that sees the stopping speaker's status give
// the address up before its goodbye takes it without a member lost.
func (m *monitoredLab) plannedRestart(t *testing.T) {
	nodes := []string{"node-b", "node-a", "node-c"}
	answering := func() string {
		for _, n := range nodes {
			if m.e.answeredOnlyBy(m.movedIP, n) {
				return n
			}
		}
		return ""
	}
	var owner string
	waitFor(t, "one node answering web-b's address", 60*time.Second, func() bool { owner = answering(); return owner != "" })
	m.e.kill(owner, syscall.SIGTERM)
	var taker string
	waitFor(t, "another node answering web-b's address", 30*time.Second, func() bool { taker = answering(); return taker != "" && taker != owner })
	m.e.startSpeaker(owner)
	m.e.waitEstablished("tor", 60*time.Second, owner)
	t.Logf("%s's speaker restarted (SIGTERM): web-b's address moved to %s", owner, taker)
}

// failovers is the number of L2 failovers the speakers have measured, as Prometheus sees it.
func (m *monitoredLab) failovers(t *testing.T) float64 {
	v, _, err := m.prom.API.Query(context.Background(), "sum(portico_l2_failover_seconds_count)", time.Now())
	must(t, err)
	vec, _ := v.(model.Vector)
	if len(vec) == 0 {
		return 0
	}
	return float64(vec[0].Value)
}

// birdDown stops the router: every node's BGP and BFD sessions go down. Its end starts it.
func (m *monitoredLab) birdDown(t *testing.T) []faultResult {
	all := []string{"node-a", "node-b", "node-c"}
	r := m.fault(t, "bird stopped", 3*time.Second, 60*time.Second, m.bird.Stop, m.bird.Start,
		"PorticoBGPSessionDown", "PorticoBFDSessionDown")
	m.e.waitEstablished("tor", 60*time.Second, all...)
	return r
}

// crashBGPProcess kills node-a's BGP process with SIGSEGV (what a panic in GoBGP does); the
// speaker starts another. Nothing ends the fault: the alert ends when the restart leaves its
// window (15 minutes, 45 s scaled).
func (m *monitoredLab) crashBGPProcess(t *testing.T) []faultResult {
	pid := m.e.bgpProcess("node-a")
	waitFor(t, "the BGP process running stably", 2*bgpproc.StableRun, func() bool { return processAge(pid) >= bgpproc.StableRun })
	return m.fault(t, "node-a's BGP process crashed (SIGSEGV)", time.Second, 90*time.Second, func() {
		must(t, syscall.Kill(pid, syscall.SIGSEGV))
	}, func() {}, "PorticoBGPProcessRestarting")
}

// requirePrometheus fails in CI, and skips elsewhere, without root or Debian's prometheus.
func requirePrometheus(t *testing.T) { netlab.Require(t, "prometheus") }
