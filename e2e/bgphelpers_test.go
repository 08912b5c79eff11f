package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
)

// Test ASNs: the router's AS, and the cluster's.
const (
	routerASN  = 64512
	clusterASN = 64513
)

// birdConfig peers a bird router at local (AS 64512) with the nodes, which are in AS
// nodeASN (64512 too: iBGP), with TCP MD5 when password is set. Learned routes go to the
// kernel table, ECMP merged. Timers are short so sessions come back within seconds.
func birdConfig(local netip.Addr, nodes []labNode, nodeASN uint32, password string) string {
	return birdPeering(local, local, nodes, nodeASN, password)
}

// birdPeering is birdConfig with router ID routerID, peering with the nodes' addresses of
// local's family: over IPv4 it carries IPv4 and IPv6 routes, over IPv6 only IPv6 routes (a
// node with no IPv4 address has no IPv4 next hop to give).
func birdPeering(routerID, local netip.Addr, nodes []labNode, nodeASN uint32, password string) string {
	var b strings.Builder
	v4kernel, v4channel := "protocol kernel { ipv4 { import none; export all; }; merge paths on; }\n", "  ipv4 { import all; export none; };\n"
	if local.Is6() {
		v4kernel, v4channel = "", ""
	}
	fmt.Fprintf(&b, `log stderr all;
router id %s;
protocol device { scan time 10; }
%sprotocol kernel { ipv6 { import none; export all; }; merge paths on; }
template bgp nodes {
  local %s as %d;
  direct;
  hold time 9; keepalive time 3; connect retry time 1; error wait time 1, 10;
%s  ipv6 { import all; export none; };
}
`, routerID, v4kernel, local, routerASN, v4channel)
	for _, n := range nodes {
		addr := n.IPv4.Addr()
		if local.Is6() {
			addr = n.IPv6.Addr()
		}
		fmt.Fprintf(&b, "protocol bgp %s from nodes { neighbor %s as %d;", strings.ReplaceAll(n.Name, "-", "_"), addr, nodeASN)
		if password != "" {
			fmt.Fprintf(&b, " password \"%s\";", password)
		}
		b.WriteString(" }\n")
	}
	return b.String()
}

// startBird runs bird in ns with config (netlab.StartBird) and, when the test fails, logs its
// protocols and its log.
func startBird(t testing.TB, ns, config string) *netlab.Router {
	t.Helper()
	b := netlab.StartBird(t, ns, config)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := b.Birdc("show", "protocols", "all")
			t.Logf("bird protocols:\n%s\nbird log:\n%s", out, b.Log())
		}
	})
	return b
}

// frrConfig peers an FRR router at addr (AS 64520) with every node over eBGP.
func frrConfig(addr netip.Addr, nodes []labNode) string {
	var b strings.Builder
	fmt.Fprintf(&b, "frr defaults traditional\nhostname frr\nlog stdout informational\nrouter bgp 64520\n bgp router-id %s\n no bgp ebgp-requires-policy\n bgp bestpath as-path multipath-relax\n", addr)
	for _, n := range nodes {
		a := n.IPv4.Addr()
		fmt.Fprintf(&b, " neighbor %s remote-as %d\n neighbor %s timers 3 9\n neighbor %s timers connect 1\n", a, clusterASN, a, a)
	}
	b.WriteString(" address-family ipv4 unicast\n  maximum-paths 8\n exit-address-family\n")
	return b.String()
}

// bgpPeer is a BGPPeer with the lab's short timers.
func bgpPeer(name string, addr netip.Addr, myASN, peerASN uint32) *v1alpha1.BGPPeer {
	return &v1alpha1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.BGPPeerSpec{
		MyASN: myASN, PeerASN: peerASN, PeerAddress: v1alpha1.IPAddress(addr.String()),
		HoldTime: &metav1.Duration{Duration: 9 * time.Second}, KeepaliveTime: &metav1.Duration{Duration: 3 * time.Second},
		ConnectTime: &metav1.Duration{Duration: time.Second},
	}}
}

// nodeIPs are the addresses of the named nodes (IPv4 or IPv6), sorted, as router next hops.
func (e *l2Env) nodeIPs(v6 bool, names ...string) []netip.Addr {
	var out []netip.Addr
	for _, n := range names {
		h := e.node(n)
		if v6 {
			out = append(out, h.IPv6.Addr())
		} else {
			out = append(out, h.IPv4.Addr())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// expectRoute waits until the router's kernel routes prefix via exactly the given next hops
// (none: no route at all), and returns how long that took.
func (e *l2Env) expectRoute(router string, prefix netip.Prefix, via []netip.Addr, within time.Duration) time.Duration {
	e.t.Helper()
	what := fmt.Sprintf("route %s via %v in %s", prefix, via, router)
	if len(via) == 0 {
		what = fmt.Sprintf("no route %s in %s", prefix, router)
	}
	var last []netip.Addr
	defer func() {
		if e.t.Failed() {
			e.t.Logf("last seen next hops for %s: %v", prefix, last)
		}
	}()
	return waitFor(e.t, what, within, func() bool {
		last = gateways(e.t, router, prefix)
		return slices.Equal(last, via)
	})
}

// gateways is netlab.Gateways, failing the test when ip cannot tell.
func gateways(t testing.TB, router string, prefix netip.Prefix) []netip.Addr {
	t.Helper()
	gw, err := netlab.Gateways(router, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return gw
}

// sessions returns node's BGP sessions from its Speaker status, by peer.
func (e *l2Env) sessions(node string) map[string]v1alpha1.PeerSession {
	var sp v1alpha1.Speaker
	if err := e.c.Get(context.Background(), clientKey(node), &sp); err != nil {
		return nil
	}
	out := map[string]v1alpha1.PeerSession{}
	for _, s := range sp.Status.Sessions {
		out[s.Peer] = s
	}
	return out
}

// waitEstablished waits until every named node reports its session with peer Established.
func (e *l2Env) waitEstablished(peer string, within time.Duration, nodes ...string) {
	e.t.Helper()
	waitFor(e.t, peer+" sessions Established on "+strings.Join(nodes, ","), within, func() bool {
		for _, n := range nodes {
			if e.sessions(n)[peer].State != "Established" {
				return false
			}
		}
		return true
	})
}

// addIPv6InternalIPs gives every Node its IPv6 address too (next hop for IPv6 routes over the
// IPv4 sessions).
func (e *l2Env) addIPv6InternalIPs() {
	ctx := context.Background()
	for _, n := range e.Nodes {
		var node corev1.Node
		must(e.t, e.c.Get(ctx, clientKey(n.Name), &node))
		node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: n.IPv6.Addr().String()})
		must(e.t, e.c.Status().Update(ctx, &node))
	}
}

// hasEvent reports whether an event with reason and message exists for the named object.
func (e *l2Env) hasEvent(object, reason, message string) bool {
	var evs corev1.EventList
	_ = e.c.List(context.Background(), &evs)
	return slices.ContainsFunc(evs.Items, func(ev corev1.Event) bool {
		return ev.InvolvedObject.Name == object && ev.Reason == reason && ev.Message == message
	})
}

// httpStatus GETs url and returns the status code and the body; 0 when nothing answered.
func httpStatus(url string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
