package controller_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// TestAnnouncedOutOfService: a node tainted node.kubernetes.io/out-of-service (its
// administrator says it is shut down or cut off) is unfit over L2 and BGP alike, as a NotReady
// node is, though its Ready condition still says True: Announced names the taint, and the node
// counts again once the taint goes (metallb#3116).
func TestAnnouncedOutOfService(t *testing.T) {
	startManager(t)
	createPool(t, "oos", addresses("203.0.113.40-203.0.113.41"))
	ns := namespace(t, nil)
	createService(t, ns, "web")
	waitIPs(t, ns, "web", "203.0.113.40")

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "oos-a"}}
	create(t, node)
	setNodeConditions(t, node, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"})
	create(t, &porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: "oos-a"}})
	l2 := &porticov1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "oos"}, Spec: porticov1.L2AdvertisementSpec{
		IPAddressPools: []porticov1.Name{"oos"}}}
	create(t, l2)
	waitAnnounced(t, ns, "web", metav1.ConditionUnknown, porticov1.ReasonAnnouncePending,
		"node oos-a is elected to answer for 203.0.113.40; its speaker does not report it yet")

	outOfService := corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}
	update(t, node, func() { node.Spec.Taints = []corev1.Taint{outOfService} })
	waitAnnounced(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonNoEligibleNode,
		"203.0.113.40: no eligible node (tainted node.kubernetes.io/out-of-service: oos-a)")

	// Over BGP, by the same rule.
	if err := cp.Client.Delete(context.Background(), l2); err != nil {
		t.Fatal(err)
	}
	create(t, &porticov1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "oos"},
		Spec: porticov1.BGPAdvertisementSpec{IPAddressPools: []porticov1.Name{"oos"}}})
	create(t, &porticov1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "oos-tor"},
		Spec: porticov1.BGPPeerSpec{MyASN: 64513, PeerASN: 64512, PeerAddress: "198.51.100.1"}})
	waitAnnounced(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonNoEligibleNode,
		"203.0.113.40: no node may advertise (tainted node.kubernetes.io/out-of-service: oos-a)")

	update(t, node, func() { node.Spec.Taints = nil })
	waitAnnounced(t, ns, "web", metav1.ConditionUnknown, porticov1.ReasonAnnouncePending,
		"node oos-a should advertise 203.0.113.40 over BGP (to peers oos-tor); no speaker reports it yet")
}
