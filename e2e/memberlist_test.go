package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/membership"
)

// keyRefresh is how often the lab's speakers read the memberlist Secret again.
const keyRefresh = "300ms"

// TestMemberlist: the gossip group as strangers on the LAN and operators see it. The speakers
// run with an encryption key from a Secret. A process holding the key that joins under the
// name of a node it is not is refused by every speaker and changes no owner; the key is
// rotated in three Secret edits, without restarts, while a checker asks for two addresses all
// along: never two answerers, never none for longer than a failover.
func TestMemberlist(t *testing.T) {
	inLab(t, func(t *testing.T, e *l2Env) {
		ctx := context.Background()
		all := []string{"node-a", "node-b", "node-c"}
		oldKey, newKey := []byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210")
		must(t, e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "portico-system"}}))
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "portico-system", Name: "portico-memberlist"},
			Data: map[string][]byte{"secretkey": oldKey}}
		must(t, e.c.Create(ctx, secret))
		e.restartSpeakers([]string{"--memberlist-secret=portico-system/portico-memberlist", "--memberlist-key-refresh=" + keyRefresh})

		t.Run("a member claiming another node's name is refused", func(t *testing.T) {
			e.t = t
			// node-d exists at .14, where nothing runs; the intruder claims it from the
			// control plane's address.
			d := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-d", Labels: map[string]string{"kubernetes.io/hostname": "node-d"}}}
			e.createObject(d)
			d.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.14"}}
			must(t, e.c.Status().Update(ctx, d))
			var ips []netip.Addr
			moves := 0 // addresses node-d would own if it were believed
			for i := range 8 {
				ip := netip.MustParseAddr(fmt.Sprintf("198.51.100.%d", 220+i))
				e.create(scenario{name: fmt.Sprintf("claim-%d", i), ip: ip})
				ips = append(ips, ip)
				if hashOwner(ip, append(all, "node-d")...) == "node-d" {
					moves++
				}
			}
			if moves == 0 {
				t.Fatal("no address would move to node-d: the test cannot tell a refusal")
			}
			for _, ip := range ips {
				if got := e.soleAnnouncer(ip, 20*time.Second); got != hashOwner(ip, all...) {
					t.Fatalf("%s announced by %s, want %s", ip, got, hashOwner(ip, all...))
				}
			}
			intruder, err := membership.Start(membership.Config{Name: "node-d", BindAddr: e.CP.IPv4.Addr().String(), BindPort: 7946,
				Keys: membership.Keys{Primary: oldKey}, Detection: membership.DefaultDetection})
			must(t, err)
			defer func() { _ = intruder.Leave(time.Second) }()
			// Joining each speaker hands each the intruder's state (gossip alone reaches them
			// only in time).
			var speakers []string
			for _, n := range e.Nodes {
				speakers = append(speakers, membership.HostPort(n.IPv4.Addr().String(), 7946))
			}
			must(t, intruder.Join(speakers))
			want := "claims to be node node-d from " + e.CP.IPv4.Addr().String()
			waitFor(t, "every speaker reports the refusal", 20*time.Second, func() bool {
				for _, n := range all {
					var sp v1alpha1.Speaker
					if e.c.Get(ctx, clientKey(n), &sp) != nil ||
						!slices.ContainsFunc(sp.Status.ConfigErrors, func(p string) bool { return strings.Contains(p, want) }) {
						return false
					}
				}
				return true
			})
			for _, n := range all {
				if e.metric(n, "portico_memberlist_members_refused_total") == 0 {
					t.Errorf("%s counted no refused member", n)
				}
			}
			for _, ip := range ips {
				if got, owner := e.announcers(ip), hashOwner(ip, all...); !slices.Equal(got, []string{owner}) {
					t.Errorf("with the intruder in the group %s is announced by %v, want %s alone", ip, got, owner)
				}
			}
		})

		t.Run("key rotation without a split", func(t *testing.T) {
			e.t = t
			ips := []netip.Addr{netip.MustParseAddr("198.51.100.230"), netip.MustParseAddr("198.51.100.231")}
			for i, ip := range ips {
				e.create(scenario{name: fmt.Sprintf("rotate-%d", i), ip: ip})
				owner := hashOwner(ip, all...)
				waitFor(t, owner+" alone answers "+ip.String(), 20*time.Second, func() bool { return e.answeredOnlyBy(ip, owner) })
			}
			mon := e.monitorOutages(ips)
			changes := 0.0
			for _, step := range []struct {
				name     string
				primary  []byte
				accepted []byte
			}{{"accept the new key", oldKey, newKey}, {"encrypt with the new key", newKey, oldKey}, {"drop the old key", newKey, nil}} {
				must(t, e.c.Get(ctx, client.ObjectKeyFromObject(secret), secret))
				secret.Data = map[string][]byte{"secretkey": step.primary}
				if step.accepted != nil {
					secret.Data["acceptedkeys"] = step.accepted
				}
				must(t, e.c.Update(ctx, secret))
				changes++
				waitFor(t, "every speaker applies step "+step.name, 20*time.Second, func() bool {
					for _, n := range all {
						if e.metric(n, "portico_memberlist_key_changes_total") != changes {
							return false
						}
					}
					return true
				})
			}
			longest, worst := mon.finish()
			for ip, n := range mon.answeredTwice() {
				t.Errorf("%s answered by two nodes %d times during the rotation", ip, n)
			}
			if longest > 3*time.Second {
				t.Errorf("%s went unanswered for %s during the rotation (failover takes under a second)", worst, longest.Round(time.Millisecond))
			}
			t.Logf("rotation in three steps: longest gap between answers %s, no address answered twice", longest.Round(time.Millisecond))
			// The group really uses the new key alone: a speaker started now, which reads only
			// the new key, joins it.
			// node-a's addresses go to the others and stay there (placement is sticky).
			want := map[netip.Addr]string{}
			for _, ip := range ips {
				owner, next := e.heldBy(ip)
				want[ip] = owner
				if owner == "node-a" {
					want[ip] = next
				}
			}
			e.kill("node-a", syscall.SIGTERM)
			e.startSpeaker("node-a")
			for _, ip := range ips {
				owner := want[ip]
				waitFor(t, owner+" alone answers "+ip.String()+" after node-a's restart", 20*time.Second, func() bool { return e.answeredOnlyBy(ip, owner) })
			}
		})
	})
}
