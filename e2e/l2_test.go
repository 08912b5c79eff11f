package e2e

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/rules/election"
)

// scenario is one Service with one address from its own pool, announced by its own
// L2Advertisement, so scenarios do not disturb each other.
type scenario struct {
	name  string
	ip    netip.Addr
	ad    v1alpha1.L2AdvertisementSpec
	local bool // externalTrafficPolicy: Local
	// byController: the Service asks for ip by annotation and a running controller writes its
	// status, instead of the test playing the controller.
	byController bool
}

// create writes pool, advertisement and Service, and plays the controller's part (unless
// s.byController): the Service's status gets the address and the pool annotation.
func (e *l2Env) create(s scenario) *corev1.Service {
	e.t.Helper()
	ad := &v1alpha1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: s.name}, Spec: s.ad}
	ad.Spec.IPAddressPools = []v1alpha1.Name{v1alpha1.Name(s.name)}
	e.createObject(ad)
	pool := []netip.Prefix{netip.PrefixFrom(s.ip, s.ip.BitLen())}
	if s.byController {
		return e.requestService(s.name, pool, s.local, s.ip)
	}
	return e.createService(s.name, pool, s.local, s.ip)
}

// createService writes a pool named name holding the prefixes and a LoadBalancer Service named
// name whose status holds ips from it, as the controller would have written it.
func (e *l2Env) createService(name string, pool []netip.Prefix, local bool, ips ...netip.Addr) *corev1.Service {
	e.t.Helper()
	svc := e.newService(name, pool, local)
	svc.Annotations = map[string]string{v1alpha1.AnnotationAllocatedFromPool: name}
	e.createObject(svc)
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip.String()})
	}
	must(e.t, e.c.Status().Update(context.Background(), svc))
	return svc
}

// requestService is createService with a running controller: the Service asks for ip by
// annotation and the controller writes its status.
func (e *l2Env) requestService(name string, pool []netip.Prefix, local bool, ip netip.Addr) *corev1.Service {
	e.t.Helper()
	svc := e.newService(name, pool, local)
	svc.Annotations = map[string]string{v1alpha1.AnnotationLoadBalancerIPs: ip.String()}
	e.createObject(svc)
	return svc
}

// newService creates the pool named name holding the prefixes and returns (unwritten) a
// LoadBalancer Service of that name selecting app=name.
func (e *l2Env) newService(name string, pool []netip.Prefix, local bool) *corev1.Service {
	p := &v1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, pfx := range pool {
		p.Spec.Addresses = append(p.Spec.Addresses, v1alpha1.AddressRange(pfx.String()))
	}
	e.createObject(p)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if local {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	return svc
}

// createObject creates obj and deletes it when the (sub)test ends.
func (e *l2Env) createObject(obj client.Object) {
	e.t.Helper()
	must(e.t, e.c.Create(context.Background(), obj))
	e.t.Cleanup(func() { _ = e.c.Delete(context.Background(), obj) })
}

// expectOwner waits until exactly want announces ip (Speaker status), answers it (arping sees
// only want's MAC) and the client resolves ip to it.
func (e *l2Env) expectOwner(ip netip.Addr, want string) {
	e.t.Helper()
	waitFor(e.t, want+" alone reports "+ip.String(), 20*time.Second, func() bool {
		return slices.Equal(e.announcers(ip), []string{want})
	})
	if ip.Is4() {
		if macs := e.arpingMACs(ip, 2); !slices.Equal(macs, []string{e.macOf(want)}) {
			e.t.Fatalf("ARP answers for %v came from %v, want only %s (%s)", ip, macs, want, e.macOf(want))
		}
	}
	waitFor(e.t, "client resolves "+ip.String()+" to "+want, 5*time.Second, func() bool {
		return netlab.Resolve(e.Client.NS, ip) == e.macOf(want)
	})
}

// settle waits until owner alone reports and answers ip and the client resolves it there. After
// a heal or a restart two nodes can answer for a short while (the isolated node kept answering;
// BENCHMARKS.md measures the window), so this polls, with a bound, instead of asserting at
// once.
func (e *l2Env) settle(ip netip.Addr, owner string) {
	waitFor(e.t, owner+" alone answers "+ip.String(), 10*time.Second, func() bool {
		return slices.Equal(e.announcers(ip), []string{owner}) &&
			(ip.Is6() || slices.Equal(e.arpingMACs(ip, 1), []string{e.macOf(owner)})) && // arping speaks IPv4 only
			netlab.Resolve(e.Client.NS, ip) == e.macOf(owner)
	})
}

// handsOver creates scenario name for ip and checks that once change is done to ip's owner
// (which undoes it at cleanup) the address moves to the next owner: the client's existing
// entry first, then everything expectOwner checks.
func (e *l2Env) handsOver(t *testing.T, name string, ip netip.Addr, change func(owner string)) {
	t.Helper()
	e.create(scenario{name: name, ip: ip})
	owner, next := ownerAndNext(ip)
	e.expectOwner(ip, owner)
	change(owner)
	waitFor(t, "client's entry moves to "+next, 20*time.Second, func() bool {
		return netlab.Neighbour(e.Client.NS, ip) == e.macOf(next)
	})
	e.expectOwner(ip, next)
}

// hashOwner is the owner election picks among the given nodes.
func hashOwner(ip netip.Addr, nodes ...string) string {
	o, _ := election.Owner(ip, nodes)
	return o
}

// ownerAndNext are the owner of ip among the three nodes, and the owner once it is gone.
func ownerAndNext(ip netip.Addr) (owner, next string) {
	all := []string{"node-a", "node-b", "node-c"}
	owner = hashOwner(ip, all...)
	return owner, hashOwner(ip, slices.DeleteFunc(all, func(n string) bool { return n == owner })...)
}

// heldBy waits until one node alone reports ip and returns it, with the node that takes over
// when it goes (the hash's choice among the other two): after a failover the address stays
// with the node that took it (placement is sticky), so the owner is not the hash's choice any
// more.
func (e *l2Env) heldBy(ip netip.Addr) (owner, next string) {
	e.t.Helper()
	// After a heal the address can go back for a moment (a takeover counts once the taker's
	// status is written; docs/speaker-l2.md), so the owner is the one node that announces and
	// alone answers in two polls in a row.
	var last string
	waitFor(e.t, "one node holds and alone answers "+ip.String(), 20*time.Second, func() bool {
		a := e.announcers(ip)
		now := ""
		if len(a) == 1 && (ip.Is6() || slices.Equal(e.arpingMACs(ip, 1), []string{e.macOf(a[0])})) {
			now = a[0]
		}
		owner, last = last, now
		return now != "" && owner == now
	})
	others := slices.DeleteFunc([]string{"node-a", "node-b", "node-c"}, func(n string) bool { return n == owner })
	return owner, hashOwner(ip, others...)
}

// notHashOwner is the last node (in list order) that the hash would not pick for ip.
func notHashOwner(ip netip.Addr, nodes []string) string {
	owner := hashOwner(ip, nodes...)
	for i := len(nodes) - 1; i >= 0; i-- {
		if nodes[i] != owner {
			return nodes[i]
		}
	}
	return ""
}

// failover checks that after hurting the owner the client's existing entry moves to the next
// owner, without the client asking again (the gratuitous announcement does it). It returns the
// time from the blow to the client's entry changing, measured by polling.
func (e *l2Env) failover(ip netip.Addr, hurt func(owner string)) (owner, next string, took time.Duration) {
	e.t.Helper()
	owner, next = ownerAndNext(ip)
	e.expectOwner(ip, owner)
	start := time.Now()
	hurt(owner)
	waitFor(e.t, "client's entry for "+ip.String()+" moves to "+next, 5*time.Second, func() bool {
		return netlab.Neighbour(e.Client.NS, ip) == e.macOf(next)
	})
	return owner, next, time.Since(start)
}

func TestL2(t *testing.T) {
	inLab(t, func(t *testing.T, e *l2Env) {
		all := []string{"node-a", "node-b", "node-c"}

		t.Run("speakers hold only the DaemonSet's capabilities", func(t *testing.T) {
			for _, n := range e.Nodes {
				e.Security.checkProcess(t, e.speakers[n.Name].cmd.Process.Pid, e.Speaker)
			}
		})

		t.Run("one owner answers", func(t *testing.T) {
			e.t = t
			ip := netip.MustParseAddr("198.51.100.200")
			svc := e.create(scenario{name: "basic", ip: ip})
			owner := hashOwner(ip, all...)
			e.expectOwner(ip, owner)
			waitFor(t, "event on the Service", 10*time.Second, func() bool {
				var evs corev1.EventList
				_ = e.c.List(context.Background(), &evs)
				for _, ev := range evs.Items {
					if ev.InvolvedObject.Name == svc.Name && ev.Reason == "Announced" &&
						ev.Message == "announcing 198.51.100.200 from node "+owner+" on eth0" {
						return true
					}
				}
				return false
			})
			var sp v1alpha1.Speaker
			must(t, e.c.Get(context.Background(), clientKey(owner), &sp))
			if sp.Status.L2Announcements != 1 || sp.Status.Announcements[0].Service != "default/basic" ||
				!slices.Equal(sp.Status.Announcements[0].Interfaces, []string{"eth0"}) {
				t.Fatalf("Speaker %s status: %+v", owner, sp.Status)
			}
		})

		for _, tc := range []struct {
			name string
			ip   string
			hurt func(e *l2Env, owner string)
		}{
			{"SIGKILL", "198.51.100.201", func(e *l2Env, owner string) { e.kill(owner, syscall.SIGKILL) }},
			{"SIGTERM", "198.51.100.202", func(e *l2Env, owner string) { e.kill(owner, syscall.SIGTERM) }},
			{"link cut", "198.51.100.203", func(e *l2Env, owner string) {
				run(t, "ip", "-n", e.Switch, "link", "set", e.node(owner).Port, "down")
			}},
			{"IPv6 SIGKILL", "2001:db8:1::204", func(e *l2Env, owner string) { e.kill(owner, syscall.SIGKILL) }},
		} {
			t.Run("failover after "+tc.name, func(t *testing.T) {
				e.t = t
				ip := netip.MustParseAddr(tc.ip)
				e.create(scenario{name: "fo-" + strings.ToLower(strings.ReplaceAll(strings.ReplaceAll(tc.name, " ", "-"), "IPv6", "v6")), ip: ip})
				owner, next, took := e.failover(ip, func(owner string) { tc.hurt(e, owner) })
				t.Logf("%s: client's entry moved from %s to %s %v after the blow", tc.name, owner, next, took.Round(time.Millisecond))
				// Heal: the owner comes back and takes nothing back (placement is sticky):
				// within a bounded time the node that took over is the only one answering.
				if tc.name == "link cut" {
					// The isolated owner never stopped answering on its side; once the group
					// merges it sees the later takeover and gives way.
					run(t, "ip", "-n", e.Switch, "link", "set", e.node(owner).Port, "up")
				} else {
					e.startSpeaker(owner)
				}
				e.settle(ip, next)
			})
		}

		t.Run("nodeSelectors restrict who answers", func(t *testing.T) {
			e.t = t
			ip := netip.MustParseAddr("198.51.100.205")
			// A node the hash would not pick, so the selector is what puts it there.
			only := notHashOwner(ip, all)
			e.create(scenario{name: "selectors", ip: ip, ad: v1alpha1.L2AdvertisementSpec{
				NodeSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": only}}}}})
			e.expectOwner(ip, only)
		})

		t.Run("preferredNodeSelectors: the preferred node answers, the others when it is gone", func(t *testing.T) {
			e.t = t
			ip := netip.MustParseAddr("198.51.100.213")
			// A node the hash would not pick, so the preference is what puts it there.
			preferred := notHashOwner(ip, all)
			e.create(scenario{name: "preferred", ip: ip, ad: v1alpha1.L2AdvertisementSpec{
				PreferredNodeSelectors: []v1alpha1.PreferredNodeSelector{{Weight: 100,
					Preference: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": preferred}}}}}})
			e.expectOwner(ip, preferred)
			fallback := hashOwner(ip, slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == preferred })...)
			e.kill(preferred, syscall.SIGKILL)
			// The killed speaker's Speaker status still lists the address: the network decides.
			waitFor(t, "client's entry moves to "+fallback, 20*time.Second, func() bool {
				return netlab.Neighbour(e.Client.NS, ip) == e.macOf(fallback)
			})
			if macs := e.arpingMACs(ip, 2); !slices.Equal(macs, []string{e.macOf(fallback)}) {
				t.Errorf("ARP answers for %v came from %v, want only %s", ip, macs, fallback)
			}
			// Back: the preferred node takes the address back.
			e.startSpeaker(preferred)
			e.settle(ip, preferred)
		})

		t.Run("interfaces restrict where it is answered", func(t *testing.T) {
			e.t = t
			ip := netip.MustParseAddr("198.51.100.206")
			e.create(scenario{name: "ifaces", ip: ip, ad: v1alpha1.L2AdvertisementSpec{Interfaces: []v1alpha1.InterfaceName{"eth9"}}})
			owner := hashOwner(ip, all...)
			waitFor(t, owner+" reports the missing interface", 20*time.Second, func() bool {
				var sp v1alpha1.Speaker
				if e.c.Get(context.Background(), clientKey(owner), &sp) != nil {
					return false
				}
				return slices.ContainsFunc(sp.Status.ConfigErrors, func(s string) bool { return strings.Contains(s, "eth9") })
			})
			if macs := e.arpingMACs(ip, 2); len(macs) != 0 {
				t.Fatalf("%v answered on eth0 although the advertisement names only eth9", macs)
			}
		})

		t.Run("exclude label moves ownership", func(t *testing.T) {
			e.t = t
			e.handsOver(t, "exclude", netip.MustParseAddr("198.51.100.207"), func(owner string) {
				setLabel(t, e, owner, v1alpha1.LabelExcludeFromExternalLoadBalancers, "")
				t.Cleanup(func() { setLabel(t, e, owner, v1alpha1.LabelExcludeFromExternalLoadBalancers, "-") })
			})
		})

		t.Run("a node whose network is unavailable hands over", func(t *testing.T) {
			e.t = t
			e.handsOver(t, "unfit", netip.MustParseAddr("198.51.100.212"), func(owner string) {
				setNodeConditions(t, e, owner, corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue})
				t.Cleanup(func() { setNodeConditions(t, e, owner) })
			})
		})

		t.Run("externalTrafficPolicy Local follows the endpoint", func(t *testing.T) {
			e.t = t
			ip := netip.MustParseAddr("198.51.100.208")
			svc := e.create(scenario{name: "local", ip: ip, local: true})
			// The endpoint sits on a node the hash would not pick.
			host := notHashOwner(ip, all)
			setEndpoint(t, e, svc, host)
			e.expectOwner(ip, host)
		})

		t.Run("malformed frames do not stop a speaker", func(t *testing.T) {
			e.t = t
			ip := netip.MustParseAddr("198.51.100.209")
			e.create(scenario{name: "garbage", ip: ip})
			owner := hashOwner(ip, all...)
			e.expectOwner(ip, owner)
			must(t, netlab.SendGarbage(e.Client.NS, 1000))
			run(t, "ip", "-n", e.Client.NS, "neigh", "flush", "all")
			e.expectOwner(ip, owner)
		})
	})
}
