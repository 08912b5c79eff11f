package speaker

import (
	"cmp"
	"context"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/l2"
	"github.com/portico-lb/portico/speaker/plan"
	"github.com/portico-lb/portico/speaker/selfcheck"
)

// The probe rounds that run beside the loop, each from its own goroutine: the self-check of
// the addresses other nodes answer for (package selfcheck), and the conflict probes of the
// addresses pools hand out next. Which node probes which address is the plan's choice
// (plan.SelfCheckAddrs, plan.ConflictTargets); here the rounds run and their results become
// the Speaker status's selfChecks and foreignAnswers.

// runSelfCheck probes, in rounds, the addresses other nodes answer for (see package
// selfcheck) and puts the results in this node's Speaker status.
func (s *Speaker) runSelfCheck(ctx context.Context) {
	p := &selfcheck.Prober{Options: s.SelfCheck, Log: s.Log.WithName("selfcheck"),
		Targets: func() []selfcheck.Target { return s.selfCheckTargets(ctx) },
		Report:  s.reporter.selfChecked,
	}
	p.Run(ctx)
}

// selfCheckTargets are the addresses this node probes (plan.SelfCheckAddrs), each on every
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
	for _, ip := range plan.SelfCheckAddrs(w, s.Node, s.LBClass, s.Group.IsAlive, s.Group.Alive()) {
		out = append(out, selfcheck.Target{IP: ip, Interfaces: ifaces})
	}
	return out
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

// ConflictProbing paces the probes of the addresses pools hand out next, which find a
// foreign host already using one before a Service gets it.
type ConflictProbing struct {
	// Interval between two rounds; 0 switches the probing off.
	Interval time.Duration
	// Probes per address per round, Spacing apart (RFC 5227: PROBE_NUM 3, 1-2 s apart).
	Probes  int
	Spacing time.Duration
	// ForgetAfter is how many rounds in a row a MAC must leave an address unanswered before
	// its answer is dropped (1: the first round without it; less counts as 1). A busy host, an
	// ARP rate limit or a Wi-Fi client asleep can miss a round's probes while it still uses
	// the address, and one missed round must not hand it out.
	ForgetAfter int
}

// DefaultConflictProbing: a round every 30 s, three probes a second apart, an answer dropped
// after 3 rounds (90 s) without it.
var DefaultConflictProbing = ConflictProbing{Interval: 30 * time.Second, Probes: 3, Spacing: time.Second, ForgetAfter: 3}

// heardAnswer is one MAC heard answering for an address on an interface.
type heardAnswer struct {
	ip    netip.Addr
	mac   string
	iface string
}

// keptAnswer is a foreign answer the status lists, and how many rounds in a row since its
// MAC last answered for its address.
type keptAnswer struct {
	v1alpha1.ForeignAnswer
	missed int
}

// foreignAnswers are the answers the Speaker status lists after a round: those heard from MACs
// this node does not answer with, and those of prev not heard this round while their address
// is still one of the round's targets and their MAC has missed fewer than forgetAfter rounds
// in a row; at most MaxForeignAnswers (the lowest addresses), sorted. Each keeps the time it
// was first heard from prev, so an unchanged round writes nothing. An address no longer a
// target (a Service's now, or another node's to probe) is dropped at once.
func foreignAnswers(heard []heardAnswer, ours []string, targets []netip.Addr, prev []keptAnswer, forgetAfter int, now metav1.Time) []keptAnswer {
	same := func(a, b v1alpha1.ForeignAnswer) bool { return a.IP == b.IP && a.MAC == b.MAC }
	var out []keptAnswer
	for _, h := range heard {
		if slices.Contains(ours, h.mac) {
			continue
		}
		a := v1alpha1.ForeignAnswer{IP: h.ip.String(), MAC: h.mac, Interface: h.iface, Since: now}
		if i := slices.IndexFunc(prev, func(p keptAnswer) bool { return same(p.ForeignAnswer, a) }); i >= 0 {
			a.Since = prev[i].Since
		}
		out = append(out, keptAnswer{ForeignAnswer: a})
	}
	for _, p := range prev {
		heardAgain := slices.ContainsFunc(out, func(k keptAnswer) bool { return same(k.ForeignAnswer, p.ForeignAnswer) })
		ip, err := netip.ParseAddr(p.IP)
		if heardAgain || err != nil || !slices.Contains(targets, ip) || slices.Contains(ours, p.MAC) || p.missed+1 >= forgetAfter {
			continue
		}
		out = append(out, keptAnswer{ForeignAnswer: p.ForeignAnswer, missed: p.missed + 1})
	}
	slices.SortFunc(out, func(a, b keptAnswer) int {
		return cmp.Or(netip.MustParseAddr(a.IP).Compare(netip.MustParseAddr(b.IP)), strings.Compare(a.MAC, b.MAC), strings.Compare(a.Interface, b.Interface))
	})
	out = slices.CompactFunc(out, func(a, b keptAnswer) bool { return same(a.ForeignAnswer, b.ForeignAnswer) })
	return out[:min(len(out), v1alpha1.MaxForeignAnswers)]
}

// runConflictProbes probes, every round, this node's conflict targets and reports the foreign
// answers in its Speaker status.
func (s *Speaker) runConflictProbes(ctx context.Context) {
	if s.Conflicts.Interval <= 0 {
		return
	}
	round := time.NewTicker(s.Conflicts.Interval)
	defer round.Stop()
	for {
		s.conflictRound(ctx)
		select {
		case <-ctx.Done():
			return
		case <-round.C:
		}
	}
}

func (s *Speaker) conflictRound(ctx context.Context) {
	w, err := s.world(ctx)
	if err != nil {
		return
	}
	targets := plan.ConflictTargets(w, s.Node, s.Group.IsAlive)
	links, err := l2.ReadLinks()
	if err != nil {
		s.Log.V(1).Info("conflict probes: reading links", "error", err.Error())
		return
	}
	heard := s.probeConflicts(targets, links)
	var prev []keptAnswer
	if p := s.reporter.foreign.Load(); p != nil {
		prev = p.answers
	}
	probed := make([]netip.Addr, len(targets))
	for i, t := range targets {
		probed[i] = t.IP
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	found := foreignAnswers(heard, l2.MACs(links), probed, prev, s.Conflicts.ForgetAfter, now)
	for _, a := range found {
		if a.Since.Equal(&now) {
			s.Log.Info("a foreign host answers for a pool address not yet handed out", "ip", a.IP, "mac", a.MAC, "interface", a.Interface)
		}
	}
	s.reporter.foreign.Store(&foreignRound{answers: found, at: now})
	if len(found) > 0 || len(prev) > 0 {
		s.trigger(causeStatus)
	}
}

// probeConflicts probes the targets, each on its interfaces, and returns what answered.
func (s *Speaker) probeConflicts(targets []plan.ConflictTarget, links []l2.Link) []heardAnswer {
	verdicts := l2.Decide(links)
	byIface := map[string][]netip.Addr{}
	for _, t := range targets {
		names := t.Interfaces
		if names == nil {
			names = l2.ForAddress(t.IP, links, verdicts)
		} else {
			names, _ = l2.Expand(names, links)
		}
		for _, n := range names {
			byIface[n] = append(byIface[n], t.IP)
		}
	}
	var heard []heardAnswer
	for name, ips := range byIface {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			continue
		}
		got, err := l2.ProbeFree(ifi, ips, s.Conflicts.Probes, s.Conflicts.Spacing)
		if err != nil {
			s.Log.V(1).Info("conflict probes failed", "interface", name, "error", err.Error())
		}
		for ip, macs := range got {
			for _, mac := range macs {
				heard = append(heard, heardAnswer{ip: ip, mac: mac, iface: name})
			}
		}
	}
	return heard
}

// foreignRound is a probe round's foreign answers and when it ended.
type foreignRound struct {
	answers []keptAnswer
	at      metav1.Time
}

// setForeign puts the round's answers in st, with the time of the round while there are any:
// the controller counts them only while that time is recent (a speaker that stopped holds
// nothing back), so each round that lists anything (heard now, or kept from an earlier round)
// rewrites it; a quiet round writes nothing.
func (r *foreignRound) setForeign(st *v1alpha1.SpeakerStatus) {
	if r == nil || len(r.answers) == 0 {
		return
	}
	at := r.at
	answers := make([]v1alpha1.ForeignAnswer, len(r.answers))
	for i, a := range r.answers {
		answers[i] = a.ForeignAnswer
	}
	st.ForeignAnswers, st.ProbedAt = answers, &at
}
