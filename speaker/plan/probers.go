package plan

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/rules/election"
)

// Who probes which address. Two kinds of probe run beside the plan: the conflict probes of the
// addresses pools hand out next, which find a foreign host using one before a Service gets it,
// and the self-check of the addresses other nodes answer for. Each address has one prober,
// chosen from what every speaker sees alike, so a new address costs no gossip and one
// Speaker status entry.

// ConflictTarget is one address a node probes for a foreign host, and the interfaces it probes
// it on (nil: those that answer by default, the address's subnet first: l2.ForAddress).
type ConflictTarget struct {
	IP         netip.Addr
	Interfaces []string
}

// ConflictTargets are the addresses node me probes, sorted: of every pool an L2Advertisement
// announces and whose conflictProbing is not Disabled, its status.nextAddresses and
// status.inUse (so a host that lets an address go is noticed), never an address a Service
// holds. Each address has one prober: the node the election would make it announce it (the
// owner among the live nodes the pool's L2Advertisements select, their Service selectors
// aside), which probes on the interfaces it would answer on.
func ConflictTargets(w World, me string, alive func(string) bool) []ConflictTarget {
	held := map[netip.Addr]bool{}
	for i := range w.Services {
		for _, ip := range v1alpha1.IngressAddrs(&w.Services[i]) {
			held[ip] = true
		}
	}
	sel := rules.Selectors{}
	var out []ConflictTarget
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
		cands, ifaces := sel.Candidates(w.Nodes, ads, rules.LocalEndpoints{}, me, alive, w.IgnoreExcludeLabel)
		eligible, _ := election.Eligible(cands, election.Policy{})
		eligible = election.Preferred(eligible, election.Weights(cands))
		for _, ip := range probedAddrs(pool) {
			if owner, _ := election.Owner(ip, eligible); owner == me && !held[ip] {
				out = append(out, ConflictTarget{IP: ip, Interfaces: ifaces})
			}
		}
	}
	slices.SortFunc(out, func(a, b ConflictTarget) int { return a.IP.Compare(b.IP) })
	return slices.CompactFunc(out, func(a, b ConflictTarget) bool { return a.IP == b.IP })
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

// SelfCheckAddrs are the addresses announced over L2 that node me probes, sorted: those whose
// prober it is. The owner of an address is elected from every Service listing it
// (rules.L2EligibilityOf), so the Services are grouped by address first; members are the live
// members of the gossip group.
func SelfCheckAddrs(w World, me, lbClass string, alive func(string) bool, members []string) []netip.Addr {
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
