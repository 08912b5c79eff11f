package e2e

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// TestL2IPVSWithoutStrictARP: kube-proxy in IPVS mode puts every Service address on a dummy
// kube-ipvs0 on every node, and unless arp_ignore is 1 (its strictARP) every node's kernel
// answers ARP for them. Each node here gets such a device holding the Service's address: all
// three answer, the speakers say why in their StrictARP condition, and the Service's Reachable
// condition names it. With arp_ignore=1 the elected node alone answers and both say so.
func TestL2IPVSWithoutStrictARP(t *testing.T) {
	inLab(t, func(t *testing.T, e *l2Env) {
		e.restartSpeakers([]string{"--self-check-interval", "300ms", "--self-check-wait", "100ms"})
		startInProcessController(t, e)
		ip := netip.MustParseAddr("198.51.100.214")
		var nodes, macs []string
		for _, n := range e.Nodes {
			// kube-proxy makes a dummy device; this kernel may lack the dummy driver, and the
			// name is what the speaker looks for, so an empty bridge stands in.
			run(t, "ip", "-n", n.NS, "link", "add", "kube-ipvs0", "type", "bridge")
			run(t, "ip", "-n", n.NS, "link", "set", "kube-ipvs0", "up")
			run(t, "ip", "-n", n.NS, "addr", "add", ip.String()+"/32", "dev", "kube-ipvs0")
			run(t, "ip", "netns", "exec", n.NS, "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=0")
			nodes, macs = append(nodes, n.Name), append(macs, e.macOf(n.Name))
		}
		slices.Sort(macs)
		e.t = t
		e.create(scenario{name: "ipvs", ip: ip, byController: true})
		waitFor(t, "every node answers ARP for "+ip.String(), 20*time.Second, func() bool {
			return slices.Equal(e.arpingMACs(ip, 2), macs)
		})
		for _, n := range nodes {
			e.waitStrictARP(t, n, metav1.ConditionFalse, v1alpha1.ReasonIPVSWithoutStrictARP)
		}
		e.waitReachable(t, "ipvs", v1alpha1.ReasonMultipleAnswers,
			"kube-proxy runs in IPVS mode without strictARP on node-a, node-b, node-c, so those nodes answer ARP for every Service address")

		for _, n := range e.Nodes {
			run(t, "ip", "netns", "exec", n.NS, "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1")
		}
		// The speakers read arp_ignore when they plan: any change to their objects makes one.
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var svc corev1.Service
			if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "ipvs"}, &svc); err != nil {
				return err
			}
			svc.Labels = map[string]string{"strict-arp": "set"}
			return e.c.Update(context.Background(), &svc)
		}))
		for _, n := range nodes {
			e.waitStrictARP(t, n, metav1.ConditionTrue, v1alpha1.ReasonArpIgnoreSet)
		}
		owner := hashOwner(ip, nodes...)
		e.waitReachable(t, "ipvs", v1alpha1.ReasonAnswered, "answered by "+owner+" ("+e.macOf(owner)+") only")
		e.expectOwner(ip, owner)
	})
}

// waitStrictARP waits until node's Speaker has the StrictARP condition with status and reason.
func (e *l2Env) waitStrictARP(t *testing.T, node string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	waitFor(t, node+" reports StrictARP "+string(status)+" "+reason, 20*time.Second, func() bool {
		var sp v1alpha1.Speaker
		if e.c.Get(context.Background(), clientKey(node), &sp) != nil {
			return false
		}
		c := meta.FindStatusCondition(sp.Status.Conditions, v1alpha1.ConditionStrictARP)
		return c != nil && c.Status == status && c.Reason == reason
	})
}
