package controller_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/plugin"
	"github.com/portico-lb/portico/plugin/explain"
)

// dualStack makes a Service dual-stack, families in the order given.
func dualStack(policy corev1.IPFamilyPolicy, families ...corev1.IPFamily) svcOpt {
	return func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(policy)
		s.Spec.IPFamilies = families
	}
}

// TestDualStackFromTwoPools: an IPv4 pool and an IPv6 pool, as IPAM teams keep them. Dual-stack
// Services take each family from the pool that has it, automatically or by naming both pools
// (in Portico's annotation or MetalLB's, which MetalLB itself refuses: metallb#1156, #1776);
// status names the pool of each. Two pools of one family get PoolsOfOneFamily and move nothing;
// a controller restarted changes nothing.
func TestDualStackFromTwoPools(t *testing.T) {
	createPoolsBeforeController(t, map[string]porticov1.IPAddressPoolSpec{
		"split-v4": addresses("198.51.100.244/30"), "split-v6": addresses("2001:db8:48::/126"),
		"split-v4b": {Addresses: []porticov1.AddressRange{"203.0.113.244/30"}, AutoAssign: ptr.To(false)},
	})
	ns := namespace(t, nil)
	v4v6 := dualStack(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)
	want := map[string]struct{ ips, pools, message string }{
		"auto": {"198.51.100.244,2001:db8:48::", "split-v4,split-v6",
			"198.51.100.244 from pool split-v4 and 2001:db8:48:: from pool split-v6"},
		"named": {"2001:db8:48::1,198.51.100.245", "split-v6,split-v4",
			"2001:db8:48::1 from pool split-v6 and 198.51.100.245 from pool split-v4"},
		"metallb": {"198.51.100.246,2001:db8:48::2", "split-v4,split-v6",
			"198.51.100.246 from pool split-v4 and 2001:db8:48::2 from pool split-v6"},
	}
	t.Run("first controller", func(t *testing.T) {
		startManager(t) // stopped when the subtest ends
		createService(t, ns, "auto", v4v6)
		waitIPs(t, ns, "auto", want["auto"].ips)
		createService(t, ns, "named", dualStack(corev1.IPFamilyPolicyPreferDualStack, corev1.IPv6Protocol, corev1.IPv4Protocol),
			withAnnotation(porticov1.AnnotationAddressPool, "split-v4,split-v6"))
		waitIPs(t, ns, "named", want["named"].ips)
		createService(t, ns, "metallb", v4v6, withAnnotation(porticov1.MetalLBAddressPool[0], "split-v6, split-v4"))
		waitIPs(t, ns, "metallb", want["metallb"].ips)
		checkSplit(t, ns, want)

		// Two pools of one family: a specific condition and event, and the addresses stay.
		named := &corev1.Service{}
		named.Namespace, named.Name = ns, "named"
		update(t, named, func() { withAnnotation(porticov1.AnnotationAddressPool, "split-v4,split-v4b")(named) })
		c := waitReason(t, ns, "named", porticov1.ReasonPoolsOfOneFamily)
		if c.Message != "the requested pools split-v4 and split-v4b both have IPv4 addresses: name one pool per family (an IPv4 pool and an IPv6 pool), or one pool; keeping 2001:db8:48::1,198.51.100.245 until the request can be met" {
			t.Errorf("named: %s", c.Message)
		}
		waitEvent(t, ns, "named", "AllocationFailed", "PoolsOfOneFamily: "+c.Message)
		checkSplit(t, ns, want) // the condition aside: named keeps its addresses and their pools
		update(t, named, func() { withAnnotation(porticov1.AnnotationAddressPool, "split-v4,split-v6")(named) })
		waitReason(t, ns, "named", porticov1.ReasonAllocated)
		checkSplit(t, ns, want)
	})
	startManager(t)
	createService(t, ns, "marker", withAnnotation(porticov1.AnnotationAddressPool, "split-v4b"))
	waitIPs(t, ns, "marker", "203.0.113.244") // decided after every Service listed at start
	checkSplit(t, ns, want)

	// kubectl portico explain names both pools.
	var out bytes.Buffer
	if err := explain.Run(context.Background(), &plugin.Env{Client: cp.Client, Namespace: ns, Out: &out}, "auto"); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"pool split-v4 (198.51.100.244/30): ", "pool split-v6 (2001:db8:48::/126): ",
		"IPAllocated=True Allocated: " + want["auto"].message} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("kubectl portico explain svc/auto says no %q:\n%s", line, out.String())
		}
	}
}

// checkSplit checks each Service's addresses, allocated-from-pool and, when it is Allocated,
// its condition's message.
func checkSplit(t *testing.T, ns string, want map[string]struct{ ips, pools, message string }) {
	t.Helper()
	for name, w := range want {
		var svc corev1.Service
		if err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			t.Fatal(err)
		}
		if got := ips(&svc); got != w.ips {
			t.Errorf("%s: addresses %s, want %s", name, got, w.ips)
		}
		if got := svc.Annotations[porticov1.AnnotationAllocatedFromPool]; got != w.pools {
			t.Errorf("%s: allocated-from-pool %q, want %q", name, got, w.pools)
		}
		if c := allocated(&svc); c.Reason == porticov1.ReasonAllocated && c.Message != w.message {
			t.Errorf("%s: %s, want %s", name, c.Message, w.message)
		}
	}
}
