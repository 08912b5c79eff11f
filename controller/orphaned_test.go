package controller_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// TestOrphanedIsNotAnnounced: once its pool shrinks, a Service keeps its address
// (IPAllocated=True, OrphanedIP) but no advertisement covers the address any more, so the
// speakers drop it; Announced must say so rather than leave the Service looking healthy.
func TestOrphanedIsNotAnnounced(t *testing.T) {
	startManager(t)
	pool := createPool(t, "orphan-announce", addresses("198.51.100.184/30"))
	create(t, &porticov1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "orphan-announce"},
		Spec: porticov1.L2AdvertisementSpec{IPAddressPools: []porticov1.Name{"orphan-announce"}}})
	create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-orphan"}})
	speakerNode := &porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: "node-orphan"}}
	create(t, speakerNode)
	ns := namespace(t, nil)
	createService(t, ns, "web")
	waitIPs(t, ns, "web", "198.51.100.184")
	report(t, speakerNode, porticov1.Announcement{IP: "198.51.100.184", Service: ns + "/web", Protocol: porticov1.ProtocolL2, Interfaces: []string{"eth0"}})
	waitAnnounced(t, ns, "web", metav1.ConditionTrue, porticov1.ReasonAnnouncedL2, "198.51.100.184 from node node-orphan on eth0")

	update(t, pool, func() { pool.Spec.Addresses = []porticov1.AddressRange{"198.51.100.185-198.51.100.187"} })
	report(t, speakerNode) // as the speaker does: an address in no pool is a config problem, not announced
	waitReason(t, ns, "web", porticov1.ReasonOrphanedIP)
	const why = "198.51.100.184 is outside every IPAddressPool; no advertisement covers it, so no node announces it: restore the pool or move the Service"
	waitAnnounced(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonOrphanedIP, why)
	waitEvent(t, ns, "web", porticov1.ReasonOrphanedIP, why)
}
