package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
)

// namespace creates a namespace for one test, so tests do not see each other's Services.
func namespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-", Labels: labels}}
	if err := cp.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	// envtest runs no namespace controller: delete the Services so later tests start clean.
	t.Cleanup(func() {
		if err := cp.Client.DeleteAllOf(context.Background(), &corev1.Service{}, client.InNamespace(ns.Name)); err != nil {
			t.Error(err)
		}
	})
	return ns.Name
}

type svcOpt func(*corev1.Service)

func withAnnotation(k, v string) svcOpt {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}

func withPorts(ports ...int32) svcOpt {
	return func(s *corev1.Service) {
		s.Spec.Ports = nil
		for _, p := range ports {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprint("p", p), Port: p, TargetPort: intstr.FromInt32(p)})
		}
	}
}

func createService(t *testing.T, ns, name string, opts ...svcOpt) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for _, o := range opts {
		o(svc)
	}
	if err := cp.Client.Create(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	return svc
}

// waitService polls a Service until ok accepts it.
func waitService(t *testing.T, ns, name string, what string, ok func(*corev1.Service) bool) *corev1.Service {
	t.Helper()
	var svc corev1.Service
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return ok(&svc), nil
	})
	if err != nil {
		t.Fatalf("%s/%s: want %s; last seen status %+v annotations %v", ns, name, what, svc.Status, svc.Annotations)
	}
	return &svc
}

func ips(svc *corev1.Service) string {
	var s []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		s = append(s, in.IP)
	}
	return strings.Join(s, ",")
}

func allocated(svc *corev1.Service) *metav1.Condition {
	return meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionIPAllocated)
}

func waitIPs(t *testing.T, ns, name, want string) *corev1.Service {
	t.Helper()
	return waitService(t, ns, name, "address "+want, func(s *corev1.Service) bool {
		c := allocated(s)
		return ips(s) == want && c != nil && c.Status == metav1.ConditionTrue
	})
}

func waitReason(t *testing.T, ns, name, reason string) *metav1.Condition {
	t.Helper()
	svc := waitService(t, ns, name, "IPAllocated reason "+reason, func(s *corev1.Service) bool {
		c := allocated(s)
		return c != nil && c.Reason == reason
	})
	return allocated(svc)
}

func addresses(entries ...string) porticov1.IPAddressPoolSpec {
	spec := porticov1.IPAddressPoolSpec{}
	for _, e := range entries {
		spec.Addresses = append(spec.Addresses, porticov1.AddressRange(e))
	}
	return spec
}

// TestHomeLab: the README's picture. Gitea, ArgoCD, Harbor and Grafana, created in that
// order, get .200 to .203, with the pool annotation, the condition and an event each.
func TestHomeLab(t *testing.T) {
	startManager(t)
	createPool(t, "home-lab", addresses("10.0.0.200-10.0.0.215"))
	ns := namespace(t, nil)
	for _, name := range []string{"gitea", "argocd", "harbor", "grafana"} {
		createService(t, ns, name)
	}
	for i, name := range []string{"gitea", "argocd", "harbor", "grafana"} {
		svc := waitIPs(t, ns, name, fmt.Sprintf("10.0.0.%d", 200+i))
		if got := svc.Annotations[porticov1.AnnotationAllocatedFromPool]; got != "home-lab" {
			t.Errorf("%s: allocated-from-pool = %q", name, got)
		}
		if m := svc.Status.LoadBalancer.Ingress[0].IPMode; m == nil || *m != corev1.LoadBalancerIPModeVIP {
			t.Errorf("%s: ipMode %v, want VIP", name, m)
		}
		if c := allocated(svc); c.Reason != porticov1.ReasonAllocated || c.Message != fmt.Sprintf("10.0.0.%d from pool home-lab", 200+i) {
			t.Errorf("%s: condition %+v", name, c)
		}
	}
	waitEvent(t, ns, "gitea", "IPAllocated", "10.0.0.200 from pool home-lab")
	waitPool(t, "home-lab", "Assigned=4", func(p *porticov1.IPAddressPool) bool {
		return p.Status.Assigned == 4 && p.Status.Available == "12" && p.Status.AssignedIPv4 == 4 && p.Status.AvailableIPv4 == "12"
	})

	// Deleting ArgoCD frees .201 and moves nobody; the next Service takes .201.
	if err := cp.Client.Delete(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "argocd"}}); err != nil {
		t.Fatal(err)
	}
	createService(t, ns, "jellyfin")
	waitIPs(t, ns, "jellyfin", "10.0.0.201")
	for i, name := range []string{"gitea", "", "harbor", "grafana"} {
		if name != "" {
			waitIPs(t, ns, name, fmt.Sprintf("10.0.0.%d", 200+i))
		}
	}
}

// porticoEvents are the events Portico's controller sent in namespace ns. The apiserver sends
// its own on Services too (its ClusterIP repair loop may report a Service created a moment
// before its sweep: ClusterIPNotAllocated), and they are not ours to count.
func porticoEvents(t *testing.T, ns string) []eventsv1.Event {
	t.Helper()
	var evs eventsv1.EventList
	if err := cp.Client.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(evs.Items, func(e eventsv1.Event) bool { return e.ReportingController != controller.EventReporter })
}

func waitEvent(t *testing.T, ns, name, reason, note string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, e := range porticoEvents(t, ns) {
			if e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, note) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event on %s/%s with %q", reason, ns, name, note)
	}
}

func waitPool(t *testing.T, name, what string, ok func(*porticov1.IPAddressPool) bool) *porticov1.IPAddressPool {
	t.Helper()
	var pool porticov1.IPAddressPool
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &pool); err != nil {
			return false, err
		}
		return ok(&pool), nil
	})
	if err != nil {
		t.Fatalf("pool %s: want %s; last status %+v", name, what, pool.Status)
	}
	return &pool
}

// TestRequests: requested addresses and pools in every spelling; a bad edit keeps the address,
// and the address freed by a deletion goes to the Service that waited for it (the messages of
// every failure are pinned in decide/testdata/decide/requests.txt).
func TestRequests(t *testing.T) {
	startManager(t)
	createPool(t, "req", addresses("203.0.113.0/29"))
	createPool(t, "req-manual", porticov1.IPAddressPoolSpec{Addresses: []porticov1.AddressRange{"203.0.113.8/29"}, AutoAssign: ptr.To(false)})
	ns := namespace(t, nil)

	createService(t, ns, "wants-5", withAnnotation(porticov1.AnnotationLoadBalancerIPs, "203.0.113.5"))
	waitIPs(t, ns, "wants-5", "203.0.113.5")
	createService(t, ns, "metallb-io", withAnnotation("metallb.io/loadBalancerIPs", "203.0.113.6"))
	waitIPs(t, ns, "metallb-io", "203.0.113.6")
	createService(t, ns, "metallb-universe", withAnnotation("metallb.universe.tf/loadBalancerIPs", "203.0.113.7"))
	waitIPs(t, ns, "metallb-universe", "203.0.113.7")
	createService(t, ns, "spec-field", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "203.0.113.4" })
	waitIPs(t, ns, "spec-field", "203.0.113.4")
	createService(t, ns, "manual", withAnnotation("metallb.io/address-pool", "req-manual"))
	waitIPs(t, ns, "manual", "203.0.113.8")

	createService(t, ns, "in-use", withAnnotation(porticov1.AnnotationLoadBalancerIPs, "203.0.113.5"))
	c := waitReason(t, ns, "in-use", porticov1.ReasonRequestedIPInUse)
	if !strings.Contains(c.Message, "203.0.113.5 is in use by "+ns+"/wants-5") {
		t.Errorf("in-use: %q", c.Message)
	}
	// A bad edit of a Service that holds an address keeps the address and says why.
	svc := waitIPs(t, ns, "wants-5", "203.0.113.5")
	update(t, svc, func() { svc.Annotations[porticov1.AnnotationLoadBalancerIPs] = "not-an-ip" })
	c = waitReason(t, ns, "wants-5", porticov1.ReasonInvalidAnnotation)
	if got := ips(waitService(t, ns, "wants-5", "its address", func(*corev1.Service) bool { return true })); got != "203.0.113.5" || !strings.Contains(c.Message, "keeping 203.0.113.5") {
		t.Errorf("wants-5 after a bad edit: %s, %q", got, c.Message)
	}

	// Freeing the address lets the Service that wanted it have it.
	if err := cp.Client.Delete(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	waitIPs(t, ns, "in-use", "203.0.113.5")
}

// TestDualStack: RequireDualStack gets both families from one pool.
func TestDualStack(t *testing.T) {
	startManager(t)
	createPool(t, "dual", addresses("203.0.113.64/30", "2001:db8:64::/126"))
	ns := namespace(t, nil)
	createService(t, ns, "both", func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	})
	svc := waitIPs(t, ns, "both", "2001:db8:64::,203.0.113.64")
	if c := allocated(svc); c.Message != "2001:db8:64:: and 203.0.113.64 from pool dual" {
		t.Errorf("message %q", c.Message)
	}
	createService(t, ns, "v6", func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} })
	waitIPs(t, ns, "v6", "2001:db8:64::1")
}

// TestPoolSelection: serviceAllocation priority and namespace selectors.
func TestPoolSelection(t *testing.T) {
	startManager(t)
	createPool(t, "sel-general", addresses("198.51.100.64/30"))
	createPool(t, "sel-prod", porticov1.IPAddressPoolSpec{
		Addresses: []porticov1.AddressRange{"198.51.100.68/30"},
		ServiceAllocation: &porticov1.ServiceAllocation{Priority: 10, NamespaceSelectors: []metav1.LabelSelector{{
			MatchLabels: map[string]string{"env": "prod"}}}},
	})
	createPool(t, "sel-prod-first", porticov1.IPAddressPoolSpec{
		Addresses: []porticov1.AddressRange{"198.51.100.72/30"},
		ServiceAllocation: &porticov1.ServiceAllocation{Priority: 1, NamespaceSelectors: []metav1.LabelSelector{{
			MatchLabels: map[string]string{"env": "prod"}}}, ServiceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"tier": "edge"}}}},
	})
	prod := namespace(t, map[string]string{"env": "prod"})
	dev := namespace(t, map[string]string{"env": "dev"})
	createService(t, dev, "app")
	waitIPs(t, dev, "app", "198.51.100.64")
	createService(t, prod, "app")
	waitIPs(t, prod, "app", "198.51.100.68")
	createService(t, prod, "edge", func(s *corev1.Service) { s.Labels = map[string]string{"tier": "edge"} })
	waitIPs(t, prod, "edge", "198.51.100.72")

	// A waiting Service gets its address when its namespace is labelled into a pool.
	createPool(t, "sel-staging", porticov1.IPAddressPoolSpec{
		Addresses: []porticov1.AddressRange{"198.51.100.76/30"}, AutoAssign: ptr.To(false),
		ServiceAllocation: &porticov1.ServiceAllocation{NamespaceSelectors: []metav1.LabelSelector{{
			MatchLabels: map[string]string{"env": "staging"}}}},
	})
	createService(t, dev, "staged", withAnnotation(porticov1.AnnotationAddressPool, "sel-staging"))
	waitReason(t, dev, "staged", porticov1.ReasonNotAllowedByPool)
	var ns corev1.Namespace
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Name: dev}, &ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels["env"] = "staging"
	if err := cp.Client.Update(context.Background(), &ns); err != nil {
		t.Fatal(err)
	}
	waitIPs(t, dev, "staged", "198.51.100.76")
}

// TestNotOurs: other classes and non-LoadBalancer Services are left alone; a Service that
// stops being a LoadBalancer gives its address back.
func TestNotOurs(t *testing.T) {
	startManager(t)
	createPool(t, "ours", addresses("198.51.100.128/30"))
	ns := namespace(t, nil)
	createService(t, ns, "other-class", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("example.com/other") })
	createService(t, ns, "cluster-ip", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP })
	createService(t, ns, "our-class", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To(porticov1.DefaultLoadBalancerClass) })
	svc := waitIPs(t, ns, "our-class", "198.51.100.128")

	update(t, svc, func() {
		svc.Spec.Type = corev1.ServiceTypeClusterIP
		svc.Spec.LoadBalancerClass = nil
	})
	waitService(t, ns, "our-class", "no Portico trace", func(s *corev1.Service) bool {
		_, annotated := s.Annotations[porticov1.AnnotationAllocatedFromPool]
		return allocated(s) == nil && !annotated && len(s.Status.LoadBalancer.Ingress) == 0
	})
	createService(t, ns, "next")
	waitIPs(t, ns, "next", "198.51.100.128")
	for _, name := range []string{"other-class", "cluster-ip"} {
		var s corev1.Service
		if err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
			t.Fatal(err)
		}
		if allocated(&s) != nil || len(s.Status.LoadBalancer.Ingress) > 0 {
			t.Errorf("%s was touched: %+v", name, s.Status)
		}
	}
}
