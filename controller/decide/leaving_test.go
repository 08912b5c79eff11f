package decide

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// TestLeavingTwiceListed: two writes on their way may both list the address a Service gives
// up (the status writer's MayList repeats it). Holding it twice corrupted the allocator, and
// the next decision for the Service panicked in allocator.Release (found by the simulator).
func TestLeavingTwiceListed(t *testing.T) {
	b := NewBook()
	b.SetPools([]porticov1.IPAddressPool{{ObjectMeta: metav1.ObjectMeta{Name: "home", Generation: 1},
		Spec: porticov1.IPAddressPoolSpec{Addresses: []porticov1.AddressRange{"10.0.0.1-10.0.0.4"}}}})
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}
	ip := netip.MustParseAddr("10.0.0.1")
	Service(b, Seen{Key: "ns/a", Svc: svc, Listed: []netip.Addr{ip, ip}})
	if got := b.poolsContaining([]netip.Addr{ip}); len(got) != 1 {
		t.Fatalf("10.0.0.1 is in %v", got)
	}
	rd := Service(b, Seen{Key: "ns/a", Svc: svc}) // the writes are done: it lets go
	if len(rd.Retry) != 0 || len(rd.Pools) != 1 {
		t.Fatalf("letting go of 10.0.0.1: %+v", rd)
	}
	if s, _ := b.alloc.Stats("home"); s.Assigned[0] != 0 {
		t.Fatalf("home still has %d assigned", s.Assigned[0])
	}
}
