package rules

import (
	"net/netip"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules/election"
)

// Cluster is what the L2 and BGP rules read of the cluster.
type Cluster struct {
	Nodes            []corev1.Node
	EndpointSlices   []discoveryv1.EndpointSlice
	L2Advertisements []v1alpha1.L2Advertisement
	Pools            []v1alpha1.IPAddressPool
	// Services are the Services Portico handles (Handles) that may share an address with the
	// one asked about: every one, or those listing the same address.
	Services []corev1.Service
	// IgnoreExcludeLabel is the speakers' --ignore-exclude-lb-label (ExcludedFromLB).
	IgnoreExcludeLabel bool
	// Subnets are where each node can answer (L2Owner elects among those that can).
	Subnets Subnets
	// Holders are the nodes answering for each address, from the Speakers' statuses (L2Owner
	// keeps an address with them).
	Holders Holders
	// Speakers are the nodes that run a speaker (have a Speaker): L2Rollout reads them.
	Speakers []string
	// BGPPeers and BGPAdvertisements are what BGPEligibilityOf reads besides the nodes, pools
	// and endpoints, and Drain what it knows of cordoned nodes' drains.
	BGPPeers          []v1alpha1.BGPPeer
	BGPAdvertisements []v1alpha1.BGPAdvertisement
	Drain             Drain
}

// Drain is what a speaker knows of drains (BGPStandingOf): when it first saw each cordoned node
// cordoned (one missing was cordoned at Now) and its --bgp-drain-grace. The controller and
// explain know neither (Known false): a cordoned node counts as within its grace.
type Drain struct {
	Known         bool
	Now           time.Time
	CordonedSince map[string]time.Time
	Grace         time.Duration
}

// CordonedFor is how long node has been seen cordoned (zero when just now).
func (d Drain) CordonedFor(node string) time.Duration {
	since, ok := d.CordonedSince[node]
	if !ok || since.After(d.Now) {
		return 0
	}
	return d.Now.Sub(since)
}

// grace is the drain grace, or one that never ends when it is not known.
func (d Drain) grace() time.Duration {
	if !d.Known {
		return time.Duration(1<<63 - 1)
	}
	return d.Grace
}

// Candidates describes every node for election under the L2Advertisements ads, and the
// interfaces node me would answer on (nil: all suitable; the union over the advertisements
// selecting me). local are the Service's endpoints on each node; ignoreExclude is
// ExcludedFromLB's.
func (c Selectors) Candidates(nodes []corev1.Node, ads []*v1alpha1.L2Advertisement, local LocalEndpoints, me string, alive func(string) bool, ignoreExclude bool) ([]election.Candidate, []string) {
	var myIfaces []string
	allIfaces := false
	cands := make([]election.Candidate, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		cand := election.Candidate{Name: n.Name, Alive: alive(n.Name), LocalEndpoint: local.Ready[n.Name] > 0, LocalServing: local.Serving[n.Name]}
		cand.Excluded = ExcludedFromLB(n, ignoreExclude)
		h := FitnessOf(n)
		cand.NotReady, cand.NetworkUnavailable, cand.OutOfService, cand.Cordoned = h.NotReady, h.NetworkUnavailable, h.OutOfService, h.Cordoned
		for _, ad := range ads {
			cand.Weight += c.preferenceOf(ad.Spec.PreferredNodeSelectors, n.Labels)
			if len(ad.Spec.NodeSelectors) > 0 && !c.MatchesAny(ad.Spec.NodeSelectors, n.Labels) {
				continue
			}
			cand.Selected = true
			if n.Name == me {
				if len(ad.Spec.Interfaces) == 0 {
					allIfaces = true
				}
				for _, ifc := range ad.Spec.Interfaces {
					myIfaces = append(myIfaces, string(ifc))
				}
			}
		}
		cands = append(cands, cand)
	}
	if allIfaces {
		return cands, nil
	}
	sort.Strings(myIfaces)
	return cands, slices.Compact(myIfaces)
}

// preferenceOf is the sum of the weights of the preferences that match a node's labels.
func (c Selectors) preferenceOf(prefs []v1alpha1.PreferredNodeSelector, nodeLabels map[string]string) int32 {
	var sum int32
	for i := range prefs {
		if c.Matches(&prefs[i].Preference, nodeLabels) {
			sum += prefs[i].Weight
		}
	}
	return sum
}

// ExcludedFromLB reports whether node n may not announce because it carries
// node.kubernetes.io/exclude-from-external-load-balancers (over L2 and BGP alike). ignore is
// the speakers' --ignore-exclude-lb-label, for single-node and control-plane-only clusters
// whose only nodes carry the label (kubeadm and kind put it on control-plane nodes).
func ExcludedFromLB(n *corev1.Node, ignore bool) bool {
	_, labelled := n.Labels[v1alpha1.LabelExcludeFromExternalLoadBalancers]
	return labelled && !ignore
}

// NodeFitness is whether a node is fit to announce: what the election reads of it besides its labels: the whole of it, so
// that a watch can tell a change that matters from a heartbeat by comparing two.
type NodeFitness struct {
	// NotReady: Ready is False or Unknown. NetworkUnavailable: NetworkUnavailable is True. A
	// node that reports neither condition (no kubelet has posted yet, or none runs, as in a
	// lab) counts as fit.
	NotReady, NetworkUnavailable bool
	// OutOfService: the node carries the node.kubernetes.io/out-of-service taint (any value or
	// effect), which an administrator puts on a node that is shut down or cut off, so that its
	// pods' volumes are detached and the pods run elsewhere; its kubelet may still say Ready
	// for a while, or its Ready may be stale, but traffic sent there is lost.
	OutOfService bool
	// Cordoned: spec.unschedulable, as kubectl drain sets it first.
	Cordoned bool
}

// Unfit reports whether the node cannot serve at all: not Ready, its network unavailable or
// out of service. Its addresses move at once, over L2 and BGP alike.
func (h NodeFitness) Unfit() bool { return h.NotReady || h.NetworkUnavailable || h.OutOfService }

// FitnessOf reads a node's NodeFitness.
func FitnessOf(n *corev1.Node) NodeFitness {
	h := NodeFitness{Cordoned: n.Spec.Unschedulable}
	for _, t := range n.Spec.Taints {
		h.OutOfService = h.OutOfService || t.Key == corev1.TaintNodeOutOfService
	}
	for _, c := range n.Status.Conditions {
		switch c.Type {
		case corev1.NodeReady:
			h.NotReady = c.Status != corev1.ConditionTrue
		case corev1.NodeNetworkUnavailable:
			h.NetworkUnavailable = c.Status == corev1.ConditionTrue
		}
	}
	return h
}

// LocalEndpoints are one externalTrafficPolicy: Local Service's endpoints by node.
type LocalEndpoints struct {
	// Ready counts the ready endpoints on each node (a node holding none is absent). The
	// counts weigh a node's BGP routes (BGPAdvertisement weightByEndpoints).
	Ready map[string]int
	// Serving are the nodes holding an endpoint that still serves while its pod terminates
	// (an evicted pod, kubectl drain's second step): kube-proxy sends the traffic of a node
	// with no ready endpoint to it (KEP-1669), so over L2 such a node answers when no node
	// with a ready endpoint may (election.Candidate.LocalServing).
	Serving map[string]bool
}

// LocalEndpointsOf maps each Service with externalTrafficPolicy Local (namespace/name) to its
// LocalEndpoints; no other Service needs to know. Built once per pass, so it costs Services +
// EndpointSlices, not their product.
func LocalEndpointsOf(svcs []corev1.Service, slices []discoveryv1.EndpointSlice) map[string]LocalEndpoints {
	out := map[string]LocalEndpoints{}
	for i := range svcs {
		if svcs[i].Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
			out[svcs[i].Namespace+"/"+svcs[i].Name] = LocalEndpoints{Ready: map[string]int{}, Serving: map[string]bool{}}
		}
	}
	if len(out) == 0 {
		return out
	}
	for i := range slices {
		s := &slices[i]
		local, ok := out[s.Namespace+"/"+s.Labels[discoveryv1.LabelServiceName]]
		if !ok {
			continue
		}
		for _, ep := range s.Endpoints {
			switch {
			case ep.NodeName == nil:
			case ReadyEndpoint(&ep):
				local.Ready[*ep.NodeName]++
			case ServingTerminating(&ep):
				local.Serving[*ep.NodeName] = true
			}
		}
	}
	return out
}

// ServingTerminating reports whether an endpoint still serves while its pod is terminating (discovery/v1's serving and terminating conditions, both set).
func ServingTerminating(ep *discoveryv1.Endpoint) bool {
	c := ep.Conditions
	return c.Serving != nil && *c.Serving && c.Terminating != nil && *c.Terminating
}

// ReadyEndpoint reports whether an endpoint is ready to receive traffic: its ready condition is
// true or unset (discovery/v1: consumers treat unknown as ready).
func ReadyEndpoint(ep *discoveryv1.Endpoint) bool {
	return ep.Conditions.Ready == nil || *ep.Conditions.Ready
}

// InternalIPs are the node's InternalIP addresses: where its speaker gossips from, and its BGP
// router ID and next hops.
func InternalIPs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); a.Type == corev1.NodeInternalIP && err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}
