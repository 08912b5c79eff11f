package controller_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// waitForAdReady polls an advertisement (obj, of either kind) until its Ready condition has
// the reason and message, for its current generation.
func waitForAdReady(t *testing.T, obj client.Object, conds func() []metav1.Condition, reason, message string) {
	t.Helper()
	var last *metav1.Condition
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		last = meta.FindStatusCondition(conds(), porticov1.ConditionReady)
		return last != nil && last.Reason == reason && last.Message == message && last.ObservedGeneration == obj.GetGeneration(), nil
	})
	if err != nil {
		t.Fatalf("%s: want Ready %s %q, last seen %+v", obj.GetName(), reason, message, last)
	}
}

// adEvents are the events regarding the named advertisement, oldest first, as "type reason".
func adEvents(t *testing.T, name string) []string {
	t.Helper()
	var evs eventsv1.EventList
	if err := cp.Client.List(context.Background(), &evs); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		if e.Regarding.Name == name && (e.Regarding.Kind == "L2Advertisement" || e.Regarding.Kind == "BGPAdvertisement") {
			out = append(out, e.Type+" "+e.Reason)
		}
	}
	return out
}

func waitForAdEvent(t *testing.T, name, typ, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, e := range adEvents(t, name) {
			if e == typ+" "+reason {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s %s event on %s, have %v", typ, reason, name, adEvents(t, name))
	}
}

// TestAdvertisementStatus: the controller tells on each advertisement what it refers to that
// does not exist or selects nothing, and says Valid once it is fixed, with events on changes.
func TestAdvertisementStatus(t *testing.T) {
	startManager(t)
	ctx := context.Background()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var pools porticov1.IPAddressPoolList
		return cp.Client.List(ctx, &pools) == nil && len(pools.Items) == 0, nil
	})
	if err != nil {
		t.Fatal("pools of other tests are still there")
	}

	// No pool at all: an L2Advertisement that selects every pool announces nothing.
	every := &porticov1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "ad-every"}}
	create(t, every)
	l2Conds := func(ad *porticov1.L2Advertisement) func() []metav1.Condition {
		return func() []metav1.Condition { return ad.Status.Conditions }
	}
	waitForAdReady(t, every, l2Conds(every), porticov1.ReasonNoPool, "no IPAddressPool exists, so there is nothing to announce")
	waitForAdEvent(t, "ad-every", corev1.EventTypeWarning, porticov1.ReasonNoPool)

	// A pool named but missing (a typo), and nodeSelectors that match no node.
	typo := &porticov1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "ad-typo"}, Spec: porticov1.L2AdvertisementSpec{
		IPAddressPools: []porticov1.Name{"home-lab"},
		NodeSelectors:  []metav1.LabelSelector{{MatchLabels: map[string]string{"ad-test/link": "wired"}}}}}
	create(t, typo)
	waitForAdReady(t, typo, l2Conds(typo), porticov1.ReasonUnknownPool,
		"ipAddressPools names IPAddressPools that do not exist: home-lab; no IPAddressPool exists, so there is nothing to announce; nodeSelectors match none of the 0 Nodes, so no node announces")

	createPool(t, "home-lab", addresses("198.51.100.96/28"))
	waitForAdReady(t, every, l2Conds(every), porticov1.ReasonValid, "selects IPAddressPools home-lab; 0 of 0 Nodes may announce")
	waitForAdEvent(t, "ad-every", corev1.EventTypeNormal, porticov1.ReasonValid)
	waitForAdReady(t, typo, l2Conds(typo), porticov1.ReasonNoNode, "nodeSelectors match none of the 0 Nodes, so no node announces")

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ad-test-node", Labels: map[string]string{"ad-test/link": "wifi"}}}
	create(t, node)
	waitForAdReady(t, typo, l2Conds(typo), porticov1.ReasonNoNode, "nodeSelectors match none of the 1 Nodes, so no node announces")
	update(t, node, func() { node.Labels["ad-test/link"] = "wired" })
	waitForAdReady(t, typo, l2Conds(typo), porticov1.ReasonValid, "selects IPAddressPools home-lab; 1 of 1 Nodes may announce")
	waitForAdEvent(t, "ad-typo", corev1.EventTypeNormal, porticov1.ReasonValid)

	// BGP: a peer named but missing, pool selectors matching no pool, a malformed selector.
	bgp := &porticov1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "ad-bgp"}, Spec: porticov1.BGPAdvertisementSpec{
		Peers:                  []porticov1.Name{"tor-1"},
		IPAddressPoolSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"tier": "public"}}},
		ServiceSelectors:       []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Matches"}}}}}}
	create(t, bgp)
	bgpConds := func() []metav1.Condition { return bgp.Status.Conditions }
	waitForAdReady(t, bgp, bgpConds, porticov1.ReasonInvalidSelector,
		`serviceSelectors[0]: "Matches" is not a valid label selector operator; ipAddressPools and ipAddressPoolSelectors select none of the 1 IPAddressPools; peers names BGPPeers that do not exist: tor-1`)
	waitForAdEvent(t, "ad-bgp", corev1.EventTypeWarning, porticov1.ReasonInvalidSelector)

	update(t, bgp, func() { bgp.Spec.ServiceSelectors = nil })
	waitForAdReady(t, bgp, bgpConds, porticov1.ReasonNoPool,
		"ipAddressPools and ipAddressPoolSelectors select none of the 1 IPAddressPools; peers names BGPPeers that do not exist: tor-1")
	createPool(t, "public", porticov1.IPAddressPoolSpec{Addresses: []porticov1.AddressRange{"203.0.113.0/28"}})
	pool := &porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "public"}}
	update(t, pool, func() { pool.Labels = map[string]string{"tier": "public"} })
	waitForAdReady(t, bgp, bgpConds, porticov1.ReasonUnknownPeer, "peers names BGPPeers that do not exist: tor-1")
	create(t, &porticov1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor-1"},
		Spec: porticov1.BGPPeerSpec{MyASN: 64513, PeerASN: 64512, PeerAddress: "198.51.100.1"}})
	waitForAdReady(t, bgp, bgpConds, porticov1.ReasonValid, "selects IPAddressPools public; 1 of 1 Nodes may announce")

	// Events tell changes only: ad-typo's two problems and its recovery, not every write.
	if evs := adEvents(t, "ad-typo"); len(evs) != 3 {
		t.Fatalf("ad-typo events: %v, want UnknownPool, NoNode, Valid", evs)
	}
}
