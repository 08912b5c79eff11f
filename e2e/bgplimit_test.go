package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// overLimitRoutes is what bird sends in TestBGPPrefixLimit: 2000 routes more than the default
// limit.
const overLimitRoutes = v1alpha1.DefaultMaxPrefixes + 2000

// TestBGPPrefixLimit: a router that sends a node more routes than the BGPPeer's limit (the
// default, as nothing sets it) gets its session ceased with RFC 4486's Cease subcode 1
// (Maximum Number of Prefixes Reached): bird says so, the BGPPeer's status says so for every
// node, and the speakers count it. With maxPrefixes raised above what bird sends, the sessions
// come back at once and hold every route.
func TestBGPPrefixLimit(t *testing.T) {
	inBGPLab(t, 1, func(t *testing.T, e *l2Env) {
		startInProcessController(t, e)
		all := []string{"node-a", "node-b", "node-c"}
		tor := e.Routers[0]
		b := startBird(t, tor.NS, floodBirdConfig(tor.IPv4.Addr(), e.Nodes, overLimitRoutes))
		e.createObject(bgpPeer("tor", tor.IPv4.Addr(), clusterASN, routerASN))
		e.waitEstablished("tor", 30*time.Second, all...)
		metrics := e.node("node-a").IPv4.Addr().String() + ":7474"
		_, err := b.Birdc("enable", "flood")
		must(t, err)
		flooded := time.Now()

		// The most routes node-a was seen holding from bird before its session was ceased.
		held := 0.0
		for _, n := range all {
			protocol := strings.ReplaceAll(n, "-", "_")
			// In bird's log: its "Last error" soon says the node refused a connection (bird
			// dials too, and the speakers never listen).
			waitFor(t, n+"'s session ceased at bird with Maximum number of prefixes reached", 60*time.Second, func() bool {
				if n == "node-a" {
					if m, err := scrapeMetrics(context.Background(), metrics); err == nil {
						held = max(held, sum(m, "portico_bgp_prefixes_received", map[string]string{"peer": "tor"}))
					}
				}
				return strings.Contains(b.Log(), protocol+": Received: Maximum number of prefixes reached")
			})
			t.Logf("%s ceased %v after the flood began; bird: %s", n, time.Since(flooded).Round(time.Millisecond), lineWith(b.Log(), protocol+": Received"))
		}
		t.Logf("node-a held at most %v of bird's %d routes (sampled) before its cease; limit %d", held, overLimitRoutes, v1alpha1.DefaultMaxPrefixes)

		var peer v1alpha1.BGPPeer
		waitFor(t, "the BGPPeer's status saying every session was ceased for the limit", 30*time.Second, func() bool {
			if e.c.Get(context.Background(), clientKey("tor"), &peer) != nil || len(peer.Status.Sessions) != len(all) {
				return false
			}
			for _, s := range peer.Status.Sessions {
				if s.State == "Established" || s.Reason != v1alpha1.ReasonPrefixLimitReached {
					return false
				}
			}
			c := meta.FindStatusCondition(peer.Status.Conditions, v1alpha1.ConditionSessionsEstablished)
			return c != nil && c.Reason == v1alpha1.ReasonPrefixLimitReached
		})
		for _, s := range peer.Status.Sessions {
			t.Logf("BGPPeer tor, %s: %s, %s: %q", s.Node, s.State, s.Reason, s.Message)
			if !strings.Contains(s.Message, "more than 10000 routes") {
				t.Fatalf("%s's session message does not give the limit: %q", s.Node, s.Message)
			}
		}
		m, err := scrapeMetrics(context.Background(), metrics)
		must(t, err)
		if n := sum(m, "portico_bgp_prefix_limit_ceases_total", map[string]string{"peer": "tor"}); n != 1 {
			t.Fatalf("portico_bgp_prefix_limit_ceases_total{peer=tor} is %v on node-a, want 1", n)
		}

		// A limit above what the router sends: a changed peer gets a fresh session at once.
		raisePrefixLimit(t, e, "tor", 2*overLimitRoutes)
		e.waitEstablished("tor", 30*time.Second, all...)
		waitFor(t, "node-a holding every route bird sends", 60*time.Second, func() bool {
			m, err := scrapeMetrics(context.Background(), metrics)
			return err == nil && sum(m, "portico_bgp_prefixes_received", map[string]string{"peer": "tor"}) == overLimitRoutes
		})
		if s := e.sessions("node-a")["tor"]; s.Reason != "" || s.Message != "" {
			t.Fatalf("node-a's session, Established again, still says %s %q", s.Reason, s.Message)
		}
	})
}
