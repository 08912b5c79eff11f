package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

func withAddressHold(d time.Duration) func(*porticov1.IPAddressPoolSpec) {
	return func(s *porticov1.IPAddressPoolSpec) {
		s.AddressHold = &porticov1.AddressHold{Duration: metav1.Duration{Duration: d}}
	}
}

// holdsOf lists a pool's holds as "address ns/name".
func holdsOf(p *porticov1.IPAddressPool) string {
	var s []string
	for _, h := range p.Status.Holds {
		s = append(s, fmt.Sprintf("%s %s/%s", h.Address, h.Namespace, h.Name))
	}
	return strings.Join(s, ",")
}

func waitHolds(t *testing.T, pool, want string) {
	t.Helper()
	waitPool(t, pool, "holds "+want, func(p *porticov1.IPAddressPool) bool { return holdsOf(p) == want })
}

func deleteService(t *testing.T, ns, name string) {
	t.Helper()
	if err := cp.Client.Delete(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// TestAddressHoldAcrossRestart: a Service deleted and created again (a Helm uninstall and
// install) gets its address back from a pool with an addressHold, also when the controller
// restarted in between: the hold is read back from the pool's status. Meanwhile another
// Service gets the other address, and a third waits, told that the pool holds the address.
func TestAddressHoldAcrossRestart(t *testing.T) {
	spec := addresses("198.51.100.200/31")
	withAddressHold(10 * time.Minute)(&spec)
	createPoolsBeforeController(t, map[string]porticov1.IPAddressPoolSpec{"holds": spec})
	ns := namespace(t, nil)
	fromHolds := withAnnotation(porticov1.AnnotationAddressPool, "holds")

	t.Run("first controller", func(t *testing.T) {
		startManager(t) // stopped when the subtest ends
		createService(t, ns, "web", fromHolds)
		waitIPs(t, ns, "web", "198.51.100.200")
		deleteService(t, ns, "web")
		waitHolds(t, "holds", "198.51.100.200 "+ns+"/web")

		createService(t, ns, "other", fromHolds)
		waitIPs(t, ns, "other", "198.51.100.201")
		createService(t, ns, "third", fromHolds)
		if c := waitReason(t, ns, "third", porticov1.ReasonPoolExhausted); !strings.Contains(c.Message, "held for deleted Services") {
			t.Errorf("third: %+v", c)
		}

		createService(t, ns, "web", fromHolds)
		waitIPs(t, ns, "web", "198.51.100.200")
		waitHolds(t, "holds", "")

		deleteService(t, ns, "web")
		waitHolds(t, "holds", "198.51.100.200 "+ns+"/web")
	})
	createService(t, ns, "web", fromHolds) // while no controller runs

	startManager(t)
	waitIPs(t, ns, "web", "198.51.100.200")
	waitHolds(t, "holds", "")
	if c := waitReason(t, ns, "third", porticov1.ReasonPoolExhausted); c.Status != metav1.ConditionFalse {
		t.Errorf("third: %+v", c)
	}
}

// TestAddressHoldEnds: when the hold's time is up, nothing the watches see happens; the pool
// reconciler looks again then, ends it, and the Service that waited for the address gets it.
func TestAddressHoldEnds(t *testing.T) {
	reg := startManager(t)
	spec := addresses("198.51.100.202/32")
	withAddressHold(10 * time.Second)(&spec)
	createPool(t, "holds-end", spec)
	ns := namespace(t, nil)
	fromPool := withAnnotation(porticov1.AnnotationAddressPool, "holds-end")

	createService(t, ns, "gone", fromPool)
	waitIPs(t, ns, "gone", "198.51.100.202")
	deleteService(t, ns, "gone")
	waitHolds(t, "holds-end", "198.51.100.202 "+ns+"/gone")
	// Set before the status write we waited for: held, neither in use nor gone from the pool.
	ofPool := map[string]string{"pool": "holds-end"}
	for name, labels := range map[string]map[string]string{"portico_pool_addresses_held": ofPool,
		"portico_pool_addresses": {"pool": "holds-end", "family": "IPv4"}} {
		if v, found := sample(t, reg, name, labels); !found || v != 1 {
			t.Errorf("%s %v = %v (found %t), want 1", name, labels, v, found)
		}
	}
	createService(t, ns, "waiting", fromPool)
	waitEvent(t, ns, "waiting", "AllocationFailed", "held for deleted Services")
	waitIPs(t, ns, "waiting", "198.51.100.202")
	waitHolds(t, "holds-end", "")
}
