package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/internal/netlab"
)

// The BGP side of the LAN: a router at 10.0.0.3 (AS 64512) peering over eBGP with every node
// (AS 64513), and a pool only BGP announces, which the client reaches through the router.
var (
	routerIP = netip.MustParsePrefix("10.0.0.3/24")
	bgpPool  = netip.MustParsePrefix("203.0.113.0/28")
)

// bgpManifests are the pool, the peer and the advertisement a user would apply, and nextcloud's
// Service asking for the pool.
const bgpManifests = `apiVersion: portico.dev/v1alpha1
kind: IPAddressPool
metadata: {name: bgp-lab}
spec: {addresses: [%[1]s], autoAssign: false}
---
apiVersion: portico.dev/v1alpha1
kind: BGPPeer
metadata: {name: router}
spec: {myASN: 64513, peerASN: 64512, peerAddress: %[2]s, holdTime: 9s, keepaliveTime: 3s, connectTime: 1s, enableGracefulRestart: true}
---
apiVersion: portico.dev/v1alpha1
kind: BGPAdvertisement
metadata: {name: bgp-lab}
spec: {ipAddressPools: [bgp-lab], peers: [router]}
---
apiVersion: v1
kind: Service
metadata: {name: nextcloud, namespace: default, annotations: {portico.dev/address-pool: bgp-lab}}
spec:
  type: LoadBalancer
  selector: {app: nextcloud}
  ports: [{port: 80, targetPort: 8080}]
`

// routerConfig is bird2 at routerIP peering with every node, their routes merged into one
// ECMP route in the kernel; a path carrying GRACEFUL_SHUTDOWN gets local-pref 0 (RFC 8326),
// so it leaves the ECMP set while it still exists, and a speaker restarting gracefully keeps
// its paths (graceful restart on both sides, as docs/speaker-bgp.md asks of a router). Timers are short so sessions come back within seconds.
func routerConfig(e *labEnv) string {
	var b strings.Builder
	fmt.Fprintf(&b, `log stderr all;
router id %[1]s;
protocol device { scan time 10; }
protocol kernel { ipv4 { import none; export all; }; merge paths on; }
template bgp nodes {
  local %[1]s as 64512;
  hold time 9; keepalive time 3; connect retry time 1; error wait time 1, 10;
  graceful restart on;
  ipv4 { import filter { if (65535,0) ~ bgp_community then bgp_local_pref = 0; accept; }; export none; };
}
`, routerIP.Addr())
	for _, n := range e.c.Nodes {
		fmt.Fprintf(&b, "protocol bgp %s from nodes { neighbor %s as 64513; }\n", strings.ReplaceAll(n.Name, "-", "_"), n.IPv4.Addr())
	}
	return b.String()
}

// bgpLab adds the router (bird2) to the LAN, applies bgpManifests, creates nextcloud as a
// Deployment of the echo image, routes the pool from the client through the router, and
// returns nextcloud's address, the router's namespace and its bird once the router has a route to it
// through every node and the client gets answers.
func bgpLab(e *labEnv) (netip.Addr, string, *netlab.Router) {
	ctx := context.Background()
	router, err := e.c.AddLANHost("router", "02:00:00:00:00:03", routerIP.String(), "2001:db8:1::3/64")
	if err != nil {
		e.t.Fatal(err)
	}
	// The client and the nodes share the LAN, so a router that sends ICMP redirects tells the
	// client to reach the address through the node its hash picked, and the client then
	// bypasses it (and BGP) for good: none here, as with a client on another network. The
	// router hashes each connection (source and destination ports too), as routers doing ECMP do.
	for _, args := range [][]string{
		{"netns", "exec", router.NS, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0",
			"net.ipv4.conf.eth0.send_redirects=0", "net.ipv4.fib_multipath_hash_policy=1"},
		{"-n", e.c.Client.NS, "route", "add", bgpPool.String(), "via", routerIP.Addr().String()},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			e.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	bird := netlab.StartBird(e.t.(netlab.TB), router.NS, routerConfig(e))
	manifests := filepath.Join(e.t.TempDir(), "bgp-lab.yaml")
	if err := os.WriteFile(manifests, []byte(fmt.Sprintf(bgpManifests, bgpPool, routerIP.Addr())), 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.kubectl("create", "deployment", "nextcloud", "--image=portico.local/echo:lab", "--port=8080")
	e.kubectl("apply", "-f", manifests)
	var ip netip.Addr
	waitFor(e.t, "nextcloud's EXTERNAL-IP from bgp-lab", time.Minute, func() (bool, string) {
		var svc corev1.Service
		if err := e.c.CP.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "nextcloud"}, &svc); err != nil {
			return false, err.Error()
		}
		ing := svc.Status.LoadBalancer.Ingress
		if len(ing) == 1 {
			ip, _ = netip.ParseAddr(ing[0].IP)
		}
		return bgpPool.Contains(ip), fmt.Sprintf("ingress %v", ing)
	})
	var nodes []netip.Addr
	for _, n := range e.c.Nodes {
		nodes = append(nodes, n.IPv4.Addr())
	}
	waitFor(e.t, "the router's route to "+ip.String()+" through every node", 2*time.Minute, func() (bool, string) {
		via, err := netlab.Gateways(router.NS, netip.PrefixFrom(ip, 32))
		slices.SortFunc(via, netip.Addr.Compare)
		if err != nil || !slices.Equal(via, nodes) {
			out, _ := bird.Birdc("show", "protocols")
			return false, fmt.Sprintf("via %v (%v); bird:\n%s", via, err, out)
		}
		return true, ""
	})
	get := netlab.HTTPClient(e.c.Client.NS, 2*time.Second)
	waitFor(e.t, "an answer from nextcloud at "+ip.String()+" through the router", 2*time.Minute, func() (bool, string) {
		body, err := httpGet(get, "http://"+ip.String()+"/")
		return err == nil && strings.HasPrefix(body, "nextcloud-"), fmt.Sprintf("%q, %v", body, err)
	})
	return ip, router.NS, bird
}
