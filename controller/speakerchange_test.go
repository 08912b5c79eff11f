package controller_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
)

// TestSpeakerChange: what a Speaker's status write makes the health reconciler run again.
func TestSpeakerChange(t *testing.T) {
	base := func() *porticov1.Speaker {
		return &porticov1.Speaker{Status: porticov1.SpeakerStatus{
			HardwareAddrs: []string{"02:00:00:00:00:0a"},
			Announcements: []porticov1.Announcement{
				{IP: "203.0.113.1", Service: "shop/web", Protocol: porticov1.ProtocolL2},
				{IP: "203.0.113.2", Service: "shop/api", Protocol: porticov1.ProtocolL2},
			},
			SelfChecks: []porticov1.SelfCheck{{IP: "203.0.113.3", MACs: []string{"02:00:00:00:00:0b"}, Time: metav1.NewTime(time.Unix(100, 0))}},
		}}
	}
	for _, tc := range []struct {
		name     string
		change   func(*porticov1.SpeakerStatus)
		services []string
		probed   []netip.Addr
		all      bool
	}{
		{"nothing", func(*porticov1.SpeakerStatus) {}, nil, nil, false},
		{"a probe's time alone", func(s *porticov1.SpeakerStatus) { s.SelfChecks[0].Time = metav1.NewTime(time.Unix(200, 0)) }, nil, nil, false},
		{"one address given up", func(s *porticov1.SpeakerStatus) { s.Announcements = s.Announcements[:1] }, []string{"shop/api"}, nil, false},
		{"one address gained", func(s *porticov1.SpeakerStatus) {
			s.Announcements = append(s.Announcements, porticov1.Announcement{IP: "203.0.113.4", Service: "shop/db", Protocol: porticov1.ProtocolL2})
		}, []string{"shop/db"}, nil, false},
		{"an interface of one", func(s *porticov1.SpeakerStatus) { s.Announcements[0].Interfaces = []string{"eth1"} }, []string{"shop/web"}, nil, false},
		{"a second MAC answers a probe", func(s *porticov1.SpeakerStatus) {
			s.SelfChecks[0].MACs = append(s.SelfChecks[0].MACs, "02:00:00:00:00:0c")
		}, nil, []netip.Addr{netip.MustParseAddr("203.0.113.3")}, false},
		{"BGP routes", func(s *porticov1.SpeakerStatus) { s.BGP = &porticov1.SpeakerBGP{} }, nil, nil, false},
		{"its MACs", func(s *porticov1.SpeakerStatus) { s.HardwareAddrs = []string{"02:00:00:00:00:0d"} }, nil, nil, true},
		{"a condition", func(s *porticov1.SpeakerStatus) {
			s.Conditions = []metav1.Condition{{Type: porticov1.ConditionStrictARP, Status: metav1.ConditionFalse}}
		}, nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, after := base(), base()
			tc.change(&after.Status)
			services, probed, all := controller.SpeakerChange(before, after)
			if !slices.Equal(services, tc.services) || !slices.Equal(probed, tc.probed) || all != tc.all {
				t.Errorf("got %v %v all=%v, want %v %v all=%v", services, probed, all, tc.services, tc.probed, tc.all)
			}
		})
	}
}

// healthQueueAdds reads how many requests the health reconciler's queue has been given.
func healthQueueAdds(t *testing.T) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "workqueue_adds_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == "service-health" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatal("no workqueue_adds_total for service-health")
	return 0
}

// TestSpeakerWriteRerunsItsService: a speaker that starts announcing one of n addressed
// Services makes the health reconciler run that Service again, not all n.
func TestSpeakerWriteRerunsItsService(t *testing.T) {
	startManager(t)
	createPool(t, "rerun", addresses("203.0.113.64/27"))
	create(t, &porticov1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "rerun"}, Spec: porticov1.L2AdvertisementSpec{IPAddressPools: []porticov1.Name{"rerun"}}})
	create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-rerun"}})
	speaker := &porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: "node-rerun"}}
	create(t, speaker)
	ns := namespace(t, nil)
	const n = 20
	var first *corev1.Service
	for i := range n {
		createService(t, ns, fmt.Sprintf("s%02d", i))
	}
	for i := range n {
		name := fmt.Sprintf("s%02d", i)
		svc := waitService(t, ns, name, "an address", func(s *corev1.Service) bool { return len(s.Status.LoadBalancer.Ingress) > 0 })
		waitAnnounced(t, ns, name, metav1.ConditionUnknown, porticov1.ReasonAnnouncePending,
			fmt.Sprintf("node node-rerun is elected to answer for %s; its speaker does not report it yet", svc.Status.LoadBalancer.Ingress[0].IP))
		if i == 0 {
			first = svc
		}
	}

	before := healthQueueAdds(t)
	ip := first.Status.LoadBalancer.Ingress[0].IP
	report(t, speaker, porticov1.Announcement{IP: ip, Service: ns + "/s00", Protocol: porticov1.ProtocolL2, Interfaces: []string{"eth0"}})
	waitAnnounced(t, ns, "s00", metav1.ConditionTrue, porticov1.ReasonAnnouncedL2, ip+" from node node-rerun on eth0")
	// The Speaker's update was handled before s00 could change: every request it made is counted.
	if added := healthQueueAdds(t) - before; added >= n/2 {
		t.Errorf("one Speaker write gave the health reconciler %.0f requests for %d Services; want those of the one it changed", added, n)
	}
}
