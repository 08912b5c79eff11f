package e2e

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	"golang.org/x/net/ipv6"

	"github.com/portico-lb/portico/internal/netlab"
)

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Name: name} }

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// setLabel sets a label on a Node, or removes it when value is "-".
func setLabel(t *testing.T, e *l2Env, node, key, value string) {
	t.Helper()
	var n corev1.Node
	must(t, e.c.Get(context.Background(), clientKey(node), &n))
	if value == "-" {
		delete(n.Labels, key)
	} else {
		n.Labels[key] = value
	}
	must(t, e.c.Update(context.Background(), &n))
}

// setEndpoint gives svc one ready endpoint on node, as the EndpointSlice controller would.
func setEndpoint(t *testing.T, e *l2Env, svc *corev1.Service, node string) {
	t.Helper()
	ready := true
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name + "-1", Namespace: svc.Namespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"}, NodeName: &node,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	must(t, e.c.Create(context.Background(), es))
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), es) })
}

// sendGarbage sends n malformed ARP frames and ICMPv6 messages from namespace ns to everyone
// on the bridge.
func sendGarbage(t *testing.T, ns string, n int) {
	t.Helper()
	bcast := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1}
	arpFrames := [][]byte{
		append(append([]byte{}, bcast...), 0x08, 0x06),                                  // ARP EtherType, no payload
		append(append([]byte{}, bcast...), 0x08, 0x06, 0, 1, 0x08, 0, 0xff, 0xff, 0, 1), // absurd address lengths
		append(append([]byte{}, bcast...), append([]byte{0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1}, make([]byte, 50)...)...),
	}
	icmp := [][]byte{
		{135, 0, 0, 0}, // neighbour solicitation, truncated
		append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 16)...),                                              // target ::
		append([]byte{135, 0, 0, 0, 0, 0, 0, 0, 0x20, 1, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0x09}, 1, 0), // option length 0
	}
	err := netlab.In(ns, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		pc, err := packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeARP), nil)
		if err != nil {
			return err
		}
		defer pc.Close()
		c, err := net.ListenPacket("ip6:ipv6-icmp", "::")
		if err != nil {
			return err
		}
		defer c.Close()
		p6 := ipv6.NewPacketConn(c)
		if err := p6.SetMulticastHopLimit(255); err != nil {
			return err
		}
		if err := p6.SetMulticastInterface(ifi); err != nil {
			return err
		}
		all := &net.IPAddr{IP: net.ParseIP("ff02::1"), Zone: "eth0"}
		for i := 0; i < n; i++ {
			if _, err := pc.WriteTo(arpFrames[i%len(arpFrames)], &packet.Addr{HardwareAddr: ethernet.Broadcast}); err != nil {
				return err
			}
			if _, err := p6.WriteTo(icmp[i%len(icmp)], nil, all); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
