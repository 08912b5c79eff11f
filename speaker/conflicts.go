package speaker

import (
	"cmp"
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/rules/election"
	"github.com/portico-lb/portico/speaker/l2"
	"github.com/portico-lb/portico/speaker/plan"
)

// ConflictProbing paces the probes of the addresses pools hand out next, which find a
// foreign host already using one before a Service gets it.
type ConflictProbing struct {
	// Interval between two rounds; 0 switches the probing off.
	Interval time.Duration
	// Probes per address per round, Spacing apart (RFC 5227: PROBE_NUM 3, 1-2 s apart).
	Probes  int
	Spacing time.Duration
}

// DefaultConflictProbing: a round every 30 s, three probes a second apart.
var DefaultConflictProbing = ConflictProbing{Interval: 30 * time.Second, Probes: 3, Spacing: time.Second}

// conflictTarget is one address this node probes and the interfaces it probes it on (nil:
// those that answer by default, the address's subnet first: l2.ForAddress).
type conflictTarget struct {
	ip         netip.Addr
	interfaces []string
}

// conflictTargets are the addresses node me probes, sorted: of every pool an L2Advertisement
// announces and whose conflictProbing is not Disabled, its status.nextAddresses and status.inUse (so a host that lets an address go is
// noticed), never an address a Service holds. Each address has one prober: the node the
// election would make it announce it (the owner among the live nodes the pool's
// L2Advertisements select, their Service selectors aside), which probes on the interfaces it
// would answer on. The rule reads only what every speaker sees, so exactly one node probes
// each address, and a new address costs no gossip.
func conflictTargets(w plan.World, me string, alive func(string) bool) []conflictTarget {
	held := map[netip.Addr]bool{}
	for i := range w.Services {
		for _, ip := range v1alpha1.IngressAddrs(&w.Services[i]) {
			held[ip] = true
		}
	}
	sel := rules.Selectors{}
	var out []conflictTarget
	for i := range w.Pools {
		pool := &w.Pools[i]
		if !pool.ProbesConflicts() {
			continue
		}
		var ads []*v1alpha1.L2Advertisement
		for j := range w.Advertisements {
			s := &w.Advertisements[j].Spec
			if sel.Covers(s.IPAddressPools, s.IPAddressPoolSelectors, nil, pool, nil) {
				ads = append(ads, &w.Advertisements[j])
			}
		}
		if len(ads) == 0 {
			continue
		}
		cands, ifaces := sel.Candidates(w.Nodes, ads, nil, me, alive, w.IgnoreExcludeLabel)
		eligible, _ := election.Eligible(cands, election.Policy{})
		eligible = election.Preferred(eligible, election.Weights(cands))
		for _, ip := range probedAddrs(pool) {
			if owner, _ := election.Owner(ip, eligible); owner == me && !held[ip] {
				out = append(out, conflictTarget{ip: ip, interfaces: ifaces})
			}
		}
	}
	slices.SortFunc(out, func(a, b conflictTarget) int { return a.ip.Compare(b.ip) })
	return slices.CompactFunc(out, func(a, b conflictTarget) bool { return a.ip == b.ip })
}

// probedAddrs are a pool's next addresses and those found in use, as its status lists them.
func probedAddrs(pool *v1alpha1.IPAddressPool) []netip.Addr {
	var out []netip.Addr
	add := func(s string) {
		if ip, err := netip.ParseAddr(s); err == nil {
			out = append(out, ip)
		}
	}
	for _, s := range pool.Status.NextAddresses {
		add(s)
	}
	for _, u := range pool.Status.InUse {
		add(u.Address)
	}
	return out
}

// heardAnswer is one MAC heard answering for an address on an interface.
type heardAnswer struct {
	ip    netip.Addr
	mac   string
	iface string
}

// foreignAnswers is a round's answers as the Speaker status lists them: those from MACs this
// node does not answer with, at most MaxForeignAnswers (the lowest addresses), sorted, each
// keeping the time it was first heard from prev, so an unchanged round writes nothing.
func foreignAnswers(heard []heardAnswer, ours []string, prev []v1alpha1.ForeignAnswer, now metav1.Time) []v1alpha1.ForeignAnswer {
	var out []v1alpha1.ForeignAnswer
	for _, h := range heard {
		if slices.Contains(ours, h.mac) {
			continue
		}
		a := v1alpha1.ForeignAnswer{IP: h.ip.String(), MAC: h.mac, Interface: h.iface, Since: now}
		if i := slices.IndexFunc(prev, func(p v1alpha1.ForeignAnswer) bool { return p.IP == a.IP && p.MAC == a.MAC }); i >= 0 {
			a.Since = prev[i].Since
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b v1alpha1.ForeignAnswer) int {
		return cmp.Or(netip.MustParseAddr(a.IP).Compare(netip.MustParseAddr(b.IP)), strings.Compare(a.MAC, b.MAC), strings.Compare(a.Interface, b.Interface))
	})
	out = slices.CompactFunc(out, func(a, b v1alpha1.ForeignAnswer) bool { return a.IP == b.IP && a.MAC == b.MAC })
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
	targets := conflictTargets(w, s.Node, s.Group.IsAlive)
	links, err := l2.ReadLinks()
	if err != nil {
		s.Log.V(1).Info("conflict probes: reading links", "error", err.Error())
		return
	}
	verdicts := l2.Decide(links)
	byIface := map[string][]netip.Addr{}
	for _, t := range targets {
		names := t.interfaces
		if names == nil {
			names = l2.ForAddress(t.ip, links, verdicts)
		} else {
			names, _ = l2.Expand(names, links)
		}
		for _, n := range names {
			byIface[n] = append(byIface[n], t.ip)
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
	var prev []v1alpha1.ForeignAnswer
	if p := s.reporter.foreign.Load(); p != nil {
		prev = p.answers
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	found := foreignAnswers(heard, l2.MACs(links), prev, now)
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

// foreignRound is a probe round's foreign answers and when it ended.
type foreignRound struct {
	answers []v1alpha1.ForeignAnswer
	at      metav1.Time
}

// setForeign puts the round's answers in st, with the time of the round while there are any:
// the controller counts them only while that time is recent (a speaker that stopped holds
// nothing back), so each round that hears anything rewrites it; a quiet round writes nothing.
func (r *foreignRound) setForeign(st *v1alpha1.SpeakerStatus) {
	if r == nil || len(r.answers) == 0 {
		return
	}
	at := r.at
	st.ForeignAnswers, st.ProbedAt = r.answers, &at
}
