package v1alpha1

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
)

// StrictARPHint is what a Service's Reachable condition adds when speakers report kube-proxy in
// IPVS mode without strictARP (their StrictARP condition False): those nodes answer ARP for
// every Service address, whoever is elected. "" when none does.
func StrictARPHint(speakers []Speaker) string {
	var nodes []string
	for i := range speakers {
		if meta.IsStatusConditionFalse(speakers[i].Status.Conditions, ConditionStrictARP) {
			nodes = append(nodes, speakers[i].Name)
		}
	}
	if len(nodes) == 0 {
		return ""
	}
	slices.Sort(nodes)
	return "; kube-proxy runs in IPVS mode without strictARP on " + strings.Join(nodes, ", ") +
		", so those nodes answer ARP for every Service address: set ipvs.strictARP: true in kube-proxy's configuration (see their Speaker's StrictARP condition)"
}
