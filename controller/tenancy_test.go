package controller_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// notNaming fails when a condition message, or an event on Service ns/name, names one of
// another tenant's secrets: its namespace, its Services, its sharing key.
func notNaming(t *testing.T, ns, name, message string, secrets ...string) {
	t.Helper()
	texts := []string{message}
	for _, e := range porticoEvents(t, ns) {
		if e.Regarding.Name == name {
			texts = append(texts, e.Note)
		}
	}
	for _, text := range texts {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s sees %q, which names another namespace's %q", ns, text, s)
			}
		}
	}
}

func withSharingKey(key string, ports ...int32) svcOpt {
	return func(s *corev1.Service) {
		withAnnotation(porticov1.AnnotationAllowSharedIP, key)(s)
		withPorts(ports...)(s)
	}
}

// TestTenantsShareOnlyInsideANamespace: team-a's ledger holds .200 under a sharing key.
// team-b's Service with the same key gets an address of its own, asking for .200 by address
// is refused, and a full pool says why team-c cannot join; no condition or event in team-b's
// or team-c's namespace names team-a's namespace, Service or key. Once the pool allows
// sharing across namespaces, they share.
func TestTenantsShareOnlyInsideANamespace(t *testing.T) {
	startManager(t)
	pool := createPool(t, "tenants", addresses("203.0.113.200/31"))
	teamA, teamB, teamC := namespace(t, nil), namespace(t, nil), namespace(t, nil)
	createService(t, teamA, "ledger", withSharingKey("books", 5432))
	waitIPs(t, teamA, "ledger", "203.0.113.200")
	secrets := []string{teamA, "ledger"}

	createService(t, teamB, "web", withSharingKey("books", 80))
	waitIPs(t, teamB, "web", "203.0.113.201")
	createService(t, teamB, "sneaky", withSharingKey("books", 443), withAnnotation(porticov1.AnnotationLoadBalancerIPs, "203.0.113.200"))
	c := waitReason(t, teamB, "sneaky", porticov1.ReasonRequestedIPInUse)
	if !strings.Contains(c.Message, "203.0.113.200 is in use by a Service in another namespace") {
		t.Errorf("sneaky: %q", c.Message)
	}
	waitEvent(t, teamB, "sneaky", "AllocationFailed", "in use by a Service in another namespace")
	notNaming(t, teamB, "sneaky", c.Message, secrets...)

	createService(t, teamC, "api", withSharingKey("books", 8080))
	c = waitReason(t, teamC, "api", porticov1.ReasonSharingConflict)
	if !strings.Contains(c.Message, "pool tenants is exhausted") || !strings.Contains(c.Message, "allowSharingAcrossNamespaces") {
		t.Errorf("api: %q", c.Message)
	}
	waitEvent(t, teamC, "api", "AllocationFailed", "SharingConflict")
	notNaming(t, teamC, "api", c.Message, append(secrets, teamB, "web", "sneaky")...)

	update(t, pool, func() { pool.Spec.AllowSharingAcrossNamespaces = true })
	waitIPs(t, teamC, "api", "203.0.113.200")
	waitIPs(t, teamB, "sneaky", "203.0.113.200")
	// Sharing across namespaces is allowed, yet a refusal still names no one in another
	// namespace, nor their key.
	createService(t, teamC, "pg", withSharingKey("books", 5432), withAnnotation(porticov1.AnnotationLoadBalancerIPs, "203.0.113.200"))
	c = waitReason(t, teamC, "pg", porticov1.ReasonSharingConflict)
	if !strings.Contains(c.Message, "203.0.113.200 is shared with a Service in another namespace, which already uses port TCP/5432") {
		t.Errorf("pg: %q", c.Message)
	}
	waitEvent(t, teamC, "pg", "AllocationFailed", "SharingConflict")
	notNaming(t, teamC, "pg", c.Message, append(secrets, teamB, "web", "sneaky")...)
	teamD := namespace(t, nil)
	createService(t, teamD, "other-key", withSharingKey("mine", 9000), withAnnotation(porticov1.AnnotationLoadBalancerIPs, "203.0.113.200"))
	c = waitReason(t, teamD, "other-key", porticov1.ReasonRequestedIPInUse)
	if !strings.Contains(c.Message, "203.0.113.200 is in use by a Service in another namespace (under another sharing key)") {
		t.Errorf("other-key: %q", c.Message)
	}
	waitEvent(t, teamD, "other-key", "AllocationFailed", "RequestedIPInUse")
	notNaming(t, teamD, "other-key", c.Message, append(secrets, teamB, teamC, "web", "sneaky", "api", "books")...)
	waitPool(t, "tenants", "three Services on .200, one on .201", func(p *porticov1.IPAddressPool) bool { return p.Status.Assigned == 2 })
}

// TestRequestsObeyServiceAllocation: a pool reserved for team-a's edge Services refuses a
// request for it or for one of its addresses, in every spelling, from another namespace or
// from a team-a Service its serviceSelectors do not select: NotAllowedByPool and no address.
// The Services it selects get what they ask for.
func TestRequestsObeyServiceAllocation(t *testing.T) {
	startManager(t)
	teamA, teamB := namespace(t, nil), namespace(t, nil)
	createPool(t, "team-a-edge", porticov1.IPAddressPoolSpec{
		Addresses: []porticov1.AddressRange{"203.0.113.208/29"},
		ServiceAllocation: &porticov1.ServiceAllocation{
			Namespaces:       []porticov1.Name{porticov1.Name(teamA)},
			ServiceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"tier": "edge"}}},
		},
	})
	edge := func(s *corev1.Service) { s.Labels = map[string]string{"tier": "edge"} }
	requests := []struct {
		name string
		ask  svcOpt
		ip   string
	}{
		{"portico-ips", withAnnotation(porticov1.AnnotationLoadBalancerIPs, "203.0.113.209"), "203.0.113.209"},
		{"metallb-io-ips", withAnnotation(porticov1.MetalLBLoadBalancerIPs[0], "203.0.113.210"), "203.0.113.210"},
		{"metallb-universe-ips", withAnnotation(porticov1.MetalLBLoadBalancerIPs[1], "203.0.113.211"), "203.0.113.211"},
		{"spec-field", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "203.0.113.212" }, "203.0.113.212"},
		{"portico-pool", withAnnotation(porticov1.AnnotationAddressPool, "team-a-edge"), ""},
		{"metallb-io-pool", withAnnotation(porticov1.MetalLBAddressPool[0], "team-a-edge"), ""},
		{"metallb-universe-pool", withAnnotation(porticov1.MetalLBAddressPool[1], "team-a-edge"), ""},
	}
	for _, r := range requests {
		createService(t, teamB, r.name, r.ask, edge)
		createService(t, teamA, r.name+"-unlabelled", r.ask)
	}
	for _, r := range requests {
		for _, at := range []struct{ ns, name string }{{teamB, r.name}, {teamA, r.name + "-unlabelled"}} {
			c := waitReason(t, at.ns, at.name, porticov1.ReasonNotAllowedByPool)
			if !strings.Contains(c.Message, "team-a-edge") || !strings.Contains(c.Message, "serviceAllocation") {
				t.Errorf("%s/%s: %q", at.ns, at.name, c.Message)
			}
			svc := waitService(t, at.ns, at.name, "no address", func(*corev1.Service) bool { return true })
			if got := ips(svc); got != "" {
				t.Errorf("%s/%s got %s", at.ns, at.name, got)
			}
		}
	}
	waitEvent(t, teamB, "portico-ips", "AllocationFailed", "NotAllowedByPool")

	// The selected Services get what they ask for: the requested addresses first, then the
	// pool's lowest free ones, which the requested ones leave at .208, .213 and .214.
	lowest := []string{"203.0.113.208", "203.0.113.213", "203.0.113.214"}
	for _, r := range requests {
		createService(t, teamA, r.name, r.ask, edge)
		want := r.ip
		if want == "" {
			want, lowest = lowest[0], lowest[1:]
		}
		waitIPs(t, teamA, r.name, want)
	}
}
