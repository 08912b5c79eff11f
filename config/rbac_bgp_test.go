package config_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// rbacPeer is the BGPPeer TestRBAC adds, so the BGP path runs under the manifests' RBAC too.
const rbacPeer = "rbac-router"

// addBGPPath gives TestRBAC's cluster a BGP router for pool: a BGPPeer whose MD5 password
// is a Secret in Portico's namespace (the speakers granted get on it), and a BGPAdvertisement.
// The router is a loopback port nobody listens on: the speaker does all its API work for the
// session (reads the password, reports the session) while no packet leaves the machine.
func addBGPPath(t *testing.T, pool string) {
	t.Helper()
	ctx, c := context.Background(), cp.Client
	port, err := strconv.Atoi(freePort(t))
	must(t, err)
	must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "rbac-bgp-password", Namespace: systemNamespace},
		StringData: map[string]string{"password": "rbac-test"}}))
	// The speakers read the Secrets they are granted by name: grant this one as
	// docs/security.md tells a user to.
	kubectl(t, "-n", systemNamespace, "create", "role", "portico-speaker-bgp-secrets", "--verb=get", "--resource=secrets",
		"--resource-name=rbac-bgp-password")
	kubectl(t, "-n", systemNamespace, "create", "rolebinding", "portico-speaker-bgp-secrets", "--role=portico-speaker-bgp-secrets",
		"--serviceaccount="+systemNamespace+":portico-speaker")
	must(t, c.Create(ctx, &porticov1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: rbacPeer}, Spec: porticov1.BGPPeerSpec{
		MyASN: 64512, PeerASN: 64513, PeerAddress: "127.0.0.1", PeerPort: int32(port), RouterID: "198.51.100.1",
		PasswordSecret: &porticov1.SecretKeyRef{Namespace: systemNamespace, Name: "rbac-bgp-password", Key: "password"}}}))
	must(t, c.Create(ctx, &porticov1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "rbac"},
		Spec: porticov1.BGPAdvertisementSpec{IPAddressPools: []porticov1.Name{porticov1.Name(pool)}}}))
}

// checkBGPPath waits for the speaker on node to report its session with the router and to
// advertise ip to it, with no configuration error about the peer (so it read the password
// Secret), and for
// the controller to fold that session into the BGPPeer's status.
func checkBGPPath(t *testing.T, node, ip string) {
	t.Helper()
	poll(t, "Speaker "+node+" reports its session with "+rbacPeer+" and advertises "+ip+" to it", func(ctx context.Context) (bool, error) {
		var sp porticov1.Speaker
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: node}, &sp); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, e := range sp.Status.ConfigErrors {
			if strings.Contains(e, "BGPPeer "+rbacPeer) {
				t.Fatalf("Speaker %s: %s", node, e)
			}
		}
		session := slices.ContainsFunc(sp.Status.Sessions, func(s porticov1.PeerSession) bool { return s.Peer == rbacPeer })
		advertised := slices.ContainsFunc(sp.Status.Announcements, func(a porticov1.Announcement) bool {
			return a.IP == ip && a.Protocol == porticov1.ProtocolBGP && slices.Contains(a.Peers, rbacPeer)
		})
		return session && advertised, nil
	})
	poll(t, "the controller writes "+node+"'s session into BGPPeer "+rbacPeer+"'s status", func(ctx context.Context) (bool, error) {
		var p porticov1.BGPPeer
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: rbacPeer}, &p); err != nil {
			return false, err
		}
		return slices.ContainsFunc(p.Status.Sessions, func(s porticov1.BGPSessionState) bool { return s.Node == node }), nil
	})
}
