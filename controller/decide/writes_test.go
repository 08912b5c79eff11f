package decide

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
)

func listing(rv string, ips ...string) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u1", ResourceVersion: rv}}
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip, IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)})
	}
	return svc
}

func addresses(ips ...string) func(*corev1.Service) {
	var asg allocator.Assignment
	for _, ip := range ips {
		asg.IPs = append(asg.IPs, netip.MustParseAddr(ip))
	}
	return Ready{addresses: true, asg: asg}.Apply
}

func condition(reason string) func(*corev1.Service) {
	return func(svc *corev1.Service) {
		meta.SetStatusCondition(&svc.Status.Conditions, metav1.Condition{Type: porticov1.ConditionReachable, Status: metav1.ConditionTrue, Reason: reason})
	}
}

// TestRebaseKeepsAddressesItDidNotDecideFrom: after a conflict, a write that sets addresses is
// dropped when the stored addresses are not those it was decided from (the next leader's
// write, say) or the Service was edited since, and rebased when neither changed; a
// conditions-only write is always rebased. (The rule before the fix, which re-applied the
// addresses over anything, lives on only in the simulator: sim.Options.OldConflictRule.)
func TestRebaseKeepsAddressesItDidNotDecideFrom(t *testing.T) {
	for _, tc := range []struct {
		name    string
		apply   func(*corev1.Service)
		current *corev1.Service
		want    []netip.Addr // nil with drop
		drop    bool
	}{
		{"addresses, stored ones changed", addresses("10.0.0.5"), listing("7", "10.0.0.6"), nil, true},
		{"addresses, stored ones unchanged", addresses("10.0.0.5"), listing("7"), []netip.Addr{netip.MustParseAddr("10.0.0.5")}, false},
		{"conditions, stored addresses changed", condition("Answered"), listing("7", "10.0.0.6"), []netip.Addr{netip.MustParseAddr("10.0.0.6")}, false},
		{"addresses, sharing key edited since", addresses("10.0.0.5"), func() *corev1.Service {
			s := listing("7")
			s.Annotations = map[string]string{porticov1.AnnotationAllowSharedIP: "k2"}
			return s
		}(), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWrites()
			job := w.Submit(NewWrite("ns/a", listing("5"), tc.apply))
			if job == nil {
				t.Fatal("the write was found redundant")
			}
			sent, err := w.Rebase(job, tc.current)
			if tc.drop {
				if !errors.Is(err, errDecideAgain) || sent != nil {
					t.Fatalf("want the write dropped, got %v, %v", sent, err)
				}
				return
			}
			if err != nil || sent == nil {
				t.Fatalf("want a rebased write, got %v, %v", sent, err)
			}
			if got := porticov1.IngressAddrs(sent); !slices.Equal(got, tc.want) {
				t.Fatalf("rebased write lists %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSubmitSkipsRedundantWrites: the same write twice is sent once; a write the cache shows
// already is not sent; after a landed write the cache has not seen, nothing is sent until it
// has (its event brings the Service back), and what it listed may be stored meanwhile.
func TestSubmitSkipsRedundantWrites(t *testing.T) {
	w := NewWrites()
	cached := listing("5")
	job := w.Submit(NewWrite("ns/a", cached, addresses("10.0.0.5")))
	if job == nil || w.Submit(NewWrite("ns/a", cached, addresses("10.0.0.5"))) != nil {
		t.Fatal("want one write of two identical ones")
	}
	if got := w.MayList("ns/a", cached); len(got) != 1 {
		t.Fatalf("a write on its way may list 10.0.0.5; MayList says %v", got)
	}
	w.Done(job)
	w.Finished(job, "5", nil)
	if w.Submit(NewWrite("ns/a", cached, addresses("10.0.0.6"))) != nil {
		t.Fatal("a write was sent from a copy older than our landed write")
	}
	if got := w.MayList("ns/a", cached); len(got) != 1 {
		t.Fatalf("a landed write the cache has not seen may list 10.0.0.5; MayList says %v", got)
	}
	seen := listing("6", "10.0.0.5")
	if w.Submit(NewWrite("ns/a", seen, addresses("10.0.0.5"))) != nil {
		t.Fatal("a write the cache shows already was sent")
	}
	if got := w.MayList("ns/a", seen); len(got) != 0 {
		t.Fatalf("the cache shows the write; MayList says %v", got)
	}
}
