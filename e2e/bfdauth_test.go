package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/bfd"
)

// birdBFDAuthConfig is birdBFDConfig with every BFD packet signed and checked: auth is bird's
// name for the type ("keyed sha1", "meticulous keyed sha1"), the key has ID 1.
func birdBFDAuthConfig(local netip.Addr, nodes []labNode, auth, key string) string {
	return strings.Replace(birdBFDConfig(local, nodes), "multiplier 5; }",
		fmt.Sprintf("multiplier 5; authentication %s; password %q { id 1; }; }", auth, key), 1)
}

// TestBFDAuthKeyedSHA1 and TestBFDAuthMeticulousKeyedSHA1: see bfdAuthWithBird.
func TestBFDAuthKeyedSHA1(t *testing.T) { bfdAuthWithBird(t, v1alpha1.BFDKeyedSHA1, "keyed sha1") }

func TestBFDAuthMeticulousKeyedSHA1(t *testing.T) {
	bfdAuthWithBird(t, v1alpha1.BFDMeticulousKeyedSHA1, "meticulous keyed sha1")
}

// bfdAuthWithBird runs bird2 with BFD authentication and three speakers whose BFDProfiles take
// the key from a Secret: node-a and node-b with bird's key, node-c with another. node-a's and
// node-b's sessions come Up on both sides; node-c's never does: it drops every packet of
// bird's for failing authentication (at least 20 counted) and bird never lists it Up. Then
// packets signed with a guessed key, spoofing the router from the LAN, change nothing on
// node-a.
func bfdAuthWithBird(t *testing.T, typ v1alpha1.BFDAuthenticationType, birdName string) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		router := e.Routers[0]
		const key = "0123456789abcdefghij" // the longest key: 20 bytes
		b := startBird(t, router.NS, birdBFDAuthConfig(router.IPv4.Addr(), e.Nodes, birdName, key))
		for name, k := range map[string]string{"right": key, "wrong": "0123456789abcdefghiX"} {
			e.createBFDAuthProfile(name, typ, k)
		}
		for name, nodes := range map[string][]string{"right": {"node-a", "node-b"}, "wrong": {"node-c"}} {
			peer := bgpPeer("tor-"+name, router.IPv4.Addr(), clusterASN, routerASN)
			peer.Spec.BFDProfile = v1alpha1.Name(name)
			peer.Spec.NodeSelectors = []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/hostname", Operator: metav1.LabelSelectorOpIn, Values: nodes}}}}
			e.createObject(peer)
		}
		signed := []string{"node-a", "node-b"}
		e.waitEstablished("tor-right", 30*time.Second, signed...)
		route := e.advertiseBFDService(router.NS, signed, "tor-right")
		waitFor(t, "bird's authenticated BFD sessions with node-a and node-b Up, and theirs", 15*time.Second, func() bool {
			return bfdUp(t, b, e.nodeIPs(false, signed...)...) &&
				e.bfdCounters(t, "node-a", "tor-right").up == 1 && e.bfdCounters(t, "node-b", "tor-right").up == 1
		})

		// The wrong key: node-c drops what bird sends, and neither side ever comes Up.
		waitFor(t, "node-c dropping 20 of bird's packets for failing authentication", 15*time.Second, func() bool {
			m, err := scrapeMetrics(context.Background(), e.node("node-c").IPv4.Addr().String()+":7474")
			return err == nil && sum(m, "portico_bfd_packets_dropped_total", map[string]string{"reason": "authentication"}) >= 20
		})
		if c := e.bfdCounters(t, "node-c", "tor-wrong"); c.up != 0 || c.changes != 0 {
			t.Fatalf("node-c's BFD session with the wrong key: up=%v after %v state changes", c.up, c.changes)
		}
		out, err := b.Birdc("show", "bfd", "sessions")
		must(t, err)
		if hasLine(out, e.node("node-c").IPv4.Addr().String(), " Up ") {
			t.Fatalf("bird lists its BFD session with node-c, which has the wrong key, Up:\n%s", out)
		}

		// Forged packets signed with a guessed key change nothing on node-a.
		e.expectForgeriesIgnored(t, b, "node-a", "tor-right", 5, route, signed, func() [][]byte {
			var out [][]byte
			for _, raw := range forgedPackets() {
				p, err := bfd.Unmarshal(raw)
				if err != nil { // the Up with Your Discriminator 0 is malformed before any key
					out = append(out, raw)
					continue
				}
				p.Auth = bfd.AuthSection{Type: map[v1alpha1.BFDAuthenticationType]bfd.AuthType{
					v1alpha1.BFDKeyedSHA1: bfd.AuthKeyedSHA1, v1alpha1.BFDMeticulousKeyedSHA1: bfd.AuthMeticulousKeyedSHA1}[typ],
					KeyID: 1, Sequence: rand.Uint32()}
				out = append(out, p.Signed("guessed").Marshal())
			}
			return out
		})
	})
}

// createBFDAuthProfile creates a BFDProfile (calmBFDMillis × 5) authenticated with key ID 1 and
// key, held in the Secret default/bfd-NAME.
func (e *l2Env) createBFDAuthProfile(name string, typ v1alpha1.BFDAuthenticationType, key string) {
	must(e.t, e.c.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bfd-" + name, Namespace: "default"},
		Data: map[string][]byte{"key": []byte(key)}}))
	ms, mult, keyID := uint32(calmBFDMillis), uint32(5), uint32(1)
	e.createObject(&v1alpha1.BFDProfile{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.BFDProfileSpec{
		ReceiveInterval: &ms, TransmitInterval: &ms, DetectMultiplier: &mult,
		Authentication: &v1alpha1.BFDAuthentication{Type: typ, KeyID: &keyID,
			SecretRef: v1alpha1.SecretKeyRef{Namespace: "default", Name: v1alpha1.Name("bfd-" + name), Key: "key"}}}})
}
