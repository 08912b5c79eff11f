package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
	"github.com/portico-lb/portico/internal/netlab"
)

// TestSelfCheck: real speakers probe each other's addresses by ARP (IPv4) and NDP (IPv6) and
// the controller turns what they hear into the Service's Reachable condition. The owner alone
// answers (Answered); a foreign host in the client namespace takes the address (ForeignAnswer,
// for both families); a speaker cut off
// from the gossip claims every address, so two nodes answer (MultipleAnswers).
func TestSelfCheck(t *testing.T) {
	netlab.Require(t, "nft")
	inLab(t, func(t *testing.T, e *l2Env) {
		e.restartSpeakers([]string{"--self-check-interval", "300ms", "--self-check-wait", "100ms"})
		startInProcessController(t, e)
		all := []string{"node-a", "node-b", "node-c"}

		t.Run("foreign host answers", func(t *testing.T) {
			e.t = t
			took := e.foreignHostTakes(t, "foreign", netip.MustParseAddr("198.51.100.210"), all)
			t.Logf("ForeignAnswer on the Service %v after the foreign host took the address", took.Round(time.Millisecond))
			waitServiceEvent(t, e, "foreign", v1alpha1.ReasonForeignAnswer)
		})

		t.Run("IPv6 foreign host answers", func(t *testing.T) {
			e.t = t
			took := e.foreignHostTakes(t, "foreign6", netip.MustParseAddr("2001:db8:1::210"), all)
			t.Logf("IPv6: ForeignAnswer on the Service %v after the foreign host took the address", took.Round(time.Millisecond))
		})

		t.Run("split brain", func(t *testing.T) {
			e.t = t
			ip := netip.MustParseAddr("198.51.100.211")
			e.create(scenario{name: "split", ip: ip, byController: true})
			owner := hashOwner(ip, all...)
			e.waitReachable(t, "split", v1alpha1.ReasonAnswered, "answered by "+owner+" ("+e.macOf(owner)+") only")
			// Cut another node off the gossip (but not off the segment): it sees itself alone
			// and answers for every address.
			cut := notHashOwner(ip, all)
			isolateGossip(t, e.node(cut).NS)
			both := []string{owner, cut}
			slices.Sort(both)
			took := e.waitReachable(t, "split", v1alpha1.ReasonMultipleAnswers,
				fmt.Sprintf("%s (%s) and %s (%s) all answer: split brain", both[0], e.macOf(both[0]), both[1], e.macOf(both[1])))
			t.Logf("MultipleAnswers on the Service %v after %s was cut off the gossip", took.Round(time.Millisecond), cut)
		})
	})
}

// foreignHostTakes gives a Service ip, waits until its owner alone answers, then configures
// ip in the client namespace (whose kernel then answers ARP or NDP for it too) and returns how
// long the Service took to say ForeignAnswer.
func (e *l2Env) foreignHostTakes(t *testing.T, name string, ip netip.Addr, nodes []string) time.Duration {
	t.Helper()
	e.create(scenario{name: name, ip: ip, byController: true})
	owner := hashOwner(ip, nodes...)
	e.waitReachable(t, name, v1alpha1.ReasonAnswered, "answered by "+owner+" ("+e.macOf(owner)+") only")
	addr := netip.PrefixFrom(ip, ip.BitLen()).String()
	add := []string{"-n", e.Client.NS, "addr", "add", addr, "dev", "eth0"}
	if ip.Is6() {
		add = append(add, "nodad") // usable at once, not after duplicate address detection
	}
	run(t, "ip", add...)
	t.Cleanup(func() { _ = exec.Command("ip", "-n", e.Client.NS, "addr", "del", addr, "dev", "eth0").Run() })
	return e.waitReachable(t, name, v1alpha1.ReasonForeignAnswer, e.Client.MAC.String()+" answered, which no speaker owns")
}

// isolateGossip drops memberlist traffic (port 7946) in and out of a node's namespace.
func isolateGossip(t *testing.T, ns string) {
	t.Helper()
	rules := `table inet gossip {
  chain in { type filter hook input priority 0; udp dport 7946 drop; tcp dport 7946 drop; }
  chain out { type filter hook output priority 0; udp dport 7946 drop; tcp dport 7946 drop; }
}`
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "gossip").Run() })
}

// waitReachable waits for the Service's Reachable condition to have reason and a message
// containing want.
func (e *l2Env) waitReachable(t *testing.T, name, reason, want string) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var svc corev1.Service
		if e.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &svc) != nil {
			return false, nil
		}
		c := meta.FindStatusCondition(svc.Status.Conditions, v1alpha1.ConditionReachable)
		if c == nil {
			return false, nil
		}
		last = c.Reason + ": " + c.Message
		return c.Reason == reason && strings.Contains(c.Message, want), nil
	})
	if err != nil {
		e.dumpLogs()
		t.Fatalf("%s: want Reachable %s with %q; last %q", name, reason, want, last)
	}
	return time.Since(start)
}

func waitServiceEvent(t *testing.T, e *l2Env, name, reason string) {
	t.Helper()
	waitFor(t, reason+" event on "+name, 10*time.Second, func() bool {
		var evs corev1.EventList
		_ = e.c.List(context.Background(), &evs, client.InNamespace("default"))
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Name == name && ev.Reason == reason {
				return true
			}
		}
		return false
	})
}

// startInProcessController runs the controller's reconcilers against the lab's apiserver
// until the test ends. A problem that lasts 300 ms is an event here, not after 30 s as in a
// cluster: the tests wait for the events.
func startInProcessController(t *testing.T, e *l2Env) {
	e.cp.RunManager(t, func(mgr ctrl.Manager) error {
		return controller.Setup(mgr, controller.Options{NewsAfter: 300 * time.Millisecond})
	})
}
