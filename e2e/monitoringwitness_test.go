package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/portico-lb/portico/internal/controlplane"
)

// What the quiet lab's test sees for itself while Prometheus scrapes: each speaker's Lease
// renewals and the machine's CPU pressure. A starved machine times out Prometheus's scrapes
// of every process at once, the controller's too, so the controller's series cannot say
// whether a speaker whose scrapes failed was alive meanwhile; these records do.

// leaseRenewals records every renew time of the lab's Leases the apiserver shows, from a
// watch held until the test ends. A watch hands over every change, however late the test
// reads it; one lost and read again may skip renewals, which then count as not made.
type leaseRenewals struct {
	mu    sync.Mutex
	times map[string][]time.Time // by Lease name, in order
}

func watchLeaseRenewals(t *testing.T, cp *controlplane.ControlPlane) *leaseRenewals {
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	w := &leaseRenewals{times: map[string][]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		rv := ""
		for ctx.Err() == nil {
			if rv == "" {
				list, err := cs.CoordinationV1().Leases(monitoringNS).List(ctx, metav1.ListOptions{})
				if err != nil {
					pause(ctx)
					continue
				}
				for i := range list.Items {
					w.record(&list.Items[i])
				}
				rv = list.ResourceVersion
			}
			rv = w.follow(ctx, cs, rv)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// follow records the Leases' changes from rv until the watch ends, and returns where to go on
// from, or "" to read them again.
func (w *leaseRenewals) follow(ctx context.Context, cs kubernetes.Interface, rv string) string {
	wi, err := cs.CoordinationV1().Leases(monitoringNS).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		pause(ctx)
		return ""
	}
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		if ev.Type == watch.Error {
			return ""
		}
		if l, ok := ev.Object.(*coordinationv1.Lease); ok {
			w.record(l)
			rv = l.ResourceVersion
		}
	}
	return rv
}

func (w *leaseRenewals) record(l *coordinationv1.Lease) {
	if l.Spec.RenewTime == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ts := w.times[l.Name]; len(ts) == 0 || l.Spec.RenewTime.After(ts[len(ts)-1]) {
		w.times[l.Name] = append(ts, l.Spec.RenewTime.Time)
	}
}

// shortOf says how lease falls short of being renewed at least every leaseDuration from from
// to to, by the renewals seen; "" when it does not.
func (w *leaseRenewals) shortOf(lease string, from, to time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var prev time.Time
	for _, at := range append(w.times[lease], to) {
		if at.Before(from) {
			prev = at
			continue
		}
		if prev.IsZero() {
			return fmt.Sprintf("no renewal of Lease %s was seen before %s (%d seen in all)", lease, from.Format("15:04:05.000"), len(w.times[lease]))
		}
		if at.Sub(prev) > leaseDuration {
			return fmt.Sprintf("no renewal of Lease %s was seen between %s and %s (%d seen in all), longer than it lasts (%v)",
				lease, prev.Format("15:04:05.000"), at.Format("15:04:05.000"), len(w.times[lease]), leaseDuration)
		}
		if !at.Before(to) {
			return ""
		}
		prev = at
	}
	return ""
}

// cpuPressurePath is the kernel's record of CPU contention (PSI): its "some" line's total is
// the time, in microseconds, during which at least one runnable task waited for a CPU.
const cpuPressurePath = "/proc/pressure/cpu"

// cpuPressure samples that total every half second until the test ends.
type cpuPressure struct {
	mu      sync.Mutex
	samples []pressureSample
	err     error // why the total could not be read, if it could not
}

type pressureSample struct {
	at      time.Time
	waiting time.Duration
}

func sampleCPUPressure(t *testing.T) *cpuPressure {
	p := &cpuPressure{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			waiting, err := readCPUPressure()
			p.mu.Lock()
			p.samples, p.err = append(p.samples, pressureSample{time.Now(), waiting}), err
			p.mu.Unlock()
			if err != nil {
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

func readCPUPressure() (time.Duration, error) {
	b, err := os.ReadFile(cpuPressurePath)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "some ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				us, err := strconv.ParseInt(v, 10, 64)
				return time.Duration(us) * time.Microsecond, err
			}
		}
	}
	return 0, fmt.Errorf("%s has no \"some ... total=\" line: %q", cpuPressurePath, b)
}

// share is the part of the time from from to to (widened to the samples around them) during
// which some task waited for a CPU, and the time it was measured over; an error when the
// samples do not cover it.
func (p *cpuPressure) share(from, to time.Time) (float64, time.Duration, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return 0, 0, fmt.Errorf("the CPU pressure could not be read: %w", p.err)
	}
	var first, last *pressureSample
	for i := range p.samples {
		s := &p.samples[i]
		if !s.at.After(from) {
			first = s
		}
		if last == nil && !s.at.Before(to) {
			last = s
		}
	}
	if first == nil || last == nil {
		return 0, 0, fmt.Errorf("the CPU pressure was not sampled from %s to %s", from.Format("15:04:05.000"), to.Format("15:04:05.000"))
	}
	over := last.at.Sub(first.at)
	return float64(last.waiting-first.waiting) / float64(over), over, nil
}
