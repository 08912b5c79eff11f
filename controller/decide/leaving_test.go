package decide

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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

// TestLeavingASharedAddress: a Service that moves off an address it shares keeps it held while
// its status may list it, even once the Service it shared it with is gone; the hold used to be
// exclusive, failed beside the other Service, and the address went to a third Service while
// the mover's status still listed it (found by the simulator, seed 2001468).
func TestLeavingASharedAddress(t *testing.T) {
	b := NewBook()
	b.SetPools([]porticov1.IPAddressPool{
		{ObjectMeta: metav1.ObjectMeta{Name: "home", Generation: 1}, Spec: porticov1.IPAddressPoolSpec{Addresses: []porticov1.AddressRange{"10.0.0.1-10.0.0.1"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "extra", Generation: 1}, Spec: porticov1.IPAddressPoolSpec{Addresses: []porticov1.AddressRange{"10.0.1.1-10.0.1.1"}}},
	})
	svc := func(name string, port int32, ann map[string]string) Seen {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: ann},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: port}}}}
		in := Seen{Key: "ns/" + name, Svc: s, Ours: true}
		in.Req, in.ReqErr = buildRequest(s, nil)
		in.Listed = nil
		return in
	}
	shared := map[string]string{porticov1.AnnotationAllowSharedIP: "k1", porticov1.AnnotationAddressPool: "home"}
	home := netip.MustParseAddr("10.0.0.1")
	for _, in := range []Seen{svc("a", 80, shared), svc("b", 81, shared)} {
		if rd := Service(b, in); !slices.Equal(rd.asg.IPs, []netip.Addr{home}) {
			t.Fatalf("%s got %v", in.Key, rd.asg.IPs)
		}
	}
	moving := svc("a", 80, map[string]string{porticov1.AnnotationAllowSharedIP: "k1", porticov1.AnnotationAddressPool: "extra"})
	moving.Listed = []netip.Addr{home} // its stored status still lists it
	Service(b, moving)
	Service(b, Seen{Key: "ns/b"}) // b is gone
	if rd := Service(b, svc("c", 82, map[string]string{porticov1.AnnotationAddressPool: "home"})); len(rd.asg.IPs) > 0 {
		t.Fatalf("c got %v while a's status may still list it", rd.asg.IPs)
	}
}

// TestRecreatedServiceStartsAfresh: a Service deleted and created again under its name before
// the controller saw the deletion (the two events coalesce in its queue) does not inherit what
// the old object held. It used to keep it when its own request could not be met: the simulator
// (seed 3034519) found the new object, with no sharing key, keeping an address the old one had
// shared under k1, beside the Service it had shared it with.
func TestRecreatedServiceStartsAfresh(t *testing.T) {
	b := NewBook()
	b.SetPools([]porticov1.IPAddressPool{{ObjectMeta: metav1.ObjectMeta{Name: "home", Generation: 1},
		Spec: porticov1.IPAddressPoolSpec{Addresses: []porticov1.AddressRange{"10.0.0.1-10.0.0.2"}}}})
	seen := func(uid string, ann map[string]string) Seen {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: types.UID(uid), Annotations: ann},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
		in := Seen{Key: "ns/a", Svc: s, Ours: true}
		in.Req, in.ReqErr = buildRequest(s, nil)
		return in
	}
	if rd := Service(b, seen("old", nil)); len(rd.asg.IPs) != 1 {
		t.Fatalf("the old object got %v", rd.asg.IPs)
	}
	rd := Service(b, seen("new", map[string]string{porticov1.AnnotationLoadBalancerIPs: "192.0.2.1"}))
	if len(rd.asg.IPs) != 0 {
		t.Fatalf("the new object, whose request cannot be met, kept the old one's %v", rd.asg.IPs)
	}
}
