package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/controlplane"
)

func startControlPlane(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	return controlplane.StartFor(t, controlplane.Options{})
}

// stopControlPlane stops a control plane before the benchmark's end, so that an idle apiserver
// does not share the CPU with the next phase.
func stopControlPlane(t testing.TB, cp *controlplane.ControlPlane) {
	t.Helper()
	if err := cp.Stop(); err != nil {
		t.Error(err)
	}
}

func createPool(t testing.TB, cp *controlplane.ControlPlane, name string, addresses ...porticov1.AddressRange) {
	t.Helper()
	pool := &porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: porticov1.IPAddressPoolSpec{Addresses: addresses}}
	if err := cp.Client.Create(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
}

// createServices creates n LoadBalancer Services named svc-0000... in namespace default, from
// a few goroutines at once.
func createServices(t testing.TB, cp *controlplane.ControlPlane, from, to int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, to-from)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				svc := &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("svc-%04d", i)},
					Spec: corev1.ServiceSpec{
						Type:  corev1.ServiceTypeLoadBalancer,
						Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
					},
				}
				if err := cp.Client.Create(context.Background(), svc); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := from; i < to; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// snapshot is every Service's addresses and resourceVersion.
type snapshot map[string]struct {
	ips, version string
	conditions   int
}

func takeSnapshot(t testing.TB, cp *controlplane.ControlPlane) snapshot {
	t.Helper()
	var list corev1.ServiceList
	if err := cp.Client.List(context.Background(), &list, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	s := snapshot{}
	for _, svc := range list.Items {
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		var ips []string
		for _, in := range svc.Status.LoadBalancer.Ingress {
			ips = append(ips, in.IP)
		}
		s[svc.Name] = struct {
			ips, version string
			conditions   int
		}{strings.Join(ips, ","), svc.ResourceVersion, len(svc.Status.Conditions)}
	}
	return s
}

// waitAllAllocated waits until n Services have an address, and checks no address is held twice.
func waitAllAllocated(t testing.TB, cp *controlplane.ControlPlane, n int) snapshot {
	t.Helper()
	var s snapshot
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		s = takeSnapshot(t, cp)
		done := 0
		for _, v := range s {
			if v.ips != "" {
				done++
			}
		}
		return done == n, nil
	})
	if err != nil {
		t.Fatalf("not every one of %d Services got an address", n)
	}
	holder := map[string]string{}
	for name, v := range s {
		if other, ok := holder[v.ips]; ok {
			t.Fatalf("%s and %s both hold %s", name, other, v.ips)
		}
		holder[v.ips] = name
	}
	return s
}

// TestRestartChangesNothing: a controller process killed and started again with 1000
// Services changes no address and writes nothing.
func TestRestartChangesNothing(t *testing.T) {
	const n = 1000
	cp := startControlPlane(t)
	createPool(t, cp, "bench", "198.18.0.0/20")
	first := startController(t, cp, logFile(t, "first"))
	createServices(t, cp, 0, n)
	before := waitAllAllocated(t, cp, n)
	first.waitSettled(t, n)
	waitPoolAssigned(t, cp, "bench", n) // pool status writes are coalesced: wait for the last
	// The health conditions (EndpointsReady, Announced, Reachable) follow the address.
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		before = takeSnapshot(t, cp)
		for _, v := range before {
			if v.conditions < 4 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal("not every Service got its health conditions")
	}
	// No speaker runs: the pool counts every Service in its SharedProblem, once the last one's
	// conditions are in.
	pool := waitPoolCondition(t, cp, "bench", porticov1.ConditionSharedProblem, fmt.Sprintf("%d Services (", n))

	first.stop(syscall.SIGKILL)
	second := startController(t, cp, logFile(t, "second"))
	second.waitSettled(t, n)

	after := takeSnapshot(t, cp)
	changed, written := 0, 0
	for name, b := range before {
		a := after[name]
		if a.ips != b.ips {
			changed++
			t.Errorf("%s: %s before the restart, %s after", name, b.ips, a.ips)
		}
		if a.version != b.version {
			written++
		}
	}
	var poolAfter porticov1.IPAddressPool
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Name: "bench"}, &poolAfter); err != nil {
		t.Fatal(err)
	}
	if poolAfter.ResourceVersion != pool.ResourceVersion {
		written++
	}
	t.Logf("restart with %d Services: %d addresses changed, %d objects written", n, changed, written)
	if written > 0 {
		t.Errorf("the restarted controller wrote %d objects; want none", written)
	}
}

// TestLeaderKilledWhileCreating: two replicas with leader election; the leader is killed while
// Services are being created. Every Service still gets an address, and no address is held
// twice, at the end or at any moment in between.
func TestLeaderKilledWhileCreating(t *testing.T) {
	const n = 300
	cp := startControlPlane(t)
	createPool(t, cp, "ha", "198.18.16.0/22")
	duplicates := watchDuplicates(t, cp)
	args := []string{"--leader-elect", "--leader-election-namespace", "default",
		"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms"}
	leader := startController(t, cp, logFile(t, "leader"), args...)
	waitLeader(t, cp) // the first replica holds the lease
	startController(t, cp, logFile(t, "follower"), args...)

	createServices(t, cp, 0, n/2)
	leader.stop(syscall.SIGKILL)
	createServices(t, cp, n/2, n)
	waitAllAllocated(t, cp, n)
	t.Logf("after the leader was killed: %s", waitInvariants(t, cp.Client, time.Minute))
	duplicates.check(t)
}

func waitPoolAssigned(t testing.TB, cp *controlplane.ControlPlane, name string, n int64) *porticov1.IPAddressPool {
	t.Helper()
	var pool porticov1.IPAddressPool
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &pool)
		return err == nil && pool.Status.Assigned == n && pool.Status.Waiting == 0, nil
	})
	if err != nil {
		t.Fatalf("pool %s never counted %d assigned: %+v", name, n, pool.Status)
	}
	return &pool
}

// waitPoolCondition waits until the pool's condition of the given type has a message that
// begins with prefix.
func waitPoolCondition(t testing.TB, cp *controlplane.ControlPlane, name, typ, prefix string) *porticov1.IPAddressPool {
	t.Helper()
	var pool porticov1.IPAddressPool
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &pool)
		c := meta.FindStatusCondition(pool.Status.Conditions, typ)
		return err == nil && c != nil && strings.HasPrefix(c.Message, prefix), nil
	})
	if err != nil {
		t.Fatalf("pool %s: no %s condition saying %q: %+v", name, typ, prefix, pool.Status.Conditions)
	}
	return &pool
}

func waitLeader(t testing.TB, cp *controlplane.ControlPlane) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var l coordinationLease
		err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "portico-controller.portico.dev"}, &l.Lease)
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})
	if err != nil {
		t.Fatal("no replica took the leader lease")
	}
}
