package decide

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// reachableCondition is the Service's Reachable condition, from the speakers' self-checks:
// the speakers that do not own an address probe it (ARP/NDP) and report which MACs answered.
// A MAC is known when some speaker lists it among its hardware addresses; the expected
// answer is the MAC of a node that reports announcing the address over L2.
func reachableCondition(svc *corev1.Service, speakers []porticov1.Speaker) metav1.Condition {
	c := metav1.Condition{Type: porticov1.ConditionReachable, ObservedGeneration: svc.Generation}
	ips := porticov1.IngressAddrs(svc)
	if len(ips) == 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, porticov1.ReasonNoAddress, "nothing to probe until the Service has an address"
		return c
	}
	owner := map[string]string{} // MAC → node
	for i := range speakers {
		for _, mac := range speakers[i].Status.HardwareAddrs {
			owner[strings.ToLower(mac)] = speakers[i].Name
		}
	}
	key := svc.Namespace + "/" + svc.Name
	var fine []string
	for _, ip := range ips {
		status, reason, msg := reachable(key, ip, speakers, owner)
		if status != metav1.ConditionTrue {
			c.Status, c.Reason, c.Message = status, reason, msg+porticov1.StrictARPHint(speakers)
			return c
		}
		fine = append(fine, msg)
	}
	c.Status, c.Reason, c.Message = metav1.ConditionTrue, porticov1.ReasonAnswered, strings.Join(fine, "; ")
	return c
}

func reachable(key string, ip netip.Addr, speakers []porticov1.Speaker, owner map[string]string) (metav1.ConditionStatus, string, string) {
	var probers, announcers []string
	heard := map[string]bool{}
	for i := range speakers {
		s := &speakers[i]
		for _, a := range s.Status.Announcements {
			if a.Service == key && a.Protocol == porticov1.ProtocolL2 && porticov1.SameAddr(a.IP, ip) {
				announcers = append(announcers, s.Name)
			}
		}
		for _, sc := range s.Status.SelfChecks {
			if porticov1.SameAddr(sc.IP, ip) {
				probers = append(probers, s.Name)
				for _, mac := range sc.MACs {
					heard[strings.ToLower(mac)] = true
				}
			}
		}
	}
	if len(probers) == 0 {
		return metav1.ConditionUnknown, porticov1.ReasonNotProbed,
			fmt.Sprintf("no speaker reports a probe of %s (self-check switched off, or no node besides the owner)", ip)
	}
	by := "probed by " + strings.Join(probers, ",")
	var foreign, nodes []string
	for _, mac := range slices.Sorted(maps.Keys(heard)) {
		if n, ok := owner[mac]; ok {
			nodes = append(nodes, n+" ("+mac+")")
		} else {
			foreign = append(foreign, mac)
		}
	}
	switch {
	case len(foreign) > 0:
		return metav1.ConditionFalse, porticov1.ReasonForeignAnswer,
			fmt.Sprintf("%s: %s answered, which no speaker owns: another host uses the address (%s)", ip, strings.Join(foreign, ","), by)
	case len(nodes) > 1:
		return metav1.ConditionFalse, porticov1.ReasonMultipleAnswers,
			fmt.Sprintf("%s: %s all answer: split brain (%s)", ip, strings.Join(nodes, " and "), by)
	case len(nodes) == 0:
		expect := "no node announces it"
		if len(announcers) > 0 {
			expect = "expected " + strings.Join(announcers, ",")
		}
		return metav1.ConditionFalse, porticov1.ReasonNoAnswer, fmt.Sprintf("%s: nobody answered (%s; %s)", ip, expect, by)
	}
	node, _, _ := strings.Cut(nodes[0], " ")
	if !slices.Contains(announcers, node) {
		return metav1.ConditionFalse, porticov1.ReasonStaleAnswer,
			fmt.Sprintf("%s: answered by %s, which does not announce it (announced by %s) (%s)", ip, nodes[0], strings.Join(announcers, ","), by)
	}
	return metav1.ConditionTrue, porticov1.ReasonAnswered, fmt.Sprintf("%s: answered by %s only (%s)", ip, nodes[0], by)
}
