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
	"github.com/portico-lb/portico/plugin/explain"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/plan"
)

var (
	shouldAdvertise = regexp.MustCompile(`^nodes? (\S+) should advertise`)
	advertisedBy    = regexp.MustCompile(`: advertised over BGP by nodes (\S+) `)
	drainNow        = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
)

// drainGrace is the speakers' --bgp-drain-grace in the random clusters.
const drainGrace = 30 * time.Second

// bgpCluster is one random cluster announced over BGP: the objects every side reads, the live
// speakers, and the nodes cordoned longer than the drain grace (the speakers saw them cordoned
// then; the controller cannot know when).
type bgpCluster struct {
	w     plan.World
	alive map[string]bool
	past  map[string]bool
}

// randomBGPCluster builds nodes (fitness, labels, exclusion, a dead speaker, InternalIPs of
// one family or both), a pool of each family, BGPPeers (IPv4, IPv6 or unnumbered, some for a
// rack only), BGPAdvertisements (pool, node and Service selectors, peers) and Services, some
// externalTrafficPolicy Local with endpoints.
func randomBGPCluster(r *rand.Rand) bgpCluster {
	c := bgpCluster{alive: map[string]bool{}, past: map[string]bool{}}
	w := &c.w
	w.Now, w.DrainGrace, w.CordonedSince = drainNow, drainGrace, map[string]time.Time{}
	one := func(n int) bool { return r.IntN(n) == 0 }
	for i, name := range nodeNames[:1+r.IntN(len(nodeNames))] {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"rack": []string{"r1", "r2"}[r.IntN(2)]}}}
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
		if n.Spec.Unschedulable = one(5); n.Spec.Unschedulable && one(2) {
			w.CordonedSince[name] = drainNow.Add(-time.Minute)
			c.past[name] = true
		}
		switch r.IntN(4) {
		case 0:
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("2001:db8:1::%d", i+1)}}
		case 1:
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("198.51.100.%d", 10+i)},
				{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("2001:db8:1::%d", i+1)}}
		default:
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("198.51.100.%d", 10+i)}}
		}
		w.Nodes = append(w.Nodes, n)
		c.alive[name] = !one(6)
	}
	w.Pools = []v1alpha1.IPAddressPool{
		{ObjectMeta: metav1.ObjectMeta{Name: "pool-a", Labels: map[string]string{"bgp": "yes"}},
			Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"198.51.100.0/29", "2001:db8::/125"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "pool-b"}, Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"203.0.113.0/29"}}},
	}
	sel := func(k, v string) metav1.LabelSelector {
		return metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	peerNames := []string{"tor-1", "tor-2", "tor-3"}
	for _, name := range peerNames[:r.IntN(len(peerNames)+1)] {
		p := v1alpha1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.BGPPeerSpec{MyASN: 64512, PeerASN: 64513,
			RouterID: "192.0.2.1"}}
		switch r.IntN(3) {
		case 0:
			p.Spec.PeerAddress = "2001:db8:ffff::1"
		case 1:
			p.Spec.Interface = "eth1"
		default:
			p.Spec.PeerAddress = "198.51.100.254"
		}
		if one(2) {
			p.Spec.NodeSelectors = []metav1.LabelSelector{sel("rack", []string{"r1", "r2"}[r.IntN(2)])}
		}
		w.BGPPeers = append(w.BGPPeers, p)
	}
	for i := range r.IntN(4) {
		ad := v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ad-%d", i)}}
		switch r.IntN(3) {
		case 0:
			ad.Spec.IPAddressPools = []v1alpha1.Name{v1alpha1.Name([]string{"pool-a", "pool-b"}[r.IntN(2)])}
		case 1:
			ad.Spec.IPAddressPoolSelectors = []metav1.LabelSelector{sel("bgp", "yes")}
		}
		if one(3) {
			ad.Spec.NodeSelectors = []metav1.LabelSelector{sel("rack", []string{"r1", "r2"}[r.IntN(2)])}
		}
		if one(3) {
			ad.Spec.Peers = []v1alpha1.Name{v1alpha1.Name(peerNames[r.IntN(len(peerNames))])}
		}
		if one(4) {
			ad.Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "web")}
		}
		w.BGPAds = append(w.BGPAds, ad)
	}
	for i := range 1 + r.IntN(4) {
		w.Services = append(w.Services, randomService(r, w, fmt.Sprintf("s%d", i)))
	}
	return c
}

// randomService is a LoadBalancer Service holding one of addrs, externalTrafficPolicy Local
// with endpoints on random nodes one time in three (its EndpointSlice added to w).
func randomService(r *rand.Rand, w *plan.World, name string) corev1.Service {
	svc := corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"app": []string{"web", "db"}[r.IntN(2)]}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
		Status:     corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: addrs[r.IntN(len(addrs))]}}}},
	}
	if r.IntN(3) == 0 {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		var eps []discoveryv1.Endpoint
		for range r.IntN(3) {
			node, ready := nodeNames[r.IntN(len(nodeNames))], r.IntN(4) != 0
			eps = append(eps, discoveryv1.Endpoint{Addresses: []string{"10.244.0.1"}, NodeName: &node,
				Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
		}
		w.EndpointSlices = append(w.EndpointSlices, discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			Endpoints:  eps})
	}
	return svc
}

// advertisers are the live nodes whose speaker plan advertises ip of the Service key over
// BGP, each with the peers it sends it to ("node-a>tor-1,tor-2").
func (c bgpCluster) advertisers(ip netip.Addr, key string) []string {
	var out []string
	for _, n := range c.w.Nodes {
		if !c.alive[n.Name] {
			continue
		}
		p := plan.Make(c.w, n.Name, lbClass, func(m string) bool { return c.alive[m] })
		var peers []string // those a route of ip for the Service goes to (Routed merges the Services sharing ip)
		for _, peer := range p.Routed[ip].Peers {
			if r, ok := p.BGP.Routes[peer][netip.PrefixFrom(ip, ip.BitLen())]; ok && slices.Contains(r.Services, key) {
				peers = append(peers, peer)
			}
		}
		if len(peers) > 0 {
			out = append(out, n.Name+">"+strings.Join(peers, ","))
		}
	}
	return out
}

// controllerView is the cluster as the controller reads it: the speakers of the live nodes,
// reporting nothing yet, and no knowledge of when each node was cordoned.
func (c bgpCluster) controllerView() (rules.Cluster, []v1alpha1.Speaker) {
	rc := c.w.Cluster()
	rc.Services, rc.Drain = c.w.Services, rules.Drain{}
	var speakers []v1alpha1.Speaker
	for _, n := range c.w.Nodes {
		if c.alive[n.Name] {
			speakers = append(speakers, v1alpha1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: n.Name}})
		}
	}
	return rc, speakers
}

// TestBGPSidesAgree: over random clusters, for every Service's address, the nodes whose
// speaker plans advertise it over BGP (and to which peers) are those the rule names
// (rules.BGPEligibilityOf with what the speakers know); the controller's Announced condition,
// while no speaker reports it, names those same nodes as Pending, or, when none advertises,
// is False with the reason; and kubectl portico explain names them too. The controller and
// explain do not know when a node was cordoned: they may name besides a cordoned node whose
// drain grace is over, and no other.
func TestBGPSidesAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(45, 1))
	const clusters = 3000
	checked, advertised := 0, 0
	for i := range clusters {
		c := randomBGPCluster(r)
		rc, speakers := c.controllerView()
		live := func(n string) bool { return c.alive[n] }
		for j := range c.w.Services {
			svc := &c.w.Services[j]
			key := svc.Namespace + "/" + svc.Name
			ip := v1alpha1.IngressAddrs(svc)[0]
			want := c.advertisers(ip, key)
			checked++
			if len(want) > 0 {
				advertised++
			}
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("cluster %d: %s of %s: the speakers' plans advertise from %v; %s\n%s", i, ip, key, want, fmt.Sprintf(format, args...), c.describe())
			}
			sc := c.w.Cluster()
			sc.Services = c.w.Services
			if got := ruleAdvertisers(rules.BGPEligibilityOf(sc, svc, ip, live)); !slices.Equal(got, want) {
				fail("the rule says %v", got)
			}
			cond := decide.AnnouncedConditionOf(svc, rc, speakers)
			named := nodesOf(shouldAdvertise, cond.Message)
			if extra, ok := c.onlyDrained(named, want); !ok {
				fail("the controller says %s %s: %s (names %v)", cond.Status, cond.Reason, cond.Message, extra)
			}
			if len(named) == 0 && (cond.Status != metav1.ConditionFalse || cond.Reason == v1alpha1.ReasonAnnouncePending) {
				fail("the controller says %s %s: %s", cond.Status, cond.Reason, cond.Message)
			}
			lines := strings.Join(explain.WhoAnnounces(rc, svc, live), "\n")
			if extra, ok := c.onlyDrained(nodesOf(advertisedBy, lines), want); !ok {
				fail("explain says %q (names %v)", lines, extra)
			}
		}
	}
	t.Logf("%d clusters, %d addresses checked, %d advertised by some node", clusters, checked, advertised)
}

// ruleAdvertisers are the rule's advertisers as advertisers lists them.
func ruleAdvertisers(e rules.BGPEligibility) []string {
	var out []string
	for _, a := range e.Advertisers {
		out = append(out, a.Node+">"+strings.Join(a.Peers, ","))
	}
	return out
}

// nodesOf are the nodes the first match of re in msg names, comma-separated.
func nodesOf(re *regexp.Regexp, msg string) []string {
	if m := re.FindStringSubmatch(msg); m != nil {
		return strings.Split(m[1], ",")
	}
	return nil
}

// onlyDrained reports whether named holds every node of want (advertisers' "node>peers") and
// besides only nodes cordoned past the drain grace, which it returns otherwise.
func (c bgpCluster) onlyDrained(named, want []string) ([]string, bool) {
	var wantNodes []string
	for _, w := range want {
		wantNodes = append(wantNodes, strings.Split(w, ">")[0])
	}
	extra := slices.DeleteFunc(slices.Clone(named), func(n string) bool { return slices.Contains(wantNodes, n) || c.past[n] })
	return extra, len(extra) == 0 && !slices.ContainsFunc(wantNodes, func(n string) bool { return !slices.Contains(named, n) })
}

// describe prints a cluster for a failure message.
func (c bgpCluster) describe() string {
	var b strings.Builder
	for _, n := range c.w.Nodes {
		fmt.Fprintf(&b, "node %s alive=%v labels=%v unschedulable=%v taints=%v past-grace=%v conditions=%v addresses=%v\n", n.Name, c.alive[n.Name], n.Labels,
			n.Spec.Unschedulable, n.Spec.Taints, c.past[n.Name], n.Status.Conditions, n.Status.Addresses)
	}
	for _, p := range c.w.BGPPeers {
		fmt.Fprintf(&b, "BGPPeer %s address=%q interface=%q nodeSelectors=%v\n", p.Name, p.Spec.PeerAddress, p.Spec.Interface, p.Spec.NodeSelectors)
	}
	for _, ad := range c.w.BGPAds {
		fmt.Fprintf(&b, "BGPAdvertisement %s %+v\n", ad.Name, ad.Spec)
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
