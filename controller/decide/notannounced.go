package decide

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

// notAnnounced says why nobody reports announcing ip, by the rules every speaker runs
// (rules.L2EligibilityOf, rules.BGPEligibilityOf; a node runs a speaker when its Speaker
// counts, its speaker's Lease live: f.Speakers): the nodes that should, or why none may.
func notAnnounced(svc *corev1.Service, ip netip.Addr, f HealthFacts) (metav1.ConditionStatus, string, string) {
	alive := runningSpeakers(f.Speakers)
	l2 := rules.L2EligibilityOf(f.Cluster, svc, ip, alive)
	switch {
	case l2.Pool == "":
		// Orphaned (its pool shrank or went): advertisements select pools, so no speaker
		// announces it, however many run, while IPAllocated stays True.
		return metav1.ConditionFalse, porticov1.ReasonOrphanedIP, fmt.Sprintf("%s is outside every IPAddressPool; no advertisement covers it, so no node announces it: restore the pool or move the Service", ip)
	case len(f.Speakers) == 0 && len(f.Stale) > 0:
		return metav1.ConditionFalse, porticov1.ReasonNoSpeakers, noLiveSpeaker(f.Stale, f.LastRenewed)
	case len(f.Speakers) == 0:
		return metav1.ConditionFalse, porticov1.ReasonNoSpeakers, "no speaker has reported (no Speaker objects): is the portico-speaker DaemonSet running?"
	}
	bgp := rules.BGPEligibilityOf(f.Cluster, svc, ip, alive)
	if !l2.Advertised && !bgp.Advertised {
		return metav1.ConditionFalse, porticov1.ReasonNoAdvertisement, fmt.Sprintf("no L2Advertisement or BGPAdvertisement selects pool %s for this Service", l2.Pool)
	}
	var pending []string
	if l2.Owner != "" {
		msg := fmt.Sprintf("node %s is elected to answer for %s; its speaker does not report it yet", l2.Owner, ip)
		if l2.OffSubnet {
			msg += "; " + rules.OffSubnetNote(ip)
		}
		pending = append(pending, msg)
	}
	if len(bgp.Advertisers) > 0 {
		pending = append(pending, bgpPending(ip, bgp))
	}
	if len(pending) > 0 {
		return metav1.ConditionUnknown, porticov1.ReasonAnnouncePending, strings.Join(pending, "; ")
	}
	return noAnnouncer(ip, len(f.Nodes), l2, bgp)
}

// runningSpeakers says whether a node runs a speaker that counts.
func runningSpeakers(speakers []porticov1.Speaker) func(string) bool {
	running := make(map[string]bool, len(speakers))
	for _, s := range speakers {
		running[s.Name] = true
	}
	return func(node string) bool { return running[node] }
}

// bgpPending names the nodes that should advertise ip over BGP, and to which peers:
// "nodes node-a,node-b should advertise 203.0.113.10 over BGP (to peers tor-a); no speaker
// reports it yet".
func bgpPending(ip netip.Addr, e rules.BGPEligibility) string {
	var peers []string
	for _, a := range e.Advertisers {
		peers = append(peers, a.Peers...)
	}
	slices.Sort(peers)
	nodes := "node "
	if len(e.Advertisers) > 1 {
		nodes = "nodes "
	}
	return fmt.Sprintf("%s%s should advertise %s over BGP (to peers %s); no speaker reports it yet",
		nodes, strings.Join(e.AdvertiserNames(), ","), ip, strings.Join(slices.Compact(peers), ","))
}

// noAnnouncer says why no node of the cluster's nodes may announce ip, over each way an
// advertisement selects.
func noAnnouncer(ip netip.Addr, nodes int, l2 rules.L2Eligibility, bgp rules.BGPEligibility) (metav1.ConditionStatus, string, string) {
	type way struct {
		name, why string
		noLocal   bool
	}
	var ways []way
	if l2.Advertised {
		ways = append(ways, way{"L2", l2.WhyNone, l2.NoLocalEndpoint})
	}
	if bgp.Advertised {
		ways = append(ways, way{"BGP", bgp.WhyNone, bgp.NoLocalEndpoint})
	}
	if nodes == 0 {
		return metav1.ConditionFalse, porticov1.ReasonNoEligibleNode, fmt.Sprintf("%s: the cluster has no Node objects to announce from", ip)
	}
	reason, local := porticov1.ReasonNoLocalEndpoints, "externalTrafficPolicy is Local: "
	var parts []string
	for _, w := range ways {
		if !w.noLocal {
			reason, local = porticov1.ReasonNoEligibleNode, ""
		}
		if len(ways) > 1 {
			w.why = "over " + w.name + ": " + w.why
		}
		parts = append(parts, w.why)
	}
	return metav1.ConditionFalse, reason, fmt.Sprintf("%s: %s%s", ip, local, strings.Join(parts, "; "))
}

// bgpUnfit names the nodes whose fitness keeps back their routes of the Service's addresses,
// by the rule the speakers apply (rules.BGPEligibilityOf): "; node worker-2 cordoned: its
// routes carry GRACEFUL_SHUTDOWN ...". Empty when every such node is fit.
func bgpUnfit(svc *corev1.Service, ips []netip.Addr, f HealthFacts) string {
	var notes []string
	for _, ip := range ips {
		e := rules.BGPEligibilityOf(f.Cluster, svc, ip, runningSpeakers(f.Speakers))
		for _, a := range e.Advertisers {
			if a.Standing == rules.BGPGracefulShutdown {
				notes = append(notes, fmt.Sprintf("node %s cordoned: its routes carry GRACEFUL_SHUTDOWN (65535:0), then are withdrawn after the speakers' --bgp-drain-grace while another node can advertise", a.Node))
			}
		}
		for _, w := range e.Withdrawn {
			notes = append(notes, fmt.Sprintf("node %s %s: its routes are withdrawn", w.Node, w.Why))
		}
	}
	if len(notes) == 0 {
		return ""
	}
	slices.Sort(notes)
	return "; " + strings.Join(slices.Compact(notes), "; ")
}
