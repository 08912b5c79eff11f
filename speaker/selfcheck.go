package speaker

import (
	"cmp"
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/rules/election"
	"github.com/portico-lb/portico/speaker/l2"
	"github.com/portico-lb/portico/speaker/plan"
	"github.com/portico-lb/portico/speaker/selfcheck"
)

// runSelfCheck probes, in rounds, the addresses other nodes answer for (see package
// selfcheck) and puts the results in this node's Speaker status.
func (s *Speaker) runSelfCheck(ctx context.Context) {
	p := &selfcheck.Prober{Options: s.SelfCheck, Log: s.Log.WithName("selfcheck"),
		Targets: func() []selfcheck.Target { return s.selfCheckTargets(ctx) },
		Report:  s.reporter.selfChecked,
	}
	p.Run(ctx)
}

// selfCheckTargets are the addresses this node probes (selfCheckAddrs), each on every
// suitable interface.
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
	for _, ip := range selfCheckAddrs(w, s.Node, s.LBClass, s.Group.IsAlive, s.Group.Alive()) {
		out = append(out, selfcheck.Target{IP: ip, Interfaces: ifaces})
	}
	return out
}

// selfCheckAddrs are the addresses announced over L2 that node me probes, sorted: those whose
// prober it is. The owner of an address is elected from every Service listing it
// (rules.L2EligibilityOf), so the Services are grouped by address first.
func selfCheckAddrs(w plan.World, me, lbClass string, alive func(string) bool, members []string) []netip.Addr {
	holders := map[netip.Addr][]corev1.Service{}
	for i := range w.Services {
		svc := &w.Services[i]
		if !rules.Handles(svc, lbClass, !w.IgnoreClassless) {
			continue
		}
		for _, ip := range v1alpha1.IngressAddrs(svc) {
			holders[ip] = append(holders[ip], *svc)
		}
	}
	var out []netip.Addr
	cluster := w.Cluster()
	for ip, svcs := range holders {
		cluster.Services = svcs
		for i := range svcs {
			// Every Service an L2Advertisement covers has the same owner: the first one tells.
			if e := rules.L2EligibilityOf(cluster, &svcs[i], ip, alive); e.Advertised {
				if e.Owner != "" && prober(ip, e, members) == me {
					out = append(out, ip)
				}
				break
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// prober is the one node that probes ip: the election's runner-up among the eligible nodes
// (where the address would move), or, when the owner is the only eligible node, the one the
// same hash picks among the other live members. One prober, not every other node, keeps the
// self-check's Speaker writes for a new address at one, however many nodes run.
func prober(ip netip.Addr, e rules.L2Eligibility, members []string) string {
	isOwner := func(n string) bool { return n == e.Owner }
	others := slices.DeleteFunc(slices.Clone(e.Eligible), isOwner)
	if len(others) == 0 {
		others = slices.DeleteFunc(slices.Clone(members), isOwner)
	}
	p, _ := election.Owner(ip, others)
	return p
}

// selfChecked keeps a round's results for the status.
func (r *reporter) selfChecked(results map[netip.Addr][]string) {
	var prev []v1alpha1.SelfCheck
	if old := r.checks.Load(); old != nil {
		prev = old.checks
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	checks := selfCheckResults(results, prev, now)
	for _, c := range checks.checks {
		if c.Time.Equal(&now) && (len(c.MACs) != 1 || c.OmittedMACs > 0) {
			r.log.Info("self-check", "ip", c.IP, "answered", strings.Join(c.MACs, ","), "andMore", c.OmittedMACs)
		}
	}
	r.checks.Store(&checks)
	r.metrics.selfChecks(results)
	r.trigger(causeStatus)
}

// selfCheckReport is what the Speaker status says of the latest round.
type selfCheckReport struct {
	checks  []v1alpha1.SelfCheck
	omitted int32 // results left out of checks
}

// selfCheckResults are a round's results as the status lists them, within the API's caps: the
// answers come from anyone on the LAN, and a stranger answering with thousands of MACs, or
// for thousands of addresses, must not grow the Speaker past what the apiserver stores. Each
// entry lists at most MaxSelfCheckMACs MACs (the lowest; two already mean trouble, so a
// truncated entry never looks like a single clean answer) and counts the rest. At most
// MaxSelfChecks entries are kept, those that are not exactly one answer first, so a problem
// is never the one left out. A result's time is when its answer last changed (taken from
// prev), so an unchanged round writes nothing.
func selfCheckResults(results map[netip.Addr][]string, prev []v1alpha1.SelfCheck, now metav1.Time) selfCheckReport {
	since := map[string]v1alpha1.SelfCheck{}
	for _, c := range prev {
		since[c.IP] = c
	}
	rank := func(ip netip.Addr) int { // problems (not exactly one answer) first
		if len(results[ip]) == 1 {
			return 1
		}
		return 0
	}
	ips := slices.SortedFunc(maps.Keys(results), func(a, b netip.Addr) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), a.Compare(b))
	})
	var r selfCheckReport
	if len(ips) > v1alpha1.MaxSelfChecks {
		r.omitted = int32(len(ips) - v1alpha1.MaxSelfChecks)
		ips = ips[:v1alpha1.MaxSelfChecks]
	}
	r.checks = make([]v1alpha1.SelfCheck, 0, len(ips))
	for _, ip := range ips {
		macs := results[ip]
		c := v1alpha1.SelfCheck{IP: ip.String(), MACs: macs, Time: now}
		if len(macs) > v1alpha1.MaxSelfCheckMACs {
			c.MACs, c.OmittedMACs = macs[:v1alpha1.MaxSelfCheckMACs:v1alpha1.MaxSelfCheckMACs], int32(len(macs)-v1alpha1.MaxSelfCheckMACs)
		}
		if p, ok := since[c.IP]; ok && slices.Equal(p.MACs, c.MACs) && p.OmittedMACs == c.OmittedMACs {
			c.Time = p.Time
		}
		r.checks = append(r.checks, c)
	}
	slices.SortFunc(r.checks, func(a, b v1alpha1.SelfCheck) int { return strings.Compare(a.IP, b.IP) })
	return r
}

// causeStatus re-reports the status (self-checks, refused members, key problems) without
// being taken for the cause of an owner change.
const causeStatus = "status"

// hardwareAddrs are the MACs this node may answer with: its usable interfaces'.
func hardwareAddrs() []string {
	links, _ := l2.ReadLinks()
	return l2.MACs(links)
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
