package e2e

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/portico-lb/portico/rules"
)

// What the lab's Prometheus records of its own work: when an alert fired by its clock, the
// scrapes and evaluations it missed, how a failed scrape failed. A starved machine makes
// Prometheus late or makes its scrapes time out; these records are the only evidence the
// monitoring tests accept for that, and only for the part of a result it explains.

// leaseDuration is how long a speaker's Lease lasts in the lab (three renewals of a second):
// a speaker that stops renewing it is stale this long after its last renewal.
const leaseDuration = 3 * time.Second

// firingFor waits until every named alert is firing; a fault began at start, and the
// system shows it in the series within detect, so each must fire within detect, its for: and
// two scrape intervals (plus the evaluation's own interval). The time it fired is
// Prometheus's record of it (firedAt), so that neither an evaluation that ran late on a busy
// machine nor the test's own polling counts against it. It returns each one's time from start
// to firing.
func (m *monitoredLab) firingFor(t *testing.T, start time.Time, detect time.Duration, alerts ...string) map[string]time.Duration {
	took := map[string]time.Duration{}
	for _, a := range alerts {
		limit := detect + m.fors[a] + 2*scrapeInterval + evalInterval
		var seen time.Time
		waitFor(t, a+" firing", time.Until(start.Add(2*limit+30*time.Second)), func() bool {
			var s string
			s, seen = m.watch.state(a)
			return s == "firing"
		})
		at := m.firedAt(t, a, start)
		took[a] = at.Sub(start)
		if took[a] <= limit {
			continue
		}
		if why := m.lateBecause(t, a, start, at, took[a]-limit); why != "" {
			t.Logf("%s fired %v after the fault (seen at %v), later than %v: %s",
				a, took[a].Round(time.Millisecond), seen.Sub(start).Round(time.Millisecond), limit, why)
			continue
		}
		t.Errorf("%s fired %v after the fault (Prometheus's record; seen at %v): later than %v (detection %v, for %v, two scrapes, an evaluation), and Prometheus missed no scrape that cut its pending time short and no evaluation that would make it that late",
			a, took[a].Round(time.Millisecond), seen.Sub(start).Round(time.Millisecond), limit, detect, m.fors[a])
	}
	return took
}

// lateBecause says why Prometheus's own records make alert late by late, having fired at at
// for a fault that began at start; "" when they do not.
func (m *monitoredLab) lateBecause(t *testing.T, alert string, start, at time.Time, late time.Duration) string {
	// A scrape that fails or never happens marks the series stale, which ends the alert's
	// pending time and starts its for: again.
	if missed := m.missedScrapes(t, start, at); missed != "" && m.watch.endedSince(alert, start) {
		return "its pending time was cut short while Prometheus missed scrapes (" + missed + ")"
	}
	// An evaluation that runs past its slot skips the slots after it: the alert fires that
	// many intervals later.
	if missed, longest := m.missedEvaluations(t, alert, start, at); time.Duration(missed)*evalInterval >= late {
		return fmt.Sprintf("Prometheus missed %v evaluations of its rule group (its longest took %v)", missed, longest.Round(time.Millisecond))
	}
	return ""
}

// firedAt is when alert first fired at or after from by Prometheus's record: the first sample
// of its ALERTS series in state firing, stamped with the evaluation's scheduled time.
// Prometheus shows an alert firing in its API just before it stores that evaluation's
// samples, so the record is polled a moment.
func (m *monitoredLab) firedAt(t *testing.T, alert string, from time.Time) time.Time {
	var at time.Time
	waitFor(t, alert+" firing in Prometheus's ALERTS series", 10*time.Second, func() bool {
		at = time.Time{}
		for _, s := range m.samples(t, fmt.Sprintf(`ALERTS{alertname=%q, alertstate="firing"}`, alert), from, time.Now()) {
			if first := s.Values[0].Timestamp.Time(); at.IsZero() || first.Before(at) {
				at = first
			}
		}
		return !at.IsZero()
	})
	return at
}

// samples are the raw samples of selector between from and to, each series' in time order
// (series with none left out).
func (m *monitoredLab) samples(t *testing.T, selector string, from, to time.Time) model.Matrix {
	window := time.Duration(math.Ceil(to.Sub(from).Seconds())) * time.Second
	v, _, err := m.prom.API.Query(context.Background(), fmt.Sprintf("%s[%s]", selector, model.Duration(window)), to)
	must(t, err)
	mat, _ := v.(model.Matrix)
	var out model.Matrix
	for _, s := range mat {
		i, _ := slices.BinarySearchFunc(s.Values, model.TimeFromUnixNano(from.UnixNano()), func(p model.SamplePair, ts model.Time) int { return cmp.Compare(p.Timestamp, ts) })
		if s.Values = s.Values[i:]; len(s.Values) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// missedScrapes names the Portico targets whose scrapes between from and to failed or were
// not made on time, from Prometheus's own up series; "" when every scrape was made and
// succeeded.
func (m *monitoredLab) missedScrapes(t *testing.T, from, to time.Time) string {
	var missed []string
	want := int(to.Sub(from)/scrapeInterval) - 1
	for _, s := range m.samples(t, `up{job=~"portico-.*"}`, from, to) {
		failed := 0
		for _, p := range s.Values {
			if p.Value == 0 {
				failed++
			}
		}
		if len(s.Values) < want {
			missed = append(missed, fmt.Sprintf("%s scraped %d times in %v", s.Metric["instance"], len(s.Values), to.Sub(from).Round(time.Second)))
		}
		if failed > 0 {
			missed = append(missed, fmt.Sprintf("%s failed %d scrapes", s.Metric["instance"], failed))
		}
	}
	slices.Sort(missed)
	return strings.Join(missed, ", ")
}

// missedEvaluations are the evaluations of alert's rule group Prometheus skipped between from
// and to because the one before ran past its slot, and the longest an evaluation took, from
// its own series (scraped every second: it waits for a scrape after to).
func (m *monitoredLab) missedEvaluations(t *testing.T, alert string, from, to time.Time) (missed float64, longest time.Duration) {
	group := m.groupOf(t, alert)
	counter := fmt.Sprintf(`prometheus_rule_group_iterations_missed_total{rule_group=~".*;%s"}`, group)
	var counts model.Matrix
	waitFor(t, "Prometheus's record of its evaluations after "+to.Format("15:04:05.000"), 30*time.Second, func() bool {
		counts = m.samples(t, counter, from, time.Now())
		return len(counts) == 1 && counts[0].Values[len(counts[0].Values)-1].Timestamp.Time().After(to)
	})
	values := counts[0].Values
	missed = float64(values[len(values)-1].Value - values[0].Value)
	for _, s := range m.samples(t, fmt.Sprintf(`prometheus_rule_group_last_duration_seconds{rule_group=~".*;%s"}`, group), from, time.Now()) {
		for _, p := range s.Values {
			longest = max(longest, time.Duration(float64(p.Value)*float64(time.Second)))
		}
	}
	return missed, longest
}

// groupOf is the rule group alert is in, as Prometheus loaded it.
func (m *monitoredLab) groupOf(t *testing.T, alert string) string {
	rules, err := m.prom.API.Rules(context.Background(), nil)
	must(t, err)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if a, ok := r.(promv1.AlertingRule); ok && a.Name == alert {
				return g.Name
			}
		}
	}
	t.Fatalf("Prometheus has no alert %s", alert)
	return ""
}

// unexplained are the alerts of fired that tell of Portico: all of them, but a
// PorticoSpeakerDown that fired only because Prometheus's scrapes of live speakers timed out
// on a starved machine (speakerScrapesTimedOut, on what leases and pressure saw). Each one
// kept says why its evidence fell short.
func (m *monitoredLab) unexplained(t *testing.T, fired []string, from time.Time, leases *leaseRenewals, pressure *cpuPressure) []string {
	var out []string
	for _, a := range fired {
		if a == "PorticoSpeakerDown" {
			why, excused := m.speakerScrapesTimedOut(t, from, leases, pressure)
			if excused {
				t.Logf("PorticoSpeakerDown fired, which tells of the machine, not of Portico: %s", why)
				continue
			}
			t.Logf("PorticoSpeakerDown fired, and the evidence does not excuse it: %s", why)
		}
		out = append(out, a)
	}
	return out
}

// starvedShare is the least part of a span during which the kernel must have seen a task
// waiting for a CPU for the span to count as the machine's starvation.
const starvedShare = 0.5

// speakerScrapesTimedOut says why every firing of PorticoSpeakerDown since from tells of a
// starved machine: over each firing's span (its for: and two scrapes before its first firing
// evaluation, to its last), every failed scrape of the speaker timed out (a speaker that is
// down refuses the connection at once), the test's watch saw the speaker renew its Lease at
// least every leaseDuration (a speaker hung so long that it fires the alert stops renewing
// it), and the kernel saw some task waiting for a CPU during at least starvedShare of the
// span. The controller's count of stale speakers is no witness here: its scrapes time out on
// the starved machine along with the speaker's. When any firing lacks that evidence, excused
// is false and why says what it lacks.
func (m *monitoredLab) speakerScrapesTimedOut(t *testing.T, from time.Time, leases *leaseRenewals, pressure *cpuPressure) (why string, excused bool) {
	var said []string
	for _, firing := range m.samples(t, `ALERTS{alertname="PorticoSpeakerDown", alertstate="firing"}`, from, time.Now()) {
		instance := firing.Metric["instance"]
		first, last := firing.Values[0].Timestamp.Time(), firing.Values[len(firing.Values)-1].Timestamp.Time()
		spanFrom := first.Add(-m.fors["PorticoSpeakerDown"] - 2*scrapeInterval)
		span := fmt.Sprintf("%s, %s to %s", instance, spanFrom.Format("15:04:05.000"), last.Format("15:04:05.000"))
		failed, fastest := m.failedScrapes(t, instance, spanFrom, last)
		if failed == 0 {
			return span + ": no failed scrape in Prometheus's up series", false
		}
		if fastest < 0.9*scrapeTimeout.Seconds() {
			return fmt.Sprintf("%s: a failed scrape ended after %.3fs, before the %v timeout", span, fastest, scrapeTimeout), false
		}
		if short := leases.shortOf(m.speakerLease(instance), spanFrom, last); short != "" {
			return fmt.Sprintf("%s: %d failed scrapes each timed out, but %s", span, failed, short), false
		}
		share, over, err := pressure.share(spanFrom, last)
		if err != nil {
			return fmt.Sprintf("%s: %d failed scrapes each timed out and the Lease was renewed, but %v", span, failed, err), false
		}
		if share < starvedShare {
			return fmt.Sprintf("%s: %d failed scrapes each timed out and the Lease was renewed, but some task waited for a CPU only %.0f%% of %v",
				span, failed, 100*share, over.Round(time.Millisecond)), false
		}
		said = append(said, fmt.Sprintf("%s's %d failed scrapes in %v each timed out (the quickest after %.2fs), its Lease was renewed at least every %v, and some task waited for a CPU %.0f%% of the time",
			instance, failed, last.Sub(spanFrom).Round(time.Second), fastest, leaseDuration, 100*share))
	}
	return strings.Join(said, "; "), len(said) > 0
}

// failedScrapes counts the failed scrapes of a speaker between from and to, by Prometheus's up
// series, and the shortest any of them took.
func (m *monitoredLab) failedScrapes(t *testing.T, instance model.LabelValue, from, to time.Time) (failed int, fastest float64) {
	target := fmt.Sprintf(`{job="portico-speaker-metrics", instance=%q}`, instance)
	took := map[model.Time]float64{}
	for _, s := range m.samples(t, "scrape_duration_seconds"+target, from, to) {
		for _, p := range s.Values {
			took[p.Timestamp] = float64(p.Value)
		}
	}
	fastest = math.Inf(1)
	for _, s := range m.samples(t, "up"+target, from, to) {
		for _, p := range s.Values {
			if p.Value == 0 {
				failed++
				fastest = math.Min(fastest, took[p.Timestamp])
			}
		}
	}
	return failed, fastest
}

// speakerLease is the name of the Lease of the speaker Prometheus scrapes at instance.
func (m *monitoredLab) speakerLease(instance model.LabelValue) string {
	for _, n := range m.e.Nodes {
		if n.IPv4.Addr().String()+":7474" == string(instance) {
			return rules.SpeakerLeaseName(n.Name)
		}
	}
	return "of no node at " + string(instance)
}
