package controller_test

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
	"github.com/portico-lb/portico/rules"
)

// create makes a cluster-scoped test object and deletes it when the test ends.
func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := cp.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), obj) })
}

// update reads obj, changes it and writes it back, again if the controller wrote in between
// (it writes Service status on its own schedule).
func update(t *testing.T, obj client.Object, change func()) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return cp.Client.Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// setSpeakerStatus changes a Speaker's status as the speaker on that node would.
func setSpeakerStatus(t *testing.T, s *porticov1.Speaker, change func(*porticov1.SpeakerStatus)) {
	t.Helper()
	if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
		t.Fatal(err)
	}
	change(&s.Status)
	if err := cp.Client.Status().Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// report sets what a speaker announces.
func report(t *testing.T, s *porticov1.Speaker, ann ...porticov1.Announcement) {
	t.Helper()
	setSpeakerStatus(t, s, func(st *porticov1.SpeakerStatus) { st.Announcements = ann })
}

func waitAnnounced(t *testing.T, ns, name string, status metav1.ConditionStatus, reason, message string) {
	t.Helper()
	waitCondition(t, ns, name, porticov1.ConditionAnnounced, status, reason, message)
}

// TestAnnounced walks one Service through every reason of Announced, changing one thing at a
// time: no speakers, no advertisement, nodes excluded by nodeSelectors, by a dead speaker and
// by the exclude label, externalTrafficPolicy Local without local endpoints, elected but not
// yet reporting, announced over L2, and over BGP.
func TestAnnounced(t *testing.T) {
	startManager(t)
	createPool(t, "announce", addresses("203.0.113.10-203.0.113.20"))
	ns := namespace(t, nil)
	createService(t, ns, "web")
	waitIPs(t, ns, "web", "203.0.113.10")
	waitAnnounced(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonNoSpeakers,
		"no speaker has reported (no Speaker objects): is the portico-speaker DaemonSet running?")

	nodeA := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	nodeB := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b", Labels: map[string]string{"zone": "b"}}}
	create(t, nodeA)
	create(t, nodeB)
	speakerA := &porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	create(t, speakerA)
	waitAnnounced(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonNoAdvertisement,
		"no L2Advertisement or BGPAdvertisement selects pool announce for this Service")

	// Only zone b may announce, and node-b runs no speaker.
	ad := &porticov1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "announce"}, Spec: porticov1.L2AdvertisementSpec{
		IPAddressPools: []porticov1.Name{"announce"},
		NodeSelectors:  []metav1.LabelSelector{{MatchLabels: map[string]string{"zone": "b"}}},
	}}
	create(t, ad)
	waitAnnounced(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonNoEligibleNode,
		"203.0.113.10: no eligible node (speaker not alive: node-b; not matched by nodeSelectors: node-a)")
	waitEvent(t, ns, "web", porticov1.ReasonNoEligibleNode, "not matched by nodeSelectors: node-a")

	// node-a joins zone b: it is elected, and says nothing yet.
	update(t, nodeA, func() { nodeA.Labels = map[string]string{"zone": "b"} })
	waitAnnounced(t, ns, "web", metav1.ConditionUnknown, porticov1.ReasonAnnouncePending,
		"node node-a is elected to answer for 203.0.113.10; its speaker does not report it yet")
	report(t, speakerA, porticov1.Announcement{IP: "203.0.113.10", Service: ns + "/web", Protocol: porticov1.ProtocolL2, Interfaces: []string{"eth0"}})
	waitAnnounced(t, ns, "web", metav1.ConditionTrue, porticov1.ReasonAnnouncedL2, "203.0.113.10 from node node-a on eth0")

	// externalTrafficPolicy Local, and node-a holds no endpoint: the speaker lets go.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
	update(t, svc, func() { svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal })
	report(t, speakerA)
	waitAnnounced(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonNoLocalEndpoints,
		"203.0.113.10: externalTrafficPolicy is Local: no eligible node (speaker not alive: node-b; no ready local endpoint (externalTrafficPolicy Local): node-a)")

	// Back to Cluster, and node-a carries the exclude label.
	update(t, svc, func() { svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster })
	update(t, nodeA, func() { nodeA.Labels[porticov1.LabelExcludeFromExternalLoadBalancers] = "" })
	waitAnnounced(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonNoEligibleNode,
		"203.0.113.10: no eligible node (speaker not alive: node-b; labelled node.kubernetes.io/exclude-from-external-load-balancers: node-a); "+
			"speakers run with --ignore-exclude-lb-label announce from labelled nodes")
	// A speaker that runs with --ignore-exclude-lb-label says so, and the controller elects
	// the labelled node as that speaker does.
	setSpeakerStatus(t, speakerA, func(st *porticov1.SpeakerStatus) { st.IgnoreExcludeLabel = true })
	waitAnnounced(t, ns, "web", metav1.ConditionUnknown, porticov1.ReasonAnnouncePending,
		"node node-a is elected to answer for 203.0.113.10; its speaker does not report it yet")
	setSpeakerStatus(t, speakerA, func(st *porticov1.SpeakerStatus) { st.IgnoreExcludeLabel = false })

	// The label goes, and node-a's network is unavailable, then it is NotReady.
	update(t, nodeA, func() { delete(nodeA.Labels, porticov1.LabelExcludeFromExternalLoadBalancers) })
	setNodeConditions(t, nodeA, corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue, Reason: "NoRouteCreated"})
	waitAnnounced(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonNoEligibleNode,
		"203.0.113.10: no eligible node (speaker not alive: node-b; condition NetworkUnavailable True: node-a)")
	setNodeConditions(t, nodeA, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown"})
	waitAnnounced(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonNoEligibleNode,
		"203.0.113.10: no eligible node (speaker not alive: node-b; not Ready: node-a)")

	// BGP instead of L2, by the rule the speakers apply (rules.BGPEligibilityOf): no BGPPeer
	// yet, so no node holds a session; then node-a does, but is not Ready.
	if err := cp.Client.Delete(context.Background(), ad); err != nil {
		t.Fatal(err)
	}
	create(t, &porticov1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "announce"},
		Spec: porticov1.BGPAdvertisementSpec{IPAddressPools: []porticov1.Name{"announce"}}})
	waitAnnounced(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonNoEligibleNode,
		"203.0.113.10: no node may advertise (speaker not alive: node-b; no BGP session (no BGPPeer selects it): node-a)")
	create(t, &porticov1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor-a"},
		Spec: porticov1.BGPPeerSpec{MyASN: 64513, PeerASN: 64512, PeerAddress: "198.51.100.1"}})
	waitAnnounced(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonNoEligibleNode,
		"203.0.113.10: no node may advertise (speaker not alive: node-b; not Ready: node-a)")
	// Ready: pending until a speaker reports advertising it.
	setNodeConditions(t, nodeA, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"})
	waitAnnounced(t, ns, "web", metav1.ConditionUnknown, porticov1.ReasonAnnouncePending,
		"node node-a should advertise 203.0.113.10 over BGP (to peers tor-a); no speaker reports it yet")
	report(t, speakerA, porticov1.Announcement{IP: "203.0.113.10", Service: ns + "/web", Protocol: porticov1.ProtocolBGP, Peers: []string{"tor-a", "tor-b"}})
	waitAnnounced(t, ns, "web", metav1.ConditionTrue, porticov1.ReasonAnnouncedBGP,
		"203.0.113.10 over BGP to peers tor-a,tor-b (told by node node-a for every node advertising it)")

	// A node that would advertise but is unfit says what becomes of its routes
	// (rules.BGPStandingOf): node-a not Ready (its report not yet taken back), then Ready and
	// cordoned.
	setNodeConditions(t, nodeA, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown"})
	waitAnnounced(t, ns, "web", metav1.ConditionTrue, porticov1.ReasonAnnouncedBGP,
		"203.0.113.10 over BGP to peers tor-a,tor-b (told by node node-a for every node advertising it); node node-a not Ready: its routes are withdrawn")
	setNodeConditions(t, nodeA, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"})
	update(t, nodeA, func() { nodeA.Spec.Unschedulable = true })
	waitAnnounced(t, ns, "web", metav1.ConditionTrue, porticov1.ReasonAnnouncedBGP,
		"203.0.113.10 over BGP to peers tor-a,tor-b (told by node node-a for every node advertising it); node node-a cordoned: its routes carry GRACEFUL_SHUTDOWN (65535:0), then are withdrawn after the speakers' --bgp-drain-grace while another node can advertise")
	update(t, nodeA, func() { nodeA.Spec.Unschedulable = false })
	waitAnnounced(t, ns, "web", metav1.ConditionTrue, porticov1.ReasonAnnouncedBGP,
		"203.0.113.10 over BGP to peers tor-a,tor-b (told by node node-a for every node advertising it)")
}

// setNodeConditions replaces the node's conditions, as a kubelet and the node controller would.
func setNodeConditions(t *testing.T, node *corev1.Node, conds ...corev1.NodeCondition) {
	t.Helper()
	if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(node), node); err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = conds
	if err := cp.Client.Status().Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
}

// TestAnnouncedSharedAddress: Services sharing an address have one owner, elected over every
// one of them (rules.L2Owner), as each speaker's plan elects it. web prefers node share-a (an
// advertisement for tier=gold Services); db has no preference, and on its own the hash would
// elect share-b. Both conditions name share-a, and both share-b once web loses its preference.
func TestAnnouncedSharedAddress(t *testing.T) {
	startManager(t)
	createPool(t, "shared-l2", addresses("203.0.113.31/32"))
	for _, n := range []struct{ name, link string }{{"share-a", "wired"}, {"share-b", "wifi"}} {
		create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{"link": n.link}}})
		create(t, &porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: n.name}})
	}
	create(t, &porticov1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "shared-l2"},
		Spec: porticov1.L2AdvertisementSpec{IPAddressPools: []porticov1.Name{"shared-l2"}}})
	create(t, &porticov1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "shared-l2-gold"}, Spec: porticov1.L2AdvertisementSpec{
		IPAddressPools:   []porticov1.Name{"shared-l2"},
		ServiceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"tier": "gold"}}},
		PreferredNodeSelectors: []porticov1.PreferredNodeSelector{{Weight: 100,
			Preference: metav1.LabelSelector{MatchLabels: map[string]string{"link": "wired"}}}}}})
	ns := namespace(t, nil)
	gold := func(s *corev1.Service) { s.Labels = map[string]string{"tier": "gold"} }
	createService(t, ns, "web", withSharingKey("k", 80), gold)
	createService(t, ns, "db", withSharingKey("k", 5432))
	for _, name := range []string{"web", "db"} {
		waitIPs(t, ns, name, "203.0.113.31")
		waitAnnounced(t, ns, name, metav1.ConditionUnknown, porticov1.ReasonAnnouncePending,
			"node share-a is elected to answer for 203.0.113.31; its speaker does not report it yet")
	}
	// web leaves tier gold: no Service prefers share-a any more, and db's condition follows a
	// change to web alone.
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
	update(t, web, func() { delete(web.Labels, "tier") })
	for _, name := range []string{"web", "db"} {
		waitAnnounced(t, ns, name, metav1.ConditionUnknown, porticov1.ReasonAnnouncePending,
			"node share-b is elected to answer for 203.0.113.31; its speaker does not report it yet")
	}
}

// TestAnnouncedNoLiveSpeaker: with Speaker objects whose speakers all let their Leases run out
// (frozen, cut off, or gone without deleting it), Announced says no speaker is live, names the
// stale ones and when a speaker last renewed, instead of asking whether the DaemonSet runs;
// once one renews again the condition moves on.
func TestAnnouncedNoLiveSpeaker(t *testing.T) {
	leases := namespace(t, nil)
	cp.RunManager(t, func(mgr ctrl.Manager) error {
		return controller.Setup(mgr, controller.Options{SpeakerNamespace: leases, NewsAfter: time.Hour})
	}, func(o *ctrl.Options) { controller.CacheOptions(o, leases) })
	createPool(t, "stale", addresses("203.0.113.30-203.0.113.31"))
	ns := namespace(t, nil)
	createService(t, ns, "web")
	waitIPs(t, ns, "web", "203.0.113.30")

	renewed := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	lease := func(node string, at time.Time, seconds int32) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: leases, Name: rules.SpeakerLeaseName(node), Labels: map[string]string{rules.SpeakerLeaseLabel: ""}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To(seconds),
				RenewTime: &metav1.MicroTime{Time: at}},
		}
	}
	leaseA := lease("stale-a", renewed, 15)
	create(t, leaseA)
	create(t, lease("stale-b", renewed.Add(-time.Minute), 15))
	create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stale-a"}})
	create(t, &porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: "stale-a"}})
	create(t, &porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: "stale-b"}})
	waitAnnounced(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonNoSpeakers,
		"no live speaker: 2 Speaker objects, all stale (stale-a,stale-b; last Lease renewal "+renewed.Format(time.RFC3339)+
			"): are the speakers frozen, cut off from the apiserver, or gone?")

	// stale-a's speaker renews again: it counts, and the next question is the advertisement.
	update(t, leaseA, func() {
		leaseA.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		leaseA.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
	})
	waitAnnounced(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonNoAdvertisement,
		"no L2Advertisement or BGPAdvertisement selects pool stale for this Service")
}
