package decide

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

// announcedCondition is the Service's Announced condition, its one owner: who announces each
// address, from the speakers' reports, or why nobody does, from the same rules the speakers
// apply.
func announcedCondition(svc *corev1.Service, f HealthFacts) metav1.Condition {
	c := metav1.Condition{Type: porticov1.ConditionAnnounced, ObservedGeneration: svc.Generation}
	ips := porticov1.IngressAddrs(svc)
	if len(ips) == 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, porticov1.ReasonNoAddress, "nothing to announce until the Service has an address"
		return c
	}
	key := svc.Namespace + "/" + svc.Name
	var said []string
	var l2, bgp bool
	for _, ip := range ips {
		if node, why := cannotAnswer(key, ip, f.Speakers); node != "" {
			c.Status, c.Reason = metav1.ConditionFalse, porticov1.ReasonCannotAnswer
			c.Message = fmt.Sprintf("node %s should answer for %s but its speaker cannot: %s", node, ip, why)
			return c
		}
		msg, proto := announcers(key, ip, f.Speakers, f.Subnets)
		if msg != "" {
			said = append(said, msg)
			l2 = l2 || proto == porticov1.ProtocolL2
			bgp = bgp || proto == porticov1.ProtocolBGP
			continue
		}
		status, reason, why := notAnnounced(svc, ip, f)
		c.Status, c.Reason, c.Message = status, reason, why
		return c
	}
	c.Status, c.Message = metav1.ConditionTrue, strings.Join(said, "; ")
	c.Reason = porticov1.ReasonAnnouncedL2
	if bgp && !l2 {
		c.Reason = porticov1.ReasonAnnouncedBGP
	}
	if bgp {
		c.Message += bgpUnfit(svc, ips, f)
	}
	return c
}

// AnnouncedConditionOf is the Announced condition the health reconciler writes for svc, from
// the cluster's objects and the Speakers (for tests that compare it with the speakers' plans;
// the controller and the speaker never import each other).
func AnnouncedConditionOf(svc *corev1.Service, c rules.Cluster, speakers []porticov1.Speaker) metav1.Condition {
	c.Subnets, c.Holders = rules.SubnetsOf(speakers), rules.HoldersOf(speakers)
	return announcedCondition(svc, HealthFacts{Cluster: c, Speakers: speakers})
}

// cannotAnswer names a node that lists ip as its L2 announcement for the Service while its
// Speaker's DataPath condition says it answers no ARP or NDP (no CAP_NET_RAW), and why.
func cannotAnswer(key string, ip netip.Addr, speakers []porticov1.Speaker) (node, why string) {
	for i := range speakers {
		dp := meta.FindStatusCondition(speakers[i].Status.Conditions, porticov1.ConditionDataPath)
		if dp == nil || dp.Status != metav1.ConditionFalse || dp.Reason != porticov1.ReasonNetRawMissing {
			continue
		}
		if slices.ContainsFunc(speakers[i].Status.Announcements, func(a porticov1.Announcement) bool {
			return a.Protocol == porticov1.ProtocolL2 && a.Service == key && porticov1.SameAddr(a.IP, ip)
		}) {
			return speakers[i].Name, dp.Message
		}
	}
	return "", ""
}

// announcers describes who reports announcing ip for the Service: "10.0.0.200 from node
// worker-1 on eth0", "10.0.0.200 over BGP to peers tor-a,tor-b (told by node worker-1 for every
// node advertising it)". An L2 owner outside the address's subnets (subnets) is told: the
// speakers elect one only when no eligible node is on them.
func announcers(key string, ip netip.Addr, speakers []porticov1.Speaker, subnets rules.Subnets) (string, porticov1.Protocol) {
	var l2, l2ifs, bgpNodes, peers []string
	for i := range speakers {
		for _, a := range speakers[i].Status.Announcements {
			if a.Service != key || !porticov1.SameAddr(a.IP, ip) {
				continue
			}
			switch a.Protocol {
			case porticov1.ProtocolL2:
				l2 = append(l2, speakers[i].Name)
				l2ifs = append(l2ifs, a.Interfaces...)
			case porticov1.ProtocolBGP:
				bgpNodes = append(bgpNodes, speakers[i].Name)
				peers = append(peers, a.Peers...)
			}
		}
	}
	var parts []string
	proto := porticov1.ProtocolL2
	if len(l2) > 0 {
		on := "on every suitable interface"
		if len(l2ifs) > 0 {
			slices.Sort(l2ifs)
			on = "on " + strings.Join(slices.Compact(l2ifs), ",")
		}
		who := "node " + l2[0]
		if len(l2) > 1 {
			slices.Sort(l2)
			who = "nodes " + strings.Join(l2, ",") + " (more than one: see Reachable)"
		}
		part := fmt.Sprintf("from %s %s", who, on)
		if slices.ContainsFunc(l2, func(n string) bool { return !subnets.Reaches(n, ip) }) {
			part += " (" + rules.OffSubnetNote(ip) + ")"
		}
		parts = append(parts, part)
	}
	if len(bgpNodes) > 0 {
		if len(l2) == 0 {
			proto = porticov1.ProtocolBGP
		}
		slices.Sort(bgpNodes)
		slices.Sort(peers)
		nodes := "node "
		if len(bgpNodes) > 1 {
			nodes = "nodes "
		}
		// One node (the teller) lists a BGP address for every node that advertises it.
		parts = append(parts, fmt.Sprintf("over BGP to peers %s (told by %s%s for every node advertising it)", strings.Join(slices.Compact(peers), ","), nodes, strings.Join(bgpNodes, ",")))
	}
	if len(parts) == 0 {
		return "", ""
	}
	return ip.String() + " " + strings.Join(parts, " and "), proto
}

// noLiveSpeaker says that Speaker objects exist but none of their speakers renews its Lease:
// frozen, cut off from the apiserver, or gone without deleting it. The names are sorted: the
// message must not change (and cost a status write) with the order they were listed in.
func noLiveSpeaker(stale []string, lastRenewed time.Time) string {
	stale = slices.Sorted(slices.Values(stale))
	objects := "1 Speaker object"
	if len(stale) > 1 {
		objects = fmt.Sprintf("%d Speaker objects, all", len(stale))
	}
	last := "no Lease renewed"
	if !lastRenewed.IsZero() {
		last = "last Lease renewal " + lastRenewed.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("no live speaker: %s stale (%s; %s): are the speakers frozen, cut off from the apiserver, or gone?",
		objects, strings.Join(stale, ","), last)
}
