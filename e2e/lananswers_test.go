package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
)

// homeLab is the home-lab pool, inside the lab's namespaces only: no interface holds its
// subnet, so the speakers probe it on every suitable interface (eth0).
var homeLab = netip.MustParsePrefix("10.0.0.192/27")

// TestLANCannotStopAllocation: the LAN cannot keep the home-lab pool's Services from their
// addresses. Beside the speakers, the LAN holds a router with the kernel's proxy ARP on, which
// answers for the whole pool's subnet (routed through another of its interfaces), and a host
// that forges ARP: it sends unsolicited and gratuitous replies for every pool address in a
// loop. Those count for nothing: while the client holds .201 (its kernel answers the probes),
// the pool lists .201 alone, and nothing once the client lets it go. Then the forger answers
// every request for a pool address too, the speakers' probes included: it is reported as a
// proxy answerer, no address is held back, and Gitea, ArgoCD, Harbor and Grafana get
// .200-.203.
func TestLANCannotStopAllocation(t *testing.T) {
	inLANLab(t, []string{"proxyarp", "forger"}, func(t *testing.T, e *l2Env) {
		e.restartSpeakers([]string{"--conflict-probe-interval", "500ms", "--conflict-probe-spacing", "100ms", "--self-check-interval", "0"})
		startInProcessController(t, e)
		proxy, forger := e.LAN[0], e.LAN[1]
		proxyARP(t, proxy.NS)
		forge := forgeARP(t, forger.NS, forger.MAC, homeLab)
		defer forge.stop()

		e.createObject(&v1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "home-lab"},
			Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"10.0.0.200-10.0.0.215"}}})
		e.createObject(&v1alpha1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "home-lab"},
			Spec: v1alpha1.L2AdvertisementSpec{IPAddressPools: []v1alpha1.Name{"home-lab"}}})
		// The router does answer for the pool: a client asking (from its own address) hears it.
		if macs := e.arpingMACs(netip.MustParseAddr("10.0.0.210"), 2); !slices.Contains(macs, proxy.MAC.String()) {
			t.Fatalf("arping 10.0.0.210 from the client heard %v, not the proxy ARP router %v", macs, proxy.MAC)
		}

		// Unsolicited replies only: the client's real answers for .201 count, the forger's none.
		held := netip.MustParseAddr("10.0.0.201")
		e.foreignHolds(t, held)
		client := e.Client.MAC.String()
		e.waitPoolNamed(t, "home-lab", ".201 in use by the client, nothing by the forger", 30*time.Second, func(p *v1alpha1.IPAddressPool) bool {
			return slices.Equal(inUseOf(p), []string{held.String() + " " + client + " " + hashOwner(held, "node-a", "node-b", "node-c")})
		})
		run(t, "ip", "-n", e.Client.NS, "addr", "del", netip.PrefixFrom(held, 32).String(), "dev", "eth0")
		e.waitPoolNamed(t, "home-lab", "nothing in use once the client let .201 go, the forger still looping", 30*time.Second, func(p *v1alpha1.IPAddressPool) bool {
			return len(p.Status.InUse) == 0 && len(p.Status.NextAddresses) > 0 && p.Status.NextAddresses[0] == "10.0.0.200"
		})

		// The forger answers every request now, the probes included.
		forge.answering.Store(true)
		answering := time.Now()
		// Several probe rounds go by (every 500 ms) before the first Service exists.
		e.waitPoolNamed(t, "home-lab", "the forger answering the probes, nothing held back", 30*time.Second, func(p *v1alpha1.IPAddressPool) bool {
			return forgerIsProxy(p, forger.MAC.String()) && len(p.Status.InUse) == 0
		})
		t.Logf("the pool listed the forger as a proxy answerer %v after it began answering", time.Since(answering).Round(time.Millisecond))
		for i, name := range []string{"gitea", "argocd", "harbor", "grafana"} {
			e.homeLabService(t, name)
			e.waitServiceIP(t, name, fmt.Sprintf("10.0.0.%d", 200+i))
		}
		// Later rounds change nothing: no address is held back.
		e.waitPoolNamed(t, "home-lab", "next addresses from .204, nothing held back", 30*time.Second, func(p *v1alpha1.IPAddressPool) bool {
			return len(p.Status.NextAddresses) > 0 && p.Status.NextAddresses[0] == "10.0.0.204" && len(p.Status.InUse) == 0 && forgerIsProxy(p, forger.MAC.String())
		})
	})
}

// proxyARP turns namespace ns into a router with proxy ARP: forwarding on, proxy_arp on eth0
// answering at once (proxy_delay 0), and the home-lab subnet routed out of another interface,
// so its kernel answers on eth0 for every address of it. All inside ns.
func proxyARP(t *testing.T, ns string) {
	for _, args := range [][]string{
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"sysctl", "-qw", "net.ipv4.conf.eth0.proxy_arp=1"},
		{"sysctl", "-qw", "net.ipv4.neigh.eth0.proxy_delay=0"},
		{"ip", "link", "add", "wifi0", "type", "veth", "peer", "name", "wifi1"}, // its Wi-Fi side (no dummy module here)
		{"ip", "link", "set", "wifi1", "up"},
		{"ip", "link", "set", "wifi0", "up"},
		{"ip", "route", "add", homeLab.String(), "dev", "wifi0"},
	} {
		run(t, "ip", append([]string{"netns", "exec", ns}, args...)...)
	}
}

// arpForger is a host claiming every address of a prefix with forged ARP (forgeARP).
type arpForger struct {
	answering atomic.Bool // answer requests too, not only send unsolicited replies
	// answerFrom, when set before answering, gives the MAC each answer comes from (nil: the
	// host's own).
	answerFrom func(ip netip.Addr) net.HardwareAddr
	stop       func()
}

// forgeARP makes the host in namespace ns (MAC mac) claim every address of prefix: it
// broadcasts unsolicited replies for each in a loop (gratuitous ones, with its own MAC and the
// address as target, and ones naming nobody), and once answering is set, answers every ARP
// request for one of them, from anyone, probes from 0.0.0.0 included.
func forgeARP(t *testing.T, ns string, mac net.HardwareAddr, prefix netip.Prefix) *arpForger {
	forger := &arpForger{}
	var conn *packet.Conn
	if err := netlab.In(ns, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		conn, err = packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeARP), nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	send := func(from net.HardwareAddr, op arp.Operation, dst net.HardwareAddr, ip netip.Addr, tha net.HardwareAddr, tpa netip.Addr) {
		p, err := arp.NewPacket(op, from, ip, tha, tpa)
		if err != nil {
			return
		}
		payload, _ := p.MarshalBinary()
		f, _ := (&ethernet.Frame{Destination: dst, Source: from, EtherType: ethernet.EtherTypeARP, Payload: payload}).MarshalBinary()
		_, _ = conn.WriteTo(f, &packet.Addr{HardwareAddr: dst})
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // unsolicited, every 20 ms for every address
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			for ip := prefix.Addr(); prefix.Contains(ip); ip = ip.Next() {
				send(mac, arp.OperationReply, ethernet.Broadcast, ip, mac, ip)
				send(mac, arp.OperationReply, ethernet.Broadcast, ip, net.HardwareAddr{0, 0, 0, 0, 0, 0}, netip.IPv4Unspecified())
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	go func() { // every request for one of them, answered
		defer wg.Done()
		buf := make([]byte, 1600)
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			var f ethernet.Frame
			var p arp.Packet
			if f.UnmarshalBinary(buf[:n]) != nil || p.UnmarshalBinary(f.Payload) != nil || bytes.Equal(f.Source, mac) {
				continue
			}
			if forger.answering.Load() && p.Operation == arp.OperationRequest && prefix.Contains(p.TargetIP) && p.SenderIP != p.TargetIP {
				from := mac
				if forger.answerFrom != nil {
					from = forger.answerFrom(p.TargetIP)
				}
				send(from, arp.OperationReply, p.SenderHardwareAddr, p.TargetIP, p.SenderHardwareAddr, p.SenderIP)
			}
		}
	}()
	forger.stop = func() {
		close(done)
		_ = conn.Close()
		wg.Wait()
	}
	return forger
}

// TestLANHoldsBackASmallPool: what conflict probing cannot stop. A host on the LAN answers
// the speakers' probes for a pool of 8 addresses from a new MAC for every 2 of them, so no MAC
// answers for more than 3 and none is taken for a proxy answerer: every address is held back,
// and a Service asking for the pool waits. The pool's AddressesInUse and Exhausted conditions
// and the Service's PoolExhausted name the answering MACs and point at conflictProbing:
// Disabled; once the pool says so, the Service gets the pool's first address.
func TestLANHoldsBackASmallPool(t *testing.T) {
	inLANLab(t, []string{"forger"}, func(t *testing.T, e *l2Env) {
		e.restartSpeakers([]string{"--conflict-probe-interval", "500ms", "--conflict-probe-spacing", "100ms", "--self-check-interval", "0"})
		startInProcessController(t, e)
		forger := e.LAN[0]
		forge := forgeARP(t, forger.NS, forger.MAC, homeLab)
		defer forge.stop()
		forge.answerFrom = func(ip netip.Addr) net.HardwareAddr {
			return net.HardwareAddr{0x02, 0x66, 0, 0, 0, ip.As4()[3] / 2} // .200 and .201 from :64, ...
		}
		var macs []string
		for i := range 4 {
			macs = append(macs, forge.answerFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(200 + 2*i)})).String())
		}
		forge.answering.Store(true)

		pool := &v1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "home-lab"},
			Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"10.0.0.200-10.0.0.207"}}}
		e.createObject(pool)
		e.createObject(&v1alpha1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "home-lab"},
			Spec: v1alpha1.L2AdvertisementSpec{IPAddressPools: []v1alpha1.Name{"home-lab"}}})
		e.waitPoolNamed(t, "home-lab", "all 8 addresses in use, no proxy answerer", 60*time.Second, func(p *v1alpha1.IPAddressPool) bool {
			return len(p.Status.InUse) == 8 && len(p.Status.ProxyAnswerers) == 0
		})
		e.homeLabService(t, "gitea")
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gitea"}}
		poolConds := func() []metav1.Condition { return pool.Status.Conditions }
		svcConds := func() []metav1.Condition { return svc.Status.Conditions }
		for _, note := range append(slices.Clone(macs), "spec.conflictProbing: Disabled") {
			e.waitCondition(t, 10*time.Second, pool, poolConds, v1alpha1.ConditionAddressesInUse, metav1.ConditionTrue, v1alpha1.ReasonAddressInUse, note)
			e.waitCondition(t, 10*time.Second, pool, poolConds, v1alpha1.ConditionExhausted, metav1.ConditionTrue, v1alpha1.ReasonPoolExhausted, note)
			e.waitCondition(t, 20*time.Second, svc, svcConds, v1alpha1.ConditionIPAllocated, metav1.ConditionFalse, v1alpha1.ReasonPoolExhausted, note)
		}

		// The remedy, where no host really holds them.
		must(t, e.c.Patch(context.Background(), pool, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"conflictProbing":"Disabled"}}`))))
		e.waitServiceIP(t, "gitea", "10.0.0.200")
	})
}

func forgerIsProxy(p *v1alpha1.IPAddressPool, mac string) bool {
	for _, x := range p.Status.ProxyAnswerers {
		if x.MAC == mac {
			return true
		}
	}
	return false
}

// homeLabService creates a Service asking for the home-lab pool.
func (e *l2Env) homeLabService(t *testing.T, name string) {
	e.createObject(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
		Annotations: map[string]string{v1alpha1.AnnotationAddressPool: "home-lab"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}})
}
