package controller_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// reportSessions writes node's Speaker status as its speaker would: its sessions by peer.
func reportSessions(t *testing.T, node string, sessions map[string]string) {
	t.Helper()
	ctx := context.Background()
	sp := &porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(sp), sp); err != nil {
		if err := cp.Client.Create(ctx, sp); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cp.Client.Delete(ctx, sp) })
	}
	sp.Status.Sessions = nil
	for peer, state := range sessions {
		sp.Status.Sessions = append(sp.Status.Sessions, porticov1.PeerSession{Peer: peer, State: state, Since: &metav1.Time{Time: time.Now()}})
	}
	if err := cp.Client.Status().Update(ctx, sp); err != nil {
		t.Fatal(err)
	}
}

// waitForPeer polls the peer until its SessionsEstablished condition has the reason and message.
func waitForPeer(t *testing.T, name, reason, message string) porticov1.BGPPeer {
	t.Helper()
	var peer porticov1.BGPPeer
	var last *metav1.Condition
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &peer); err != nil {
			return false, err
		}
		last = meta.FindStatusCondition(peer.Status.Conditions, porticov1.ConditionSessionsEstablished)
		return last != nil && last.Reason == reason && last.Message == message, nil
	})
	if err != nil {
		t.Fatalf("BGPPeer %s: want %s %q, last seen %+v", name, reason, message, last)
	}
	return peer
}

// TestBGPPeerStatus: the controller folds the sessions the speakers report into the BGPPeer.
func TestBGPPeerStatus(t *testing.T) {
	startManager(t)
	ctx := context.Background()
	peer := &porticov1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor-status"},
		Spec: porticov1.BGPPeerSpec{MyASN: 64513, PeerASN: 64512, PeerAddress: "198.51.100.1"}}
	if err := cp.Client.Create(ctx, peer); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(ctx, peer) })
	waitForPeer(t, "tor-status", porticov1.ReasonNoSessions,
		"no speaker holds a session with this peer: no node matches its nodeSelectors, no speaker runs, or a speaker reports a problem in its Speaker status")

	reportSessions(t, "peer-node-b", map[string]string{"tor-status": "Active", "other": "Established"})
	reportSessions(t, "peer-node-a", map[string]string{"tor-status": "Established"})
	got := waitForPeer(t, "tor-status", porticov1.ReasonNotEstablished, "1 of 2 sessions not established: peer-node-b (Active)")
	if len(got.Status.Sessions) != 2 || got.Status.Sessions[0].Node != "peer-node-a" || got.Status.Sessions[1].State != "Active" {
		t.Fatalf("sessions %+v", got.Status.Sessions)
	}

	reportSessions(t, "peer-node-b", map[string]string{"tor-status": "Established"})
	waitForPeer(t, "tor-status", porticov1.ReasonAllEstablished, "2 of 2 sessions established")

	// A speaker that drops the session (the peer no longer selects its node) leaves the list.
	reportSessions(t, "peer-node-b", nil)
	got = waitForPeer(t, "tor-status", porticov1.ReasonAllEstablished, "1 of 1 sessions established")
	if len(got.Status.Sessions) != 1 || got.Status.Sessions[0].Node != "peer-node-a" {
		t.Fatalf("sessions %+v", got.Status.Sessions)
	}
}

// TestBGPPeerPrefixLimit: a session a speaker ceased for the peer's maxPrefixes shows on the
// BGPPeer with its reason, and the condition names the limit rather than a plain "not
// established".
func TestBGPPeerPrefixLimit(t *testing.T) {
	startManager(t)
	ctx := context.Background()
	peer := &porticov1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor-limit"},
		Spec: porticov1.BGPPeerSpec{MyASN: 64513, PeerASN: 64512, PeerAddress: "198.51.100.1"}}
	if err := cp.Client.Create(ctx, peer); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(ctx, peer) })
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(peer), peer); err != nil || peer.Spec.MaxPrefixes != porticov1.DefaultMaxPrefixes {
		t.Fatalf("maxPrefixes %d (%v), want the default %d", peer.Spec.MaxPrefixes, err, porticov1.DefaultMaxPrefixes)
	}
	reportSessions(t, "limit-node-a", map[string]string{"tor-limit": "Established"})
	reportSessions(t, "limit-node-b", map[string]string{"tor-limit": "Idle"})
	const why = "ceased by this node: the router sent more than 10000 routes in one address family"
	sp := &porticov1.Speaker{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: "limit-node-b"}, sp); err != nil {
		t.Fatal(err)
	}
	sp.Status.Sessions[0].Message, sp.Status.Sessions[0].Reason = why, porticov1.ReasonPrefixLimitReached
	if err := cp.Client.Status().Update(ctx, sp); err != nil {
		t.Fatal(err)
	}
	got := waitForPeer(t, "tor-limit", porticov1.ReasonPrefixLimitReached,
		"1 of 2 sessions not established: limit-node-b (Idle); ceased on limit-node-b because the router sent more routes than maxPrefixes "+
			"(the speakers use none: filter what the router sends them, or raise maxPrefixes)")
	if s := got.Status.Sessions[1]; s.Node != "limit-node-b" || s.Reason != porticov1.ReasonPrefixLimitReached || s.Message != why {
		t.Fatalf("session %+v", s)
	}
}
