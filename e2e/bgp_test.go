package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
)

// TestBGP runs three speakers against bird2 (router r1, 198.51.100.3, eBGP), FRR (r2, .4,
// eBGP) and a second bird (r3, .5: iBGP with TCP MD5), all in namespaces on one bridge, with a
// real apiserver. The routers' kernel tables are the verdict.
func TestBGP(t *testing.T) {
	inBGPLab(t, 3, func(t *testing.T, e *l2Env) {
		all := []string{"node-a", "node-b", "node-c"}
		bird, frrNS, rrNS := e.Routers[0].NS, e.Routers[1].NS, e.Routers[2].NS
		const md5pw = "s3cret-md5"
		b := startBird(t, bird, birdConfig(e.Routers[0].IPv4.Addr(), e.Nodes, clusterASN, ""))
		e.addIPv6InternalIPs()
		e.createObject(bgpPeer("tor", netip.MustParseAddr("198.51.100.3"), clusterASN, routerASN))
		e.waitEstablished("tor", 30*time.Second, all...)

		t.Run("Cluster policy: every node, ECMP, communities, IPv4 and IPv6", func(t *testing.T) {
			e.t = t
			v4, v6 := netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8:ff::10")
			e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "ecmp"}, Spec: v1alpha1.BGPAdvertisementSpec{
				IPAddressPools: []v1alpha1.Name{"ecmp"}, Communities: []v1alpha1.Community{"65000:100", "large:64512:1:2"}}})
			svc := e.createService("ecmp", []netip.Prefix{netip.MustParsePrefix("203.0.113.0/28"), netip.MustParsePrefix("2001:db8:ff::/120")}, false, v4, v6)
			e.expectRoute(bird, netip.PrefixFrom(v4, 32), e.nodeIPs(false, all...), 10*time.Second)
			e.expectRoute(bird, netip.PrefixFrom(v6, 128), e.nodeIPs(true, all...), 10*time.Second)
			out, err := b.Birdc("show", "route", "203.0.113.10/32", "all")
			must(t, err)
			for _, want := range []string{"BGP.community: (65000,100)", "BGP.large_community: (64512, 1, 2)", "BGP.as_path: 64513"} {
				if !strings.Contains(out, want) {
					t.Fatalf("bird's route lacks %q:\n%s", want, out)
				}
			}
			// Status: the address, its Service and peer in the teller's Speaker (node-a, the
			// first advertising node by name); the session counted.
			waitFor(t, "node-a's Speaker status lists the address and the session", 10*time.Second, func() bool {
				var sp v1alpha1.Speaker
				return e.c.Get(context.Background(), clientKey("node-a"), &sp) == nil && sp.Status.BGPPeersUp == 1 &&
					slices.ContainsFunc(sp.Status.Announcements, func(a v1alpha1.Announcement) bool {
						return a.IP == v4.String() && a.Protocol == v1alpha1.ProtocolBGP && a.Service == "default/ecmp" && slices.Equal(a.Peers, []string{"tor"})
					})
			})
			waitFor(t, "SessionUp event on the BGPPeer and Announced on the Service", 10*time.Second, func() bool {
				return e.hasEvent("tor", "SessionUp", "node node-b: BGP session with 198.51.100.3 established") &&
					e.hasEvent(svc.Name, "Announced", "advertising 203.0.113.10 to BGP peers tor (told by node node-a for every node that advertises it)")
			})
			m, err := scrapeMetrics(context.Background(), e.node("node-b").IPv4.Addr().String()+":7474")
			must(t, err)
			if up, n, upd := sum(m, "portico_bgp_session_up", map[string]string{"peer": "tor"}), sum(m, "portico_bgp_prefixes_advertised", nil),
				sum(m, "portico_bgp_updates_sent_total", nil); up != 1 || n < 2 || upd < 1 {
				t.Fatalf("node-b metrics: session_up %v, prefixes %v, updates sent %v", up, n, upd)
			}
			// Released: the Service is deleted, its routes are withdrawn.
			must(t, e.c.Delete(context.Background(), svc))
			e.expectRoute(bird, netip.PrefixFrom(v4, 32), nil, 10*time.Second)
			e.expectRoute(bird, netip.PrefixFrom(v6, 128), nil, 10*time.Second)
		})

		t.Run("aggregation", func(t *testing.T) {
			e.t = t
			agg := int32(28)
			e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "agg"}, Spec: v1alpha1.BGPAdvertisementSpec{
				IPAddressPools: []v1alpha1.Name{"agg"}, AggregationLength: &agg}})
			pool := netip.MustParsePrefix("203.0.113.16/28")
			e.createService("agg", []netip.Prefix{pool}, false, netip.MustParseAddr("203.0.113.17"), netip.MustParseAddr("203.0.113.18"))
			e.expectRoute(bird, pool, e.nodeIPs(false, all...), 10*time.Second)
			if gw := gateways(t, bird, netip.MustParsePrefix("203.0.113.17/32")); len(gw) != 0 {
				t.Fatalf("a /32 was advertised besides the aggregate: via %v", gw)
			}
		})

		t.Run("iBGP with MD5: local-pref, peers and the peer's nodeSelectors", func(t *testing.T) {
			e.t = t
			rr := netlab.StartBird(t, rrNS, birdConfig(e.Routers[2].IPv4.Addr(), e.Nodes[:1], routerASN, md5pw))
			before := e.sessions("node-a")["tor"]
			must(t, e.c.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "md5", Namespace: "default"},
				Data: map[string][]byte{"password": []byte(md5pw)}}))
			peer := bgpPeer("rr", e.Routers[2].IPv4.Addr(), routerASN, routerASN)
			peer.Spec.PasswordSecret = &v1alpha1.SecretKeyRef{Namespace: "default", Name: "md5", Key: "password"}
			peer.Spec.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": "node-a"}}}
			e.createObject(peer)
			e.waitEstablished("rr", 30*time.Second, "node-a")
			if _, ok := e.sessions("node-b")["rr"]; ok {
				t.Fatal("node-b opened a session its nodeSelectors exclude")
			}
			// The new session did not disturb the existing one.
			if after := e.sessions("node-a")["tor"]; after.State != "Established" || !after.Since.Equal(before.Since) {
				t.Fatalf("the tor session changed when rr was added: before %+v, after %+v", before, after)
			}
			pref := uint32(250)
			e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "ibgp"}, Spec: v1alpha1.BGPAdvertisementSpec{
				IPAddressPools: []v1alpha1.Name{"ibgp"}, Peers: []v1alpha1.Name{"rr"}, LocalPref: &pref, Communities: []v1alpha1.Community{"no-export"}}})
			ip := netip.MustParseAddr("203.0.113.40")
			e.createService("ibgp", []netip.Prefix{netip.MustParsePrefix("203.0.113.40/32")}, false, ip)
			e.expectRoute(rrNS, netip.PrefixFrom(ip, 32), e.nodeIPs(false, "node-a"), 10*time.Second)
			out, err := rr.Birdc("show", "route", ip.String()+"/32", "all")
			must(t, err)
			if !strings.Contains(out, "BGP.local_pref: 250") || !strings.Contains(out, "(65535,65281)") {
				t.Fatalf("bird's route for %v, want local-pref 250 and no-export:\n%s", ip, out)
			}
			if gw := gateways(t, bird, netip.PrefixFrom(ip, 32)); len(gw) != 0 {
				t.Fatalf("the tor router learned %v although the advertisement names only rr (via %v)", ip, gw)
			}
			var sp v1alpha1.Speaker
			must(t, e.c.Get(context.Background(), clientKey("node-a"), &sp))
			if raw, _ := json.Marshal(sp); strings.Contains(string(raw), md5pw) {
				t.Fatal("the MD5 password appears in the Speaker object")
			}
		})

		t.Run("externalTrafficPolicy Local follows the endpoints", func(t *testing.T) {
			e.t = t
			e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Spec: v1alpha1.BGPAdvertisementSpec{
				IPAddressPools: []v1alpha1.Name{"local"}}})
			ip := netip.MustParseAddr("203.0.113.50")
			svc := e.createService("local", []netip.Prefix{netip.PrefixFrom(ip, 32)}, true, ip)
			// No route while there is no endpoint would hold before any speaker reacted, so the
			// absence is checked only after the route was seen and its endpoint then went away.
			setEndpoint(t, e, svc, "node-b")
			e.expectRoute(bird, netip.PrefixFrom(ip, 32), e.nodeIPs(false, "node-b"), 10*time.Second)
			editEndpoint(t, e, svc, func(ep *discoveryv1.Endpoint) { ep.NodeName = new("node-c") })
			e.expectRoute(bird, netip.PrefixFrom(ip, 32), e.nodeIPs(false, "node-c"), 10*time.Second)
			editEndpoint(t, e, svc, func(ep *discoveryv1.Endpoint) { ep.Conditions.Ready = new(false) })
			e.expectRoute(bird, netip.PrefixFrom(ip, 32), nil, 10*time.Second)
		})

		// One address for the remaining scenarios, advertised by every node.
		e.t = t
		e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "steady"}, Spec: v1alpha1.BGPAdvertisementSpec{
			IPAddressPools: []v1alpha1.Name{"steady"}}})
		steady := netip.MustParsePrefix("203.0.113.60/32")
		e.createService("steady", []netip.Prefix{steady}, false, steady.Addr())
		e.expectRoute(bird, steady, e.nodeIPs(false, all...), 10*time.Second)

		t.Run("router restarted: sessions and routes come back", func(t *testing.T) {
			e.t = t
			b.Stop()
			e.expectRoute(bird, steady, nil, 5*time.Second) // bird removes its routes on SIGTERM
			b.Start()
			took := e.expectRoute(bird, steady, e.nodeIPs(false, all...), 30*time.Second)
			e.waitEstablished("tor", 10*time.Second, all...)
			t.Logf("routes back %v after bird restarted", took.Round(time.Millisecond))
		})

		t.Run("speaker SIGTERM withdraws its routes at once", func(t *testing.T) {
			e.t = t
			e.kill("node-c", syscall.SIGTERM)
			took := e.expectRoute(bird, steady, e.nodeIPs(false, "node-a", "node-b"), 5*time.Second)
			t.Logf("node-c's route gone %v after SIGTERM returned", took.Round(time.Millisecond))
			e.startSpeaker("node-c")
			e.expectRoute(bird, steady, e.nodeIPs(false, all...), 30*time.Second)
		})

		t.Run("a restarted speaker is ready once its routes' sessions are back", func(t *testing.T) {
			e.t = t
			// A rolling update replaces the next node's speaker once this one is ready: were it
			// ready before its session is back, the routers could be left with no next hop.
			readyz := "http://" + e.node("node-c").IPv4.Addr().String() + ":7475/readyz/bgp-sessions"
			_, err := b.Birdc("disable", "node_c")
			must(t, err)
			t.Cleanup(func() { _, _ = b.Birdc("enable", "node_c") }) // for the subtests after a failure
			e.kill("node-c", syscall.SIGTERM)
			e.startSpeaker("node-c")
			waitFor(t, "node-c's readiness waiting for its tor session", 30*time.Second, func() bool {
				code, body := httpStatus(readyz)
				return code == http.StatusInternalServerError && strings.Contains(body, "tor at 198.51.100.3")
			})
			_, err = b.Birdc("enable", "node_c")
			must(t, err)
			waitFor(t, "node-c ready", 30*time.Second, func() bool {
				code, _ := httpStatus(readyz)
				return code == http.StatusOK
			})
			if out, err := b.Birdc("show", "protocols", "node_c"); err != nil || !strings.Contains(out, "Established") {
				t.Fatalf("node-c turned ready before its session with the router was up: %v\n%s", err, out)
			}
			e.expectRoute(bird, steady, e.nodeIPs(false, all...), 10*time.Second)
		})

		t.Run("graceful restart: a killed speaker's routes stay until it is back", func(t *testing.T) {
			e.t = t
			var tor v1alpha1.BGPPeer
			must(t, e.c.Get(context.Background(), clientKey("tor"), &tor))
			tor.Spec.EnableGracefulRestart = true
			changed := time.Now().Add(-time.Second) // Since has a one-second resolution
			must(t, e.c.Update(context.Background(), &tor))
			// A changed peer gets fresh sessions, now negotiating graceful restart.
			waitFor(t, "fresh tor sessions on every node", 30*time.Second, func() bool {
				for _, n := range all {
					s := e.sessions(n)["tor"]
					if s.State != "Established" || s.Since == nil || s.Since.Time.Before(changed) {
						return false
					}
				}
				return true
			})
			e.expectRoute(bird, steady, e.nodeIPs(false, all...), 10*time.Second)
			e.kill("node-c", syscall.SIGKILL)
			waitFor(t, "bird sees node-c's session down", 10*time.Second, func() bool {
				out, err := b.Birdc("show", "protocols", "node_c")
				return err == nil && !strings.Contains(out, "Established")
			})
			// Without graceful restart bird flushes node-c's routes as the session goes down
			// (2 ms after a SIGKILL: the kernel closes the TCP connection); with it they stay, marked stale.
			if gw := gateways(t, bird, steady); !slices.Equal(gw, e.nodeIPs(false, all...)) {
				t.Fatalf("after node-c died the router routes %v via %v; graceful restart should keep node-c's path", steady, gw)
			}
			if out, _ := b.Birdc("show", "route", steady.String(), "protocol", "node_c"); !strings.Contains(out, steady.String()) {
				t.Fatalf("bird dropped node-c's route although graceful restart was negotiated:\n%s", out)
			}
			e.startSpeaker("node-c")
			e.waitEstablished("tor", 30*time.Second, "node-c")
			e.expectRoute(bird, steady, e.nodeIPs(false, all...), 10*time.Second)
		})

		t.Run("FRR learns and withdraws the routes", func(t *testing.T) {
			e.t = t
			frrAddr := e.Routers[1].IPv4.Addr()
			f := netlab.StartFRR(t, frrNS, frrConfig(frrAddr, e.Nodes))
			t.Cleanup(func() {
				if t.Failed() {
					out, _ := f.Vtysh("show bgp summary")
					t.Logf("FRR:\n%s\n%s", out, f.Log())
				}
			})
			e.createObject(bgpPeer("frr", frrAddr, clusterASN, 64520))
			e.waitEstablished("frr", 30*time.Second, all...)
			e.expectRoute(frrNS, steady, e.nodeIPs(false, all...), 10*time.Second)
			ip := netip.MustParseAddr("203.0.113.70")
			e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "frr"}, Spec: v1alpha1.BGPAdvertisementSpec{
				IPAddressPools: []v1alpha1.Name{"frr"}, Peers: []v1alpha1.Name{"frr"}}})
			svc := e.createService("frr", []netip.Prefix{netip.PrefixFrom(ip, 32)}, false, ip)
			e.expectRoute(frrNS, netip.PrefixFrom(ip, 32), e.nodeIPs(false, all...), 10*time.Second)
			if gw := gateways(t, bird, netip.PrefixFrom(ip, 32)); len(gw) != 0 {
				t.Fatalf("bird learned %v although the advertisement names only the frr peer (via %v)", ip, gw)
			}
			must(t, e.c.Delete(context.Background(), svc))
			e.expectRoute(frrNS, netip.PrefixFrom(ip, 32), nil, 10*time.Second)
		})
	})
}

// editEndpoint changes svc's only endpoint (setEndpoint's slice).
func editEndpoint(t *testing.T, e *l2Env, svc *corev1.Service, edit func(*discoveryv1.Endpoint)) {
	t.Helper()
	var es discoveryv1.EndpointSlice
	must(t, e.c.Get(context.Background(), client.ObjectKey{Namespace: svc.Namespace, Name: svc.Name + "-1"}, &es))
	edit(&es.Endpoints[0])
	must(t, e.c.Update(context.Background(), &es))
}
