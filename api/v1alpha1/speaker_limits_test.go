package v1alpha1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// TestSelfCheckCaps: the apiserver stores a Speaker whose self-checks are at the caps, at
// their widest (the longest IPv6 text, four MACs, both counts at their maximum), and refuses
// one more entry or one more MAC. Logs the size of that Speaker's JSON.
func TestSelfCheckCaps(t *testing.T) {
	ctx, c := context.Background(), cp.Client
	sp := &v1alpha1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: "self-check-caps"}}
	if err := c.Create(ctx, sp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, sp) })
	macs := []string{"02:00:00:00:00:01", "02:00:00:00:00:02", "02:00:00:00:00:03", "02:00:00:00:00:04"}
	if len(macs) != v1alpha1.MaxSelfCheckMACs {
		t.Fatalf("the test lists %d MACs, the cap is %d", len(macs), v1alpha1.MaxSelfCheckMACs)
	}
	now := metav1.Now()
	checks := make([]v1alpha1.SelfCheck, v1alpha1.MaxSelfChecks)
	for i := range checks {
		checks[i] = v1alpha1.SelfCheck{IP: fmt.Sprintf("2001:db8:ffff:ffff:ffff:ffff:ffff:%04x", i), MACs: macs, OmittedMACs: 1<<31 - 1, Time: now}
	}
	sp.Status.SelfChecks, sp.Status.OmittedSelfChecks = checks, 1<<31-1
	if err := c.Status().Update(ctx, sp); err != nil {
		t.Fatalf("a Speaker at the caps: %v", err)
	}
	size, err := json.Marshal(sp)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a Speaker with %d self-checks of %d MACs: %d bytes of JSON (%.1f%% of 1.5 MiB)",
		len(checks), len(macs), len(size), 100*float64(len(size))/(1.5*(1<<20)))

	for _, over := range []struct {
		what  string
		edit  func(*v1alpha1.SpeakerStatus)
		field string
		limit int
	}{
		{"one self-check too many", func(st *v1alpha1.SpeakerStatus) {
			st.SelfChecks = append(st.SelfChecks, v1alpha1.SelfCheck{IP: "198.51.100.1", Time: now})
		}, "status.selfChecks", v1alpha1.MaxSelfChecks},
		{"one MAC too many", func(st *v1alpha1.SpeakerStatus) {
			st.SelfChecks[0].MACs = append(append([]string(nil), macs...), "02:00:00:00:00:05")
		}, "status.selfChecks[0].macs", v1alpha1.MaxSelfCheckMACs},
	} {
		st := sp.DeepCopy()
		over.edit(&st.Status)
		err := c.Status().Update(ctx, st)
		want := fmt.Sprintf("must have at most %d items", over.limit)
		if err == nil || !strings.Contains(err.Error(), over.field) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want a refusal at %s: %s", over.what, err, over.field, want)
		}
	}
}

// TestBGPRoutesCap: the apiserver stores a Speaker listing MaxBGPRoutes routes, each to three
// peers with MaxRouteCommunities communities, and refuses one route more. Logs the size.
func TestBGPRoutesCap(t *testing.T) {
	ctx, c := context.Background(), cp.Client
	sp := &v1alpha1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: "bgp-routes-cap"}}
	if err := c.Create(ctx, sp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, sp) })
	communities := make([]string, v1alpha1.MaxRouteCommunities)
	for i := range communities {
		communities[i] = fmt.Sprintf("large:4294967295:4294967295:%d", 4294967280+i)
	}
	routes := make([]v1alpha1.AdvertisedRoute, v1alpha1.MaxBGPRoutes)
	for i := range routes {
		routes[i] = v1alpha1.AdvertisedRoute{Prefix: fmt.Sprintf("2001:db8:ffff:ffff:ffff:ffff:ffff:%04x/128", i),
			Peers: []string{"leaf-a", "leaf-b", "route-server"}, LocalPref: 4294967295, Communities: communities}
	}
	sp.Status.BGP = &v1alpha1.SpeakerBGP{Routes: routes, OmittedRoutes: 1<<31 - 1,
		Peers: []v1alpha1.BGPPeerInUse{{Peer: "leaf-a", Address: "fe80::1%eth1", MyASN: 64601, PeerASN: 65001}}}
	if err := c.Status().Update(ctx, sp); err != nil {
		t.Fatalf("a Speaker at the route cap: %v", err)
	}
	size, _ := json.Marshal(sp)
	t.Logf("a Speaker with %d routes of %d large communities: %d bytes of JSON (%.1f%% of 1.5 MiB)",
		len(routes), len(communities), len(size), 100*float64(len(size))/(1.5*(1<<20)))
	for _, over := range []struct {
		what, field string
		edit        func(*v1alpha1.SpeakerBGP)
		limit       int
	}{
		{"one route too many", "status.bgp.routes", func(b *v1alpha1.SpeakerBGP) {
			b.Routes = append(b.Routes, v1alpha1.AdvertisedRoute{Prefix: "203.0.113.10/32", Peers: []string{"leaf-a"}})
		}, v1alpha1.MaxBGPRoutes},
		{"one community too many", "status.bgp.routes[0].communities", func(b *v1alpha1.SpeakerBGP) {
			b.Routes[0].Communities = append(append([]string(nil), communities...), "no-export")
		}, v1alpha1.MaxRouteCommunities},
	} {
		st := sp.DeepCopy()
		over.edit(st.Status.BGP)
		err := c.Status().Update(ctx, st)
		want := fmt.Sprintf("must have at most %d items", over.limit)
		if err == nil || !strings.Contains(err.Error(), over.field) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want a refusal at %s: %s", over.what, err, over.field, want)
		}
	}
}
