package speaker

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/l2"
	"github.com/portico-lb/portico/speaker/selfcheck"
)

// runSelfCheck probes, in rounds, the addresses other nodes answer for (see package
// selfcheck) and puts the results in this node's Speaker status.
func (s *Speaker) runSelfCheck(ctx context.Context) {
	p := &selfcheck.Prober{Options: s.SelfCheck, Log: s.Log.WithName("selfcheck"),
		Targets: func() []selfcheck.Target { return s.selfCheckTargets(ctx) },
		Report:  s.selfChecked,
	}
	p.Run(ctx)
}

// selfCheckTargets are the addresses announced over L2 whose elected owner is another
// node, to be probed on every suitable interface.
func (s *Speaker) selfCheckTargets(ctx context.Context) []selfcheck.Target {
	w, err := s.world(ctx)
	if err != nil {
		return nil
	}
	ifaces, err := l2.Suitable()
	if err != nil || len(ifaces) == 0 {
		return nil
	}
	var out []selfcheck.Target
	for i := range w.Services {
		svc := &w.Services[i]
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass != s.LBClass {
			continue
		}
		for _, ip := range v1alpha1.IngressAddrs(svc) {
			if e := L2EligibilityOf(w, svc, ip, s.Group.IsAlive); e.Advertised && e.Owner != "" && e.Owner != s.Node {
				out = append(out, selfcheck.Target{IP: ip, Interfaces: ifaces})
			}
		}
	}
	slices.SortFunc(out, func(a, b selfcheck.Target) int { return a.IP.Compare(b.IP) })
	return out
}

// selfChecked keeps a round's results for the status. A result's time is when its answer
// last changed, so an unchanged round writes nothing.
func (s *Speaker) selfChecked(results map[netip.Addr][]string) {
	prev := map[string]v1alpha1.SelfCheck{}
	if old := s.checks.Load(); old != nil {
		for _, c := range *old {
			prev[c.IP] = c
		}
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	checks := make([]v1alpha1.SelfCheck, 0, len(results))
	for ip, macs := range results {
		c := v1alpha1.SelfCheck{IP: ip.String(), MACs: macs, Time: now}
		if p, ok := prev[c.IP]; ok && slices.Equal(p.MACs, macs) {
			c.Time = p.Time
		} else if len(macs) != 1 {
			s.Log.Info("self-check", "ip", ip, "answered", strings.Join(macs, ","))
		}
		checks = append(checks, c)
	}
	slices.SortFunc(checks, func(a, b v1alpha1.SelfCheck) int { return strings.Compare(a.IP, b.IP) })
	s.checks.Store(&checks)
	s.Metrics.selfChecks(results)
	s.trigger(causeStatus)
}

// causeStatus re-reports the status (self-checks, refused members, key problems) without
// being taken for the cause of an owner change.
const causeStatus = "status"

// hardwareAddrs are the MACs this node answers with: its suitable interfaces'.
func hardwareAddrs() []string {
	names, _ := l2.Suitable()
	var macs []string
	for _, n := range names {
		if ifi, err := net.InterfaceByName(n); err == nil {
			macs = append(macs, ifi.HardwareAddr.String())
		}
	}
	slices.Sort(macs)
	return slices.Compact(macs)
}

func newProbeCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_selfcheck_probes_total",
		Help: "Self-check probes of addresses other nodes own, by outcome: none (nobody answered), one, many (more than one MAC)."},
		[]string{"outcome"})
	reg.MustRegister(c)
	return c
}

func (m *Metrics) selfChecks(results map[netip.Addr][]string) {
	for _, macs := range results {
		outcome := "one"
		switch {
		case len(macs) == 0:
			outcome = "none"
		case len(macs) > 1:
			outcome = "many"
		}
		m.probes.WithLabelValues(outcome).Inc()
	}
}
