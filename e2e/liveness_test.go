package e2e

import (
	"context"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
)

// TestAnnouncedCountsLiveSpeakers: a Service's Announced condition names only speakers that
// renew their Lease. The owner's speaker is frozen (SIGSTOP), stopped as a deleted pod's is
// (SIGTERM) or cut off (its link down); the address moves to the next node, and the condition,
// which named the owner, names the next node alone, although the owner's Speaker object still
// lists the address. Once the owner is back, it names the owner again.
func TestAnnouncedCountsLiveSpeakers(t *testing.T) {
	inLab(t, func(t *testing.T, e *l2Env) {
		const ns = "portico-system"
		must(t, e.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		e.restartSpeakers([]string{"--namespace", ns, "--lease-renew-interval", "1s"})
		e.cp.RunManager(t, func(mgr ctrl.Manager) error {
			return controller.Setup(mgr, controller.Options{NewsAfter: 300 * time.Millisecond, SpeakerNamespace: ns})
		}, func(o *ctrl.Options) { controller.CacheOptions(o, ns) })

		for _, tc := range []struct {
			name       string
			ip         string
			hurt, heal func(e *l2Env, owner string)
		}{
			{"frozen", "198.51.100.221",
				func(e *l2Env, owner string) { must(t, e.speakers[owner].cmd.Process.Signal(syscall.SIGSTOP)) },
				func(e *l2Env, owner string) { must(t, e.speakers[owner].cmd.Process.Signal(syscall.SIGCONT)) }},
			{"deleted", "198.51.100.222",
				func(e *l2Env, owner string) { e.kill(owner, syscall.SIGTERM) },
				func(e *l2Env, owner string) { e.startSpeaker(owner) }},
			{"partitioned", "198.51.100.223",
				func(e *l2Env, owner string) { run(t, "ip", "-n", e.Switch, "link", "set", e.node(owner).Port, "down") },
				func(e *l2Env, owner string) { run(t, "ip", "-n", e.Switch, "link", "set", e.node(owner).Port, "up") }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e.t = t
				ip := netip.MustParseAddr(tc.ip)
				name := "live-" + tc.name
				e.create(scenario{name: name, ip: ip, byController: true})
				healed := false
				t.Cleanup(func() { // a failure must not leave the next case a node short
					if owner, _ := ownerAndNext(ip); !healed {
						tc.heal(e, owner)
					}
				})
				owner, next, _ := e.failover(ip, func(owner string) { tc.hurt(e, owner) })
				took := e.waitAnnounced(t, name, ip.String()+" from node "+next+" on ")
				t.Logf("%s: Announced names %s alone %v after the client's entry moved from %s", tc.name, next, took.Round(time.Millisecond), owner)
				tc.heal(e, owner)
				healed = true
				// The owner back takes nothing back: the node that took over keeps it.
				e.settle(ip, next)
				e.waitAnnounced(t, name, ip.String()+" from node "+next+" on ")
			})
		}
	})
}

// waitAnnounced waits for the Service's Announced condition to be True with a message
// containing want, and says how long that took.
func (e *l2Env) waitAnnounced(t *testing.T, name, want string) time.Duration {
	t.Helper()
	var last string
	return waitFor(t, "Announced on "+name+" says "+want, 30*time.Second, func() bool {
		var svc corev1.Service
		if e.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &svc) != nil {
			return false
		}
		c := meta.FindStatusCondition(svc.Status.Conditions, v1alpha1.ConditionAnnounced)
		if c == nil {
			return false
		}
		if now := string(c.Status) + " " + c.Reason + ": " + c.Message; now != last {
			last = now
			t.Logf("Announced: %s", now)
		}
		return c.Status == metav1.ConditionTrue && strings.Contains(c.Message, want)
	})
}
