package plan_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/rules/election"
	"github.com/portico-lb/portico/speaker/plan"
	"github.com/portico-lb/portico/speaker/plan/plantest"
	"github.com/portico-lb/portico/speaker/status"
)

// planWorld is the cluster of the incremental tests: three nodes with InternalIPs, L2 for
// the pool labelled l2=yes, BGP with /30 aggregation (Services share routes), a
// serviceSelectors advertisement with its own local-pref (conflicts are reported) and a second
// peer that node-a does not hold.
func planWorld() plan.World {
	w := plantest.World()
	for i := range w.Nodes {
		w.Nodes[i].Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.0.%d", i+1)}}
	}
	w.BGPPeers = []v1alpha1.BGPPeer{
		{ObjectMeta: metav1.ObjectMeta{Name: "tor"}, Spec: v1alpha1.BGPPeerSpec{MyASN: 64500, PeerASN: 64500, PeerAddress: "192.168.0.254"}},
		// Not on node-a: node-a tells, and the next node lists the routes to spine.
		{ObjectMeta: metav1.ObjectMeta{Name: "spine"}, Spec: v1alpha1.BGPPeerSpec{MyASN: 64500, PeerASN: 64501, PeerAddress: "192.168.0.253",
			NodeSelectors: []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "zone", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"node-a"}}}}}}},
	}
	w.BGPAds = []v1alpha1.BGPAdvertisement{
		{ObjectMeta: metav1.ObjectMeta{Name: "agg"}, Spec: v1alpha1.BGPAdvertisementSpec{AggregationLength: ptr.To(int32(30)), LocalPref: ptr.To(uint32(100))}},
		{ObjectMeta: metav1.ObjectMeta{Name: "gold"}, Spec: v1alpha1.BGPAdvertisementSpec{AggregationLength: ptr.To(int32(30)), LocalPref: ptr.To(uint32(200)),
			ServiceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"tier": "gold"}}}}},
	}
	w.Advertisements[0].Spec.NodeSelectors = []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "zone", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"node-c"}}}}}
	return w
}

// randomService is one of a few Services with a random address of a few (so they share
// addresses and aggregated routes), policy, labels and endpoints; nil: deleted.
func randomService(r *rand.Rand, i int) (*corev1.Service, *discoveryv1.EndpointSlice) {
	if r.IntN(5) == 0 {
		return nil, nil
	}
	name := fmt.Sprintf("s%d", i)
	svc := plantest.LBService(name, fmt.Sprintf("198.51.100.%d", 10+r.IntN(6)))
	if r.IntN(4) == 0 {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: "2001:db8:1::" + fmt.Sprint(r.IntN(3))})
	}
	if r.IntN(6) == 0 {
		svc.Status.LoadBalancer.Ingress[0].IP = "203.0.113.1" // in no pool
	}
	if r.IntN(3) == 0 {
		svc.Labels = map[string]string{"tier": "gold"}
	}
	if r.IntN(3) == 0 {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	node, ready := plantest.NodeNames[r.IntN(len(plantest.NodeNames))], r.IntN(4) > 0
	return &svc, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.1"}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
}

// TestUpdateIsMakePlan: after every random batch of Service changes (new, edited, deleted;
// addresses shared, routes aggregated, Local policy, a conflicting local-pref, an address in no
// pool), each node's Planner.Update gives the plan Make gives from scratch, and its
// status lists the same announcements, with one node dead.
func TestUpdateIsMakePlan(t *testing.T) {
	checkUpdateIsMakePlan(t, planWorld, func(n string) bool { return n != "node-b" }, nil)
}

// TestUpdateIsMakePlanWhileBalancing: the same with every speaker alive, the L2 addresses held
// (sticky) and the balance on, so that Services changing start and end moves for balance; and
// now and then the holders change (Planner.Rehold), as the Speakers' statuses do.
func TestUpdateIsMakePlanWhileBalancing(t *testing.T) {
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	addrs := []string{"198.51.100.10", "198.51.100.11", "198.51.100.12", "198.51.100.13", "198.51.100.14", "198.51.100.15", "2001:db8:1::", "2001:db8:1::1", "2001:db8:1::2"}
	held := rules.Holders{}
	for _, ip := range addrs {
		held[netip.MustParseAddr(ip)] = []election.Holder{{Node: "node-a", Since: epoch}}
	}
	world := func() plan.World {
		w := planWorld()
		w.Speakers, w.Now, w.BalanceSettle = plantest.NodeNames, epoch.Add(time.Hour), time.Minute
		w.Holders = maps.Clone(held)
		return w
	}
	rehold := func(r *rand.Rand) rules.Holders {
		held = maps.Clone(held)
		ip := netip.MustParseAddr(addrs[r.IntN(len(addrs))])
		switch r.IntN(3) {
		case 0:
			delete(held, ip)
		case 1: // taken over, within the settle window or long ago
			held[ip] = []election.Holder{{Node: plantest.NodeNames[r.IntN(len(plantest.NodeNames))], Since: epoch.Add(time.Duration(r.IntN(2)) * 59 * time.Minute)}}
		default: // two claims
			held[ip] = append(slices.Clone(held[ip]), election.Holder{Node: plantest.NodeNames[r.IntN(len(plantest.NodeNames))], Since: epoch.Add(time.Minute)})
		}
		return maps.Clone(held)
	}
	checkUpdateIsMakePlan(t, world, plantest.AllAlive, rehold)
}

// checkUpdateIsMakePlan runs the random Service changes; rehold, when not nil, gives new
// holders at some steps, handed to the planners with Rehold.
func checkUpdateIsMakePlan(t *testing.T, world func() plan.World, alive func(string) bool, rehold func(*rand.Rand) rules.Holders) {
	r := rand.New(rand.NewPCG(17, 4))
	const services = 8
	svcs := map[int]*corev1.Service{}
	eps := map[int]*discoveryv1.EndpointSlice{}
	current := func() plan.World {
		w := world()
		for i := range services {
			if svcs[i] != nil {
				w.Services = append(w.Services, *svcs[i])
				w.EndpointSlices = append(w.EndpointSlices, *eps[i])
			}
		}
		return w
	}
	planners := map[string]*plan.Planner{}
	views := map[string]*status.View{}
	for _, n := range plantest.NodeNames {
		planners[n], views[n] = plan.NewPlanner(n, v1alpha1.DefaultLoadBalancerClass), &status.View{}
		planners[n].Replan(current(), alive)
	}
	for step := range 300 {
		var changed []corev1.Service
		var changedSlices []discoveryv1.EndpointSlice
		var keys []string
		for range 1 + r.IntN(3) {
			i := r.IntN(services)
			svcs[i], eps[i] = randomService(r, i)
			keys = append(keys, fmt.Sprintf("ns/s%d", i))
		}
		slices.Sort(keys)
		sortedKeys := slices.Compact(keys)
		for _, key := range sortedKeys {
			var i int
			fmt.Sscanf(key, "ns/s%d", &i)
			if svcs[i] != nil {
				changed = append(changed, *svcs[i])
				changedSlices = append(changedSlices, *eps[i])
			}
		}
		var reheld rules.Holders
		if rehold != nil && r.IntN(3) == 0 {
			reheld = rehold(r)
		}
		w := current()
		for _, n := range plantest.NodeNames {
			var before plan.Changes
			if reheld != nil {
				before = planners[n].Rehold(maps.Clone(reheld))
			}
			ch := planners[n].Update(changed, changedSlices, sortedKeys)
			ch.Mine = append(ch.Mine, before.Mine...)
			slices.SortFunc(ch.Mine, netip.Addr.Compare)
			ch.Mine = slices.Compact(ch.Mine)
			got, want := planners[n].Plan(), plan.Make(w, n, v1alpha1.DefaultLoadBalancerClass, alive)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d, node %s: Update gives\n%+v\nMake gives\n%+v", step, n, got, want)
			}
			views[n].Update(got, nil, ch.Mine, ch.Routed, ch.Prefixes(), false, time.Time{})
			st := views[n].Report(got, got.Problems)
			st.Status.BGP = status.BGPPeers(got.BGP, nil)
			views[n].Fill(&st.Status)
			if wantSt := status.OfPlan(want, nil); !reflect.DeepEqual(st.Status, wantSt.Status) {
				t.Fatalf("step %d, node %s: the status updated by the changes lists\n%+v\nfrom scratch\n%+v", step, n, st.Status, wantSt.Status)
			}
		}
	}
}

// TestUpdatePlansTheChangedServicesOnly: with 2000 Services planned, a change to one plans
// that one Service, and a batch of three plans three.
func TestUpdatePlansTheChangedServicesOnly(t *testing.T) {
	w := planWorld()
	ip := netip.MustParseAddr("198.51.100.0")
	w.Pools[0].Spec.Addresses = []v1alpha1.AddressRange{"198.51.100.0/20"}
	for i := range 2000 {
		w.Services = append(w.Services, plantest.LBService(fmt.Sprintf("s%04d", i), ip.String()))
		ip = ip.Next()
	}
	pl := plan.NewPlanner("node-a", v1alpha1.DefaultLoadBalancerClass)
	pl.Replan(w, plantest.AllAlive)
	if pl.Planned != 2000 {
		t.Fatalf("the first plan planned %d Services, want 2000", pl.Planned)
	}
	edited := plantest.LBService("s0007", ip.String())
	pl.Update([]corev1.Service{edited}, nil, []string{"ns/s0007"})
	if pl.Planned != 2001 {
		t.Fatalf("one change planned %d Services, want 1", pl.Planned-2000)
	}
	pl.Update([]corev1.Service{plantest.LBService("s0001", "198.51.100.1"), plantest.LBService("new", ip.Next().String())}, nil, []string{"ns/new", "ns/s0001", "ns/s0002"})
	if pl.Planned != 2003 {
		t.Fatalf("a batch of three changes (one deletion) planned %d Services, want 2", pl.Planned-2001)
	}
	if _, ok := pl.Plan().Routed[netip.MustParseAddr("198.51.100.2")]; ok {
		t.Errorf("the deleted Service's address is still routed")
	}
}

// TestPreviousOwner: the Planner remembers, across Replans, which node answered for an address
// before its owner changed, and forgets an address no Service lists. A starting node that owns
// an address from its first plan on takes it over from the owner elected without it.
func TestPreviousOwner(t *testing.T) {
	w := plantest.World()
	ip := netip.MustParseAddr("198.51.100.10")
	w.Services = []corev1.Service{plantest.LBService("web", ip.String())}
	first := plan.NewPlanner("node-a", v1alpha1.DefaultLoadBalancerClass)
	first.Replan(w, plantest.AllAlive)
	owner := first.Owner(ip)
	without := plan.NewPlanner("node-a", v1alpha1.DefaultLoadBalancerClass)
	without.Replan(w, func(n string) bool { return n != owner })
	second := without.Owner(ip)
	if owner == "" || second == "" || second == owner {
		t.Fatalf("owners %q and, without it, %q: want two nodes", owner, second)
	}
	var other string // neither owner: it never owns the address
	for _, n := range plantest.NodeNames {
		if n != owner && n != second {
			other = n
		}
	}
	bystander := plan.NewPlanner(other, v1alpha1.DefaultLoadBalancerClass)
	bystander.Replan(w, plantest.AllAlive)
	if bystander.PreviousOwner(ip) != "" {
		t.Errorf("%s's first plan: previous owner %q, want none", other, bystander.PreviousOwner(ip))
	}

	pl := plan.NewPlanner(owner, v1alpha1.DefaultLoadBalancerClass)
	pl.Replan(w, plantest.AllAlive)
	if pl.Owner(ip) != owner || pl.PreviousOwner(ip) != second {
		t.Fatalf("%s starting: owner %q, previous %q; want %s and %s, which answered meanwhile", owner, pl.Owner(ip), pl.PreviousOwner(ip), owner, second)
	}
	pl.Replan(w, func(n string) bool { return n != second })
	if pl.Owner(ip) != owner || pl.PreviousOwner(ip) != second {
		t.Fatalf("%s gone: owner %q, previous %q; want them unchanged", second, pl.Owner(ip), pl.PreviousOwner(ip))
	}
	pl.Replan(w, func(n string) bool { return n != owner })
	if pl.Owner(ip) != second || pl.PreviousOwner(ip) != owner {
		t.Fatalf("%s gone: owner %q, previous %q; want %s and %s", owner, pl.Owner(ip), pl.PreviousOwner(ip), second, owner)
	}
	pl.Replan(w, plantest.AllAlive)
	if pl.Owner(ip) != owner || pl.PreviousOwner(ip) != second {
		t.Fatalf("%s back: owner %q, previous %q; want %s and %s", owner, pl.Owner(ip), pl.PreviousOwner(ip), owner, second)
	}
	pl.Update(nil, nil, []string{"ns/web"})
	if pl.Owner(ip) != "" || pl.PreviousOwner(ip) != "" {
		t.Fatalf("Service deleted: owner %q, previous %q; want none", pl.Owner(ip), pl.PreviousOwner(ip))
	}
}
