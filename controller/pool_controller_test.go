package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
	"github.com/portico-lb/portico/internal/controlplane"
)

var cp *controlplane.ControlPlane

// The control plane is dual-stack, so dual-stack Services can be created.
func TestMain(m *testing.M) {
	controlplane.MainWith(m, &cp, controlplane.Options{APIServerArgs: map[string]string{
		"service-cluster-ip-range": controlplane.ServiceCIDR + ",fd00:10:96::/112",
	}})
}

// startManager runs the controller's reconcilers against the test apiserver until the test
// ends; their metrics go to the registry it returns.
func startManager(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	cp.RunManager(t, func(mgr ctrl.Manager) error {
		return controller.Setup(mgr, controller.Options{Metrics: controller.NewMetrics(reg), NewsAfter: 100 * time.Millisecond})
	})
	return reg
}

// waitForReady polls the pool until its Ready condition has the wanted status and reason.
func waitForReady(t *testing.T, name string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var last *metav1.Condition
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			var pool porticov1.IPAddressPool
			if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &pool); err != nil {
				return false, err
			}
			last = meta.FindStatusCondition(pool.Status.Conditions, porticov1.ConditionReady)
			return last != nil && last.Status == status && last.Reason == reason &&
				last.ObservedGeneration == pool.Generation, nil
		})
	if err != nil {
		t.Fatalf("pool %s: want Ready=%s/%s, last seen %+v: %v", name, status, reason, last, err)
	}
	return *last
}

func createPool(t *testing.T, name string, spec porticov1.IPAddressPoolSpec) *porticov1.IPAddressPool {
	t.Helper()
	pool := &porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if err := cp.Client.Create(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), pool) })
	// Wait until the controller has seen it, so Services created next find it.
	waitPool(t, name, "a Ready condition", func(p *porticov1.IPAddressPool) bool {
		return meta.FindStatusCondition(p.Status.Conditions, porticov1.ConditionReady) != nil
	})
	return pool
}

// TestPoolReadyReportsWhatCELCannot covers the rules the apiserver cannot enforce: each
// is accepted by the apiserver and then reported on the pool, naming the entry.
func TestPoolReadyReportsWhatCELCannot(t *testing.T) {
	startManager(t)
	cases := []struct {
		name   string
		spec   porticov1.IPAddressPoolSpec
		reason string
		want   string
	}{
		{"ipv6-backwards", porticov1.IPAddressPoolSpec{Addresses: []porticov1.AddressRange{"2001:db8::10-2001:db8::1"}},
			porticov1.ReasonInvalidAddresses, `addresses[0] "2001:db8::10-2001:db8::1": range start 2001:db8::10 is after its end 2001:db8::1`},
		{"overlapping-entries", porticov1.IPAddressPoolSpec{Addresses: []porticov1.AddressRange{"10.0.0.0/24", "10.0.0.200-10.0.0.215"}},
			porticov1.ReasonInvalidAddresses, `addresses[1] "10.0.0.200-10.0.0.215": overlaps addresses[0] "10.0.0.0/24"`},
		{"across-loopback", porticov1.IPAddressPoolSpec{Addresses: []porticov1.AddressRange{"126.255.255.0-128.0.0.255", "fe7f::-fec0::"}},
			porticov1.ReasonInvalidAddresses, `addresses[0] "126.255.255.0-128.0.0.255": holds 127.0.0.0/8: 127.0.0.0/8 and ::1 are loopback (RFC 1122, RFC 4291), reachable only inside each host, and can never be a Service address; addresses[1] "fe7f::-fec0::": holds fe80::/10: 169.254.0.0/16 and fe80::/10 are link-local`},
		{"bad-selector", porticov1.IPAddressPoolSpec{
			Addresses: []porticov1.AddressRange{"10.0.1.0/24"},
			ServiceAllocation: &porticov1.ServiceAllocation{ServiceSelectors: []metav1.LabelSelector{{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Matches", Values: []string{"gitea"}}},
			}}},
		}, porticov1.ReasonInvalidSelector, `serviceAllocation.serviceSelectors[0]: "Matches" is not a valid label selector operator`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			createPool(t, tc.name, tc.spec)
			cond := waitForReady(t, tc.name, metav1.ConditionFalse, tc.reason)
			if !strings.Contains(cond.Message, tc.want) {
				t.Errorf("Ready message %q lacks %q", cond.Message, tc.want)
			}
		})
	}
}

// TestPoolReadyRechecksAddressHold: a duration the CEL rule refuses (written while validation
// was relaxed) holds nothing, and Ready says so.
func TestPoolReadyRechecksAddressHold(t *testing.T) {
	pool := &porticov1.IPAddressPool{Spec: addresses("10.0.0.0/24")}
	pool.Spec.AddressHold = &porticov1.AddressHold{Duration: metav1.Duration{Duration: 200 * time.Hour}}
	c := controller.PoolReadyCondition(pool)
	want := "addressHold.duration 200h0m0s is not between 1s and 168h0m0s: no address is held"
	if c.Reason != porticov1.ReasonInvalidAddressHold || c.Message != want || pool.HoldFor() != 0 {
		t.Errorf("Ready %s %q, holds for %s; want %s %q, 0", c.Reason, c.Message, pool.HoldFor(), porticov1.ReasonInvalidAddressHold, want)
	}
}

// TestPoolReadyFollowsEdits: a valid pool is Ready, breaking it makes it not Ready, fixing it
// makes it Ready again, each with the generation it describes.
func TestPoolReadyFollowsEdits(t *testing.T) {
	startManager(t)
	ctx := context.Background()
	pool := createPool(t, "home-lab", porticov1.IPAddressPoolSpec{Addresses: []porticov1.AddressRange{"10.0.0.200-10.0.0.215"}})
	waitForReady(t, pool.Name, metav1.ConditionTrue, porticov1.ReasonValid)

	for i, edit := range []struct {
		addresses []porticov1.AddressRange
		status    metav1.ConditionStatus
		reason    string
	}{
		{[]porticov1.AddressRange{"10.0.0.200-10.0.0.215", "2001:db8::ff-2001:db8::1"}, metav1.ConditionFalse, porticov1.ReasonInvalidAddresses},
		{[]porticov1.AddressRange{"10.0.0.200-10.0.0.215", "2001:db8::1-2001:db8::ff"}, metav1.ConditionTrue, porticov1.ReasonValid},
	} {
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			t.Fatal(err)
		}
		pool.Spec.Addresses = edit.addresses
		if err := cp.Client.Update(ctx, pool); err != nil {
			t.Fatalf("edit %d: %v", i, err)
		}
		cond := waitForReady(t, pool.Name, edit.status, edit.reason)
		t.Logf("edit %d: Ready=%s %s: %s", i, cond.Status, cond.Reason, cond.Message)
	}
}

// TestOverlappingPoolsCountEachAddress: an address taken from one pool is counted by every
// pool that contains it, and freed in each when the Service lets it go.
func TestOverlappingPoolsCountEachAddress(t *testing.T) {
	reg := startManager(t)
	ns := namespace(t, nil)
	createPool(t, "overlap-a-narrow", addresses("10.0.9.0/30"))
	createPool(t, "overlap-b-wide", addresses("10.0.9.0/28"))
	counts := func(assigned int64, available string) func(*porticov1.IPAddressPool) bool {
		return func(p *porticov1.IPAddressPool) bool {
			return p.Status.Assigned == assigned && p.Status.Available == available &&
				meta.IsStatusConditionTrue(p.Status.Conditions, porticov1.ConditionOverlapping)
		}
	}
	waitPool(t, "overlap-b-wide", "0 assigned, 16 available, Overlapping", counts(0, "16"))
	// Both are configuration errors to the leader's series (portico_config_errors).
	var errs float64
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		errs, _ = sample(t, reg, "portico_config_errors", map[string]string{"kind": "IPAddressPool"})
		return errs == 2, nil
	}); err != nil {
		t.Fatalf("portico_config_errors{kind=IPAddressPool} is %v, want the 2 overlapping pools", errs)
	}

	svc := createService(t, ns, "web")
	waitIPs(t, ns, "web", "10.0.9.0") // the narrow pool comes first by name
	waitPool(t, "overlap-a-narrow", "1 assigned, 3 available", counts(1, "3"))
	waitPool(t, "overlap-b-wide", "1 assigned, 15 available", counts(1, "15"))

	if err := cp.Client.Delete(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	waitPool(t, "overlap-a-narrow", "0 assigned, 4 available", counts(0, "4"))
	waitPool(t, "overlap-b-wide", "0 assigned, 16 available", counts(0, "16"))
}
