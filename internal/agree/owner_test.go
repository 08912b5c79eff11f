// Package agree holds tests that run the controller's and the speaker's code side by side: the
// two never import each other, so what they must agree on is checked here.
package agree

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/plan"
)

const lbClass = v1alpha1.DefaultLoadBalancerClass

var (
	nodeNames = []string{"node-a", "node-b", "node-c", "node-d"}
	addrs     = []string{"198.51.100.1", "198.51.100.2", "203.0.113.1", "2001:db8::1"}
	elected   = regexp.MustCompile(`^node (\S+) is elected to answer for`)
)

// cluster is one random cluster: the objects both sides read, which nodes run a live speaker,
// and the subnets each reports in its Speaker status (absent: reports none) and the addresses
// it lists there as answered over L2 (the holders the owner rule keeps an address with).
type cluster struct {
	w       plan.World
	alive   map[string]bool
	subnets map[string][]string
	held    map[string][]v1alpha1.Announcement
}

// subnets are the LANs a node may have an up interface on; addrs fall in the first three.
var subnets = []string{"198.51.100.0/24", "203.0.113.0/28", "2001:db8::/64", "192.0.2.0/24"}

// randomCluster builds nodes (fitness, labels, exclusion, a dead speaker), two pools,
// L2Advertisements (pool, node and Service selectors, preferred nodes, interfaces) and
// Services that share a few addresses (some externalTrafficPolicy Local, with endpoints).
func randomCluster(r *rand.Rand) cluster {
	c := cluster{alive: map[string]bool{}, subnets: map[string][]string{}, held: map[string][]v1alpha1.Announcement{}}
	w := &c.w
	one := func(n int) bool { return r.IntN(n) == 0 }
	for _, name := range nodeNames[:1+r.IntN(len(nodeNames))] {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"zone": []string{"x", "y"}[r.IntN(2)], "link": []string{"wired", "wifi"}[r.IntN(2)]}}}
		if one(8) {
			n.Labels[v1alpha1.LabelExcludeFromExternalLoadBalancers] = ""
		}
		if one(8) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse})
		}
		if one(10) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue})
		}
		if one(10) {
			n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
		}
		n.Spec.Unschedulable = one(6)
		w.Nodes = append(w.Nodes, n)
		c.alive[name] = !one(6)
		if !one(4) {
			on := []string{}
			for _, p := range subnets {
				if one(2) {
					on = append(on, p)
				}
			}
			c.subnets[name] = on
		}
	}
	for _, n := range w.Nodes {
		for _, ip := range addrs {
			if one(4) {
				// Listed for a Service of its own, so the controller does not take it for an
				// announcement of the Service asked about; the owner rule reads every one.
				since := metav1.NewTime(time.Date(2026, 1, 1, 0, r.IntN(3), 0, 0, time.UTC))
				c.held[n.Name] = append(c.held[n.Name], v1alpha1.Announcement{IP: ip, Service: "other/held", Protocol: v1alpha1.ProtocolL2, Since: &since})
			}
		}
	}
	w.Subnets = rules.SubnetsOf(c.speakers())
	w.Holders = rules.HoldersOf(c.speakers())
	w.Pools = []v1alpha1.IPAddressPool{
		{ObjectMeta: metav1.ObjectMeta{Name: "pool-a", Labels: map[string]string{"l2": "yes"}},
			Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"198.51.100.0/29", "2001:db8::/125"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "pool-b"}, Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"203.0.113.0/29"}}},
	}
	sel := func(k, v string) metav1.LabelSelector {
		return metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	for i := range r.IntN(4) {
		ad := v1alpha1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ad-%d", i)}}
		switch r.IntN(3) {
		case 0:
			ad.Spec.IPAddressPools = []v1alpha1.Name{v1alpha1.Name([]string{"pool-a", "pool-b"}[r.IntN(2)])}
		case 1:
			ad.Spec.IPAddressPoolSelectors = []metav1.LabelSelector{sel("l2", "yes")}
		}
		if one(2) {
			ad.Spec.NodeSelectors = []metav1.LabelSelector{sel("zone", []string{"x", "y"}[r.IntN(2)])}
		}
		if one(2) {
			ad.Spec.PreferredNodeSelectors = []v1alpha1.PreferredNodeSelector{{Weight: int32(1 + r.IntN(100)), Preference: sel("link", "wired")}}
		}
		if one(4) {
			ad.Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "web")}
		}
		if one(3) {
			ad.Spec.Interfaces = []v1alpha1.InterfaceName{v1alpha1.InterfaceName([]string{"eth0", "eth1"}[r.IntN(2)])}
		}
		w.Advertisements = append(w.Advertisements, ad)
	}
	for i := range 1 + r.IntN(5) {
		name := fmt.Sprintf("s%d", i)
		ip := addrs[r.IntN(len(addrs))]
		svc := corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"app": []string{"web", "db"}[r.IntN(2)]},
				Annotations: map[string]string{v1alpha1.AnnotationAllowSharedIP: "key"}},
			Spec:   corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: ip}}}},
		}
		if one(3) {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			var eps []discoveryv1.Endpoint
			for range r.IntN(3) {
				node, ready := nodeNames[r.IntN(len(nodeNames))], !one(4)
				conds := discoveryv1.EndpointConditions{Ready: &ready}
				if !ready && len(eps)%2 == 0 { // an evicted pod serving on, without drawing (the draws stay as they were)
					serving := true
					conds.Serving, conds.Terminating = &serving, &serving
				}
				eps = append(eps, discoveryv1.Endpoint{Addresses: []string{"10.244.0.1"}, NodeName: &node, Conditions: conds})
			}
			w.EndpointSlices = append(w.EndpointSlices, discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
				Endpoints:  eps})
		}
		w.Services = append(w.Services, svc)
	}
	return c
}

// answerers are the live nodes whose speaker plan answers for ip of the Service key over L2.
func (c cluster) answerers(ip netip.Addr, key string) []string {
	var out []string
	for _, n := range c.w.Nodes {
		if !c.alive[n.Name] {
			continue
		}
		p := plan.Make(c.w, n.Name, lbClass, func(m string) bool { return c.alive[m] })
		if claim, ok := p.Mine[ip]; ok && slices.Contains(claim.Services, key) {
			out = append(out, n.Name)
		}
	}
	return out
}

// speakers are the live speakers' Speakers, as reported before they announce anything.
func (c cluster) speakers() []v1alpha1.Speaker {
	var out []v1alpha1.Speaker
	for _, n := range c.w.Nodes {
		if c.alive[n.Name] {
			out = append(out, v1alpha1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: n.Name},
				Status: v1alpha1.SpeakerStatus{Subnets: c.subnets[n.Name], Announcements: c.held[n.Name]}})
		}
	}
	return out
}

// named is the node the controller's Announced condition says is elected for ip while no
// speaker reports it ("" when it names none), and the condition.
func (c cluster) named(svc *corev1.Service) (string, metav1.Condition) {
	rc := c.w.Cluster()
	rc.Services = c.w.Services
	rc.Subnets, rc.Holders = nil, nil                          // the controller reads them from the Speakers
	cond := decide.AnnouncedConditionOf(svc, rc, c.speakers()) // every live speaker has reported, announcing nothing yet
	if m := elected.FindStringSubmatch(cond.Message); m != nil {
		return m[1], cond
	}
	return "", cond
}

// TestControllerNamesTheNodeThatAnswers: over random clusters, for every address of every
// Service with one address, the node the controller's Announced condition names as elected is
// the one node whose speaker plan answers for it, and when no plan answers the controller
// names no node. A node is elected off the address's subnets only when no eligible node is on
// them, and then the condition says so.
func TestControllerNamesTheNodeThatAnswers(t *testing.T) {
	r := rand.New(rand.NewPCG(32, 3))
	const clusters = 2000
	checked, offSubnet := 0, 0
	for i := range clusters {
		c := randomCluster(r)
		for j := range c.w.Services {
			svc := &c.w.Services[j]
			key := svc.Namespace + "/" + svc.Name
			ip := v1alpha1.IngressAddrs(svc)[0]
			answer := c.answerers(ip, key)
			node, cond := c.named(svc)
			checked++
			if len(answer) > 1 {
				t.Fatalf("cluster %d: %s of %s is answered by %v, more than one node\n%s", i, ip, key, answer, describe(c))
			}
			if want := strings.Join(answer, ""); node != want {
				t.Fatalf("cluster %d: %s of %s: the controller names %q (%s %s: %s), the speakers' plans answer from %q\n%s",
					i, ip, key, node, cond.Status, cond.Reason, cond.Message, want, describe(c))
			}
			if node == "" {
				continue
			}
			said := strings.Contains(cond.Message, rules.OffSubnetNote(ip))
			if off := !c.w.Subnets.Reaches(node, ip); off != said {
				t.Fatalf("cluster %d: %s of %s is answered by %s, off its subnets: %v, but the condition says %q\n%s", i, ip, key, node, off, cond.Message, describe(c))
			} else if off {
				offSubnet++
			}
		}
	}
	t.Logf("%d clusters, %d addresses checked, %d answered off their subnets (none eligible on them)", clusters, checked, offSubnet)
}

// describe prints a cluster for a failure message.
func describe(c cluster) string {
	var b strings.Builder
	for _, n := range c.w.Nodes {
		fmt.Fprintf(&b, "node %s alive=%v labels=%v unschedulable=%v taints=%v conditions=%v subnets=%v held=%v\n", n.Name, c.alive[n.Name], n.Labels, n.Spec.Unschedulable, n.Spec.Taints, n.Status.Conditions, c.subnets[n.Name], c.held[n.Name])
	}
	for _, ad := range c.w.Advertisements {
		fmt.Fprintf(&b, "L2Advertisement %s %+v\n", ad.Name, ad.Spec)
	}
	for _, s := range c.w.Services {
		fmt.Fprintf(&b, "Service %s labels=%v policy=%s ingress=%v\n", s.Name, s.Labels, s.Spec.ExternalTrafficPolicy, v1alpha1.IngressAddrs(&s))
	}
	for _, s := range c.w.EndpointSlices {
		for _, ep := range s.Endpoints {
			fmt.Fprintf(&b, "endpoint of %s on %s ready=%v\n", s.Labels[discoveryv1.LabelServiceName], *ep.NodeName, *ep.Conditions.Ready)
		}
	}
	return b.String()
}
