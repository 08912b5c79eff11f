package e2e

import (
	"context"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// TestConflictProbes: real speakers probe the addresses a pool hands out next (ARP probes from
// 0.0.0.0, DAD solicitations from ::). A foreign host on the LAN (the client namespace) holds
// the pool's first free IPv4 and IPv6 addresses: the pool's status lists both with the foreign
// MAC and the node that heard it, with a Warning event, and a new Service gets the address
// after; when the host lets the IPv4 address go, the next probe round hears nobody and the
// next Service gets it.
func TestConflictProbes(t *testing.T) {
	inLab(t, func(t *testing.T, e *l2Env) {
		e.restartSpeakers([]string{"--conflict-probe-interval", "500ms", "--conflict-probe-spacing", "100ms", "--self-check-interval", "0"})
		startInProcessController(t, e)
		all := []string{"node-a", "node-b", "node-c"}
		first4, first6 := netip.MustParseAddr("198.51.100.230"), netip.MustParseAddr("2001:db8:1::230")

		e.createObject(&v1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "conflicts"},
			Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"198.51.100.230-198.51.100.233", "2001:db8:1::230-2001:db8:1::233"}}})
		e.createObject(&v1alpha1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "conflicts"},
			Spec: v1alpha1.L2AdvertisementSpec{IPAddressPools: []v1alpha1.Name{"conflicts"}}})
		e.waitPool(t, "next addresses from .230 and ::230, nothing in use", func(p *v1alpha1.IPAddressPool) bool {
			return len(p.Status.NextAddresses) == 8 && p.Status.NextAddresses[0] == first4.String() &&
				p.Status.NextAddresses[4] == first6.String() && len(p.Status.InUse) == 0
		})

		foreign := e.Client.MAC.String()
		for _, ip := range []netip.Addr{first4, first6} {
			e.foreignHolds(t, ip)
		}
		took := e.waitPool(t, ".230 and ::230 in use by the client's MAC, heard by their probers", func(p *v1alpha1.IPAddressPool) bool {
			return slices.Equal(inUseOf(p), []string{
				first4.String() + " " + foreign + " " + hashOwner(first4, all...),
				first6.String() + " " + foreign + " " + hashOwner(first6, all...)})
		})
		t.Logf("the pool listed the foreign host's addresses %v after it took them", took.Round(time.Millisecond))
		waitFor(t, "Warning AddressInUse on the pool", 10*time.Second, func() bool {
			return e.poolEvent("conflicts", "Warning", v1alpha1.ReasonAddressInUse, first4.String())
		})

		e.poolService(t, "after-foreign")
		e.waitServiceIP(t, "after-foreign", "198.51.100.231")

		run(t, "ip", "-n", e.Client.NS, "addr", "del", netip.PrefixFrom(first4, 32).String(), "dev", "eth0")
		took = e.waitPool(t, ".230 released, ::230 still in use", func(p *v1alpha1.IPAddressPool) bool {
			return slices.Equal(inUseOf(p), []string{first6.String() + " " + foreign + " " + hashOwner(first6, all...)})
		})
		t.Logf("the pool released .230 %v after the foreign host dropped it", took.Round(time.Millisecond))
		e.poolService(t, "after-release")
		e.waitServiceIP(t, "after-release", first4.String())
		e.waitServiceIP(t, "after-foreign", "198.51.100.231")
	})
}

// foreignHolds configures ip in the client namespace, whose kernel then answers ARP or NDP
// for it: a host on the LAN already using a pool address.
func (e *l2Env) foreignHolds(t *testing.T, ip netip.Addr) {
	addr := netip.PrefixFrom(ip, ip.BitLen()).String()
	add := []string{"-n", e.Client.NS, "addr", "add", addr, "dev", "eth0"}
	if ip.Is6() {
		add = append(add, "nodad")
	}
	run(t, "ip", add...)
	t.Cleanup(func() { _ = exec.Command("ip", "-n", e.Client.NS, "addr", "del", addr, "dev", "eth0").Run() })
}

func inUseOf(p *v1alpha1.IPAddressPool) []string {
	var out []string
	for _, u := range p.Status.InUse {
		out = append(out, u.Address+" "+u.MAC+" "+u.SeenBy)
	}
	return out
}

// waitPool waits until the pool named conflicts satisfies ok, and returns how long it took.
func (e *l2Env) waitPool(t *testing.T, what string, ok func(*v1alpha1.IPAddressPool) bool) time.Duration {
	t.Helper()
	return e.waitPoolNamed(t, "conflicts", what, 30*time.Second, ok)
}

// waitPoolNamed waits, at most within, until the pool satisfies ok, and returns how long it
// took.
func (e *l2Env) waitPoolNamed(t *testing.T, name, what string, within time.Duration, ok func(*v1alpha1.IPAddressPool) bool) time.Duration {
	t.Helper()
	var last v1alpha1.IPAddressPoolStatus
	start := time.Now()
	if !pollUntil(within, func() bool {
		var p v1alpha1.IPAddressPool
		if e.c.Get(context.Background(), client.ObjectKey{Name: name}, &p) != nil {
			return false
		}
		last = p.Status
		return ok(&p)
	}) {
		e.dumpLogs()
		t.Fatalf("pool %s: want %s; last status next %v in use %+v", name, what, last.NextAddresses, last.InUse)
	}
	return time.Since(start)
}

// pollUntil polls cond until it holds or within has passed, and says whether it held.
func pollUntil(within time.Duration, cond func() bool) bool {
	return wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, within, true,
		func(context.Context) (bool, error) { return cond(), nil }) == nil
}

func (e *l2Env) poolEvent(pool, typ, reason, note string) bool {
	var evs eventsv1.EventList
	if err := e.c.List(context.Background(), &evs); err != nil {
		return false
	}
	return slices.ContainsFunc(evs.Items, func(ev eventsv1.Event) bool {
		return ev.Regarding.Kind == "IPAddressPool" && ev.Regarding.Name == pool && ev.Type == typ && ev.Reason == reason && strings.Contains(ev.Note, note)
	})
}

// poolService creates a Service asking for the conflicts pool, which the controller serves.
func (e *l2Env) poolService(t *testing.T, name string) {
	e.createObject(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
		Annotations: map[string]string{v1alpha1.AnnotationAddressPool: "conflicts"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}})
}

func (e *l2Env) waitServiceIP(t *testing.T, name, want string) {
	t.Helper()
	var got []corev1.LoadBalancerIngress
	if !pollUntil(30*time.Second, func() bool {
		var svc corev1.Service
		if e.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &svc) != nil {
			return false
		}
		got = svc.Status.LoadBalancer.Ingress
		return len(got) == 1 && got[0].IP == want
	}) {
		t.Fatalf("%s: want address %s, have %+v", name, want, got)
	}
}
