//go:build chaos

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/rules"
)

// setPool creates the pool or replaces its addresses.
func setPool(t testing.TB, cp *controlplane.ControlPlane, name string, addresses ...porticov1.AddressRange) {
	t.Helper()
	retrying(t, "set pool "+name, func(ctx context.Context) error {
		var pool porticov1.IPAddressPool
		found, err := getObject(ctx, cp.Client, client.ObjectKey{Name: name}, &pool)
		if err != nil {
			return err
		}
		if !found {
			pool = porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: porticov1.IPAddressPoolSpec{Addresses: addresses}}
			return cp.Client.Create(ctx, &pool)
		}
		pool.Spec.Addresses = addresses
		return cp.Client.Update(ctx, &pool)
	})
}

func getObject(ctx context.Context, c client.Reader, key client.ObjectKey, obj client.Object) (bool, error) {
	err := c.Get(ctx, key, obj)
	if client.IgnoreNotFound(err) != nil {
		return false, err
	}
	return err == nil, nil
}

func deletePool(t testing.TB, cp *controlplane.ControlPlane, name string) {
	t.Helper()
	retrying(t, "delete pool "+name, func(ctx context.Context) error {
		return client.IgnoreNotFound(cp.Client.Delete(ctx, &porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	})
}

// orphanProblems checks that a Service is reported orphaned exactly when an address it holds
// lies outside every pool, and that the pool it came from (if it still exists) says so.
func orphanProblems(ctx context.Context, c client.Reader) (orphans int, bad []string, err error) {
	var pools porticov1.IPAddressPoolList
	if err := c.List(ctx, &pools); err != nil {
		return 0, nil, err
	}
	var ranges []rules.Range
	orphanedPool := map[string]bool{}
	for _, p := range pools.Items {
		rs, _ := rules.PoolRanges(&p)
		ranges = append(ranges, rs...)
		orphanedPool[p.Name] = meta.IsStatusConditionTrue(p.Status.Conditions, porticov1.ConditionOrphanedIPs)
	}
	inSomePool := func(ip netip.Addr) bool {
		for _, r := range ranges {
			if r.Contains(ip) {
				return true
			}
		}
		return false
	}
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs, client.InNamespace("default")); err != nil {
		return 0, nil, err
	}
	for _, svc := range svcs.Items {
		outside := false
		for _, in := range svc.Status.LoadBalancer.Ingress {
			outside = outside || !inSomePool(netip.MustParseAddr(in.IP))
		}
		cond := meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionIPAllocated)
		reported := cond != nil && cond.Reason == porticov1.ReasonOrphanedIP
		from := svc.Annotations[porticov1.AnnotationAllocatedFromPool]
		switch {
		case outside && !reported:
			bad = append(bad, fmt.Sprintf("%s holds an address outside every pool but is not reported orphaned (%v)", svc.Name, cond))
		case !outside && reported:
			bad = append(bad, fmt.Sprintf("%s is reported orphaned but its addresses are in a pool", svc.Name))
		case outside:
			orphans++
			if exists, said := orphanedPool[from]; exists && !said {
				bad = append(bad, fmt.Sprintf("pool %s gave %s an address it no longer holds and does not say so", from, svc.Name))
			}
		}
	}
	return orphans, bad, nil
}

// TestChaosConfig: pools grown, shrunk, split, overlapped, deleted and recreated under
// Services; one pool written while the CRD's validation was switched off. No address
// changes, each orphan is reported on its Service and its pool, and the controller runs on.
func TestChaosConfig(t *testing.T) {
	n := max(chaosServices(t)/10, 40)
	cp := startControlPlane(t)
	ctl := startController(t, cp, logFile(t, "controller"))
	setPool(t, cp, "cfg-a", "198.18.0.0/23")
	createServices(t, cp, 0, n)
	waitAllAllocated(t, cp, n)
	held := takeSnapshot(t, cp)
	next := n // Services created between steps, so allocation happens in every state

	steps := []struct {
		name string
		do   func()
	}{
		{"grow cfg-a to 198.18.0.0/22", func() { setPool(t, cp, "cfg-a", "198.18.0.0/22") }},
		{"shrink cfg-a to 198.18.0.0/27", func() { setPool(t, cp, "cfg-a", "198.18.0.0/27") }},
		{"split: cfg-a 198.18.0.0/27, cfg-b 198.18.0.32/27, cfg-c 198.18.0.64/26", func() {
			setPool(t, cp, "cfg-a", "198.18.0.0/27")
			setPool(t, cp, "cfg-b", "198.18.0.32/27")
			setPool(t, cp, "cfg-c", "198.18.0.64/26")
		}},
		{"overlap: cfg-d 198.18.0.0/24 across cfg-a, cfg-b and cfg-c", func() { setPool(t, cp, "cfg-d", "198.18.0.0/24") }},
		{"delete cfg-a and cfg-d", func() { deletePool(t, cp, "cfg-a"); deletePool(t, cp, "cfg-d") }},
		{"recreate cfg-a as 198.18.0.0/25", func() { setPool(t, cp, "cfg-a", "198.18.0.0/25") }},
		{"delete every pool", func() {
			for _, p := range []string{"cfg-a", "cfg-b", "cfg-c"} {
				deletePool(t, cp, p)
			}
		}},
		{"recreate cfg-a as 198.18.0.0/22", func() { setPool(t, cp, "cfg-a", "198.18.0.0/22") }},
		{"a pool written while the CRD's validation was off", func() { bypassValidation(t, cp) }},
	}
	lost := 0
	for _, step := range steps {
		step.do()
		createServices(t, cp, next, next+5)
		next += 5
		counts := waitInvariants(t, cp.Client, 2*time.Minute)
		var orphans int
		var bad []string
		var readErr error // kept apart: the final poll may fail on the deadline itself
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			n, b, err := orphanProblems(ctx, cp.Client)
			if err != nil {
				readErr = err
				return false, nil
			}
			orphans, bad = n, b
			return len(bad) == 0, nil
		})
		if err != nil {
			t.Errorf("after %q (last read error: %v): %s", step.name, readErr, strings.Join(bad[:min(len(bad), 10)], "\n"))
		}
		now := takeSnapshot(t, cp)
		changed := 0
		for name, before := range held {
			if before.ips != "" && now[name].ips != before.ips {
				changed++
				t.Errorf("after %q: %s moved from %s to %q", step.name, name, before.ips, now[name].ips)
			}
		}
		lost += changed
		for name, s := range now {
			if held[name].ips == "" {
				held[name] = s // a Service that got its first address keeps it from now on
			}
		}
		report(t, "%s: %s; %d orphaned and reported; %d addresses changed", step.name, counts, orphans, changed)
	}
	select {
	case err := <-ctl.done:
		t.Fatalf("the controller exited: %v", err)
	default:
	}
	report(t, "%d config steps, %d Services, %d addresses changed, controller restarts: 0", len(steps), next, lost)
}

// bypassValidation switches off the CEL rules of the IPAddressPool CRD's addresses, writes a
// pool they would refuse, and switches them back on. The pool must get a Ready=False
// condition naming each bad entry, and the controller must carry on.
func bypassValidation(t testing.TB, cp *controlplane.ControlPlane) {
	t.Helper()
	ctx := context.Background()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	key := client.ObjectKey{Name: "ipaddresspools.portico.dev"}
	path := []string{"schema", "openAPIV3Schema", "properties", "spec", "properties", "addresses", "items", "x-kubernetes-validations"}
	var rules []any
	retrying(t, "relax the CRD", func(ctx context.Context) error {
		if err := cp.Client.Get(ctx, key, crd); err != nil {
			return err
		}
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		v := versions[0].(map[string]any)
		var ok bool
		if rules, ok, _ = unstructured.NestedSlice(v, path...); !ok {
			return fmt.Errorf("no rules at %s", strings.Join(path, "."))
		}
		unstructured.RemoveNestedField(v, path...)
		_ = unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions")
		return cp.Client.Update(ctx, crd)
	})
	bad := []porticov1.AddressRange{"198.18.200.0/24", "198.18.9.300/24", "nonsense", "198.18.10.5-198.18.10.1", "198.18.11.0-2001:db8::1"}
	// The apiserver takes the relaxed schema a moment after the update.
	retrying(t, "create the invalid pool", func(ctx context.Context) error {
		return cp.Client.Create(ctx, &porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "cfg-bad"}, Spec: porticov1.IPAddressPoolSpec{Addresses: bad}})
	})
	retrying(t, "restore the CRD", func(ctx context.Context) error {
		if err := cp.Client.Get(ctx, key, crd); err != nil {
			return err
		}
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		if err := unstructured.SetNestedSlice(versions[0].(map[string]any), rules, path...); err != nil {
			return err
		}
		_ = unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions")
		return cp.Client.Update(ctx, crd)
	})
	// The rules are back: the same pool is refused again.
	retrying(t, "see the restored rules refuse the pool", func(ctx context.Context) error {
		err := cp.Client.Create(ctx, &porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "cfg-bad-2"}, Spec: porticov1.IPAddressPoolSpec{Addresses: bad}})
		if err == nil {
			_ = cp.Client.Delete(ctx, &porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "cfg-bad-2"}})
			return fmt.Errorf("accepted")
		}
		return nil
	})
	var cond *metav1.Condition
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var pool porticov1.IPAddressPool
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: "cfg-bad"}, &pool); err != nil {
			return false, nil
		}
		cond = meta.FindStatusCondition(pool.Status.Conditions, porticov1.ConditionReady)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == porticov1.ReasonInvalidAddresses, nil
	})
	if err != nil {
		t.Fatalf("the pool written past validation has Ready %+v; want False/%s", cond, porticov1.ReasonInvalidAddresses)
	}
	for _, entry := range bad[1:] {
		if !strings.Contains(cond.Message, string(entry)) {
			t.Errorf("Ready's message %q does not name the bad entry %q", cond.Message, entry)
		}
	}
	report(t, "pool past validation: Ready=False/%s: %s", cond.Reason, cond.Message)
}
