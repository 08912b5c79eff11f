package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// nodeLinks gives a node, beside eth0, the links a real node has, each also plugged into the
// LAN bridge so that anything answering on them would reach the client: a pod's veth, a CNI
// bridge cni0 with a port, and a bridge br-lan whose port eth1 is on the LAN. MACs are fixed
// (02:00:00:00:0f:xx) so an answer names its link.
func (e *l2Env) nodeLinks(t *testing.T, node string) map[string]string {
	ns := e.node(node).NS
	macs := map[string]string{}
	link := func(name, mac, sw string, extra ...string) { // a veth: name in the node, sw on the LAN bridge
		run(t, "ip", "-n", e.Switch, "link", "add", sw, "type", "veth", "peer", "name", name, "netns", ns)
		t.Cleanup(func() { run(t, "ip", "-n", e.Switch, "link", "del", sw) })
		run(t, "ip", "-n", ns, "link", "set", name, "address", mac)
		run(t, "ip", "-n", e.Switch, "link", "set", sw, "master", "br0", "up")
		run(t, "ip", append([]string{"-n", ns, "link", "set", name}, append(extra, "up")...)...)
		macs[name] = mac
	}
	bridge := func(name, mac string) {
		run(t, "ip", "-n", ns, "link", "add", name, "address", mac, "type", "bridge", "stp_state", "0")
		t.Cleanup(func() { run(t, "ip", "-n", ns, "link", "del", name) })
		run(t, "ip", "-n", ns, "link", "set", name, "up")
		macs[name] = mac
	}
	link("veth-pod1", "02:00:00:00:0f:01", "sw-vpod1")
	bridge("cni0", "02:00:00:00:0f:02")
	link("vethcni1", "02:00:00:00:0f:03", "sw-vcni1", "master", "cni0")
	bridge("br-lan", "02:00:00:00:0f:04")
	link("eth1", "02:00:00:00:0f:05", "sw-eth1", "master", "br-lan")
	macs["eth0"] = e.macOf(node)
	return macs
}

// TestL2Interfaces: a node with a pod's veth, a CNI bridge with a port and a bridge port beside
// eth0, all on the LAN, answers only on eth0 when the advertisement names no interface, and
// its Speaker status says why the others are left out; a pattern picks its own interfaces.
func TestL2Interfaces(t *testing.T) {
	inLab(t, func(t *testing.T, e *l2Env) {
		const node = "node-a"
		macs := e.nodeLinks(t, node)
		byMAC := func(found []string) []string {
			var names []string
			for _, m := range found {
				name := m
				for n, mac := range macs {
					if mac == m {
						name = n
					}
				}
				names = append(names, name)
			}
			slices.Sort(names)
			return names
		}
		onNode := []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": node}}}

		t.Run("only the LAN interface answers by default", func(t *testing.T) {
			e.t = t
			ip := netip.MustParseAddr("198.51.100.220")
			e.create(scenario{name: "ifdefault", ip: ip, ad: v1alpha1.L2AdvertisementSpec{NodeSelectors: onNode}})
			e.soleAnnouncer(ip, 20*time.Second)
			if got := byMAC(e.arpingMACs(ip, 3)); !slices.Equal(got, []string{"eth0"}) {
				t.Fatalf("ARP answers for %v came from %v, want only eth0", ip, got)
			}
			var sp v1alpha1.Speaker
			must(t, e.c.Get(context.Background(), clientKey(node), &sp))
			want := map[string]string{
				"eth0":      "",
				"br-lan":    "",
				"veth-pod1": "named veth*: a pod's, CNI's or kube-proxy's interface",
				"cni0":      "named cni*: a pod's, CNI's or kube-proxy's interface",
				"vethcni1":  "port of cni0, which answers for it",
				"eth1":      "port of br-lan, which answers for it",
			}
			got := map[string]string{}
			for _, i := range sp.Status.Interfaces {
				if _, ok := want[i.Name]; ok {
					got[i.Name] = i.Reason
					if i.Answers != (i.Reason == "") {
						t.Errorf("interface %+v: answers and reason disagree", i)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("Speaker %s interfaces: %+v\nwant (name: reason) %v", node, sp.Status.Interfaces, want)
			}
			for _, a := range sp.Status.Announcements {
				if a.IP == ip.String() && !slices.Equal(a.Interfaces, []string{"eth0"}) {
					t.Fatalf("announced on %v, want eth0 (its subnet holds %v; br-lan's holds nothing)", a.Interfaces, ip)
				}
			}
		})

		t.Run("a pattern picks the interfaces", func(t *testing.T) {
			e.t = t
			ip := netip.MustParseAddr("198.51.100.221")
			e.create(scenario{name: "ifpattern", ip: ip, ad: v1alpha1.L2AdvertisementSpec{NodeSelectors: onNode,
				Interfaces: []v1alpha1.InterfaceName{"br-*"}}})
			e.soleAnnouncer(ip, 20*time.Second)
			waitFor(t, "br-lan alone answers "+ip.String(), 10*time.Second, func() bool {
				return slices.Equal(byMAC(e.arpingMACs(ip, 1)), []string{"br-lan"})
			})
		})
	})
}
