package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// TestBFDKeyUnusableSaysSo: a BGPPeer's bfdProfile takes its key from a Secret that does not
// exist. The speakers' BGP sessions come up without BFD (the router would drop unsigned
// packets anyway), and the BGPPeer's BFD condition says so, naming the nodes and the Secret,
// while SessionsEstablished is True. Once the Secret is there, every node runs BFD with the
// profile and the condition says that.
func TestBFDKeyUnusableSaysSo(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		startInProcessController(t, e)
		router := e.Routers[0]
		startBird(t, router.NS, birdConfig(router.IPv4.Addr(), e.Nodes, clusterASN, ""))
		ms, mult, keyID := uint32(calmBFDMillis), uint32(5), uint32(1)
		e.createObject(&v1alpha1.BFDProfile{ObjectMeta: metav1.ObjectMeta{Name: "signed"}, Spec: v1alpha1.BFDProfileSpec{
			ReceiveInterval: &ms, TransmitInterval: &ms, DetectMultiplier: &mult,
			Authentication: &v1alpha1.BFDAuthentication{Type: v1alpha1.BFDKeyedSHA1, KeyID: &keyID,
				SecretRef: v1alpha1.SecretKeyRef{Namespace: "default", Name: "bfd-signed", Key: "key"}}}})
		peer := bgpPeer("tor", router.IPv4.Addr(), clusterASN, routerASN)
		peer.Spec.BFDProfile = "signed"
		e.createObject(peer)
		e.waitEstablished("tor", 30*time.Second, "node-a", "node-b", "node-c")

		bp := &v1alpha1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor"}}
		conds := func() []metav1.Condition { return bp.Status.Conditions }
		e.waitCondition(t, 20*time.Second, bp, conds, v1alpha1.ConditionBFD, metav1.ConditionFalse, v1alpha1.ReasonBFDKeyUnusable,
			"node-a, node-b, node-c run without BFD: bfdProfile signed: authentication.secretRef default/bfd-signed cannot be read")

		must(t, e.c.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bfd-signed", Namespace: "default"},
			Data: map[string][]byte{"key": []byte("0123456789abcdefghij")}}))
		// The speakers read a Secret again at most every 30 s (it is not watched).
		e.waitCondition(t, 90*time.Second, bp, conds, v1alpha1.ConditionBFD, metav1.ConditionTrue, v1alpha1.ReasonBFDProfileApplied,
			"3 of 3 sessions run BFD with profile signed")
	})
}
