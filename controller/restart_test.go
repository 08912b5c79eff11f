package controller_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
)

// TestRestartPrefersServicesThatFit: found by `make chaos` (an unedited Service's address
// changed). The leader moved Service "older" to pool fit-b and gave its freed address to
// "younger"; younger's status write landed, older's did not, and the leader was killed. Both
// statuses now list 198.51.100.161 (and .160 is free). The new leader must let younger keep it (its status
// meets its spec), not move it to the lowest free address, and move older, which asked for another pool, instead of honouring the
// older Service first and moving a Service nobody edited.
func TestRestartPrefersServicesThatFit(t *testing.T) {
	createPoolsBeforeController(t, map[string]porticov1.IPAddressPoolSpec{
		"fit-a": addresses("198.51.100.160/30"), "fit-b": addresses("198.51.100.164/30"),
	})
	ns := namespace(t, nil)
	// Created in this order (and in one second, where names break the tie): "older" comes
	// first in age order.
	for _, svc := range []*corev1.Service{
		createService(t, ns, "older", withAnnotation(porticov1.AnnotationAddressPool, "fit-b")),
		createService(t, ns, "younger"),
	} {
		writeIngress(t, svc, "198.51.100.161")
	}
	startManager(t)
	waitIPs(t, ns, "older", "198.51.100.164")
	younger := waitService(t, ns, "younger", "an IPAllocated condition", func(s *corev1.Service) bool { return allocated(s) != nil })
	if got := ips(younger); got != "198.51.100.161" {
		t.Errorf("younger, never edited, moved from 198.51.100.161 to %s", got)
	}
}

// writeIngress makes the Service's status list ip, as another writer would (an old leader,
// another load balancer).
func writeIngress(t *testing.T, svc *corev1.Service, ip string) {
	t.Helper()
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip, IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
	if err := cp.Client.Status().Update(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
}

// createPoolsBeforeController creates pools while no controller runs (createPool waits for
// the controller's Ready condition); the test deletes them at its end.
func createPoolsBeforeController(t *testing.T, pools map[string]porticov1.IPAddressPoolSpec) {
	t.Helper()
	ctx := context.Background()
	for name, spec := range pools {
		pool := &porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
		if err := cp.Client.Create(ctx, pool); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cp.Client.Delete(ctx, pool) })
	}
}

// TestNewLeaderWaitsForItsCache: a new leader rebuilds its allocator from the apiserver, but
// decides each Service from its cache, which may be behind: its informers, cut off while the
// apiserver restarted, resume only after their backoff. The old leader moved "a-moved" to pool
// fence-b (.194) before it died; the new leader's cache still shows it in fence-a, listing .193.
// Deciding from that copy gave it .193 back and freed .194, which went to the waiting
// "b-waiting" while a-moved's stored status still listed it. a-moved must wait for the cache.
func TestNewLeaderWaitsForItsCache(t *testing.T) {
	ns := namespace(t, nil)
	createPoolsBeforeController(t, map[string]porticov1.IPAddressPoolSpec{
		"fence-a": addresses("198.51.100.193/32"), "fence-b": addresses("198.51.100.194/32"),
	})
	// What the old leader did, as its cache-behind successor may still see it and as it is.
	moved := createService(t, ns, "a-moved", withAnnotation(porticov1.AnnotationAddressPool, "fence-a"))
	writeIngress(t, moved, "198.51.100.193")
	stale := moved.DeepCopy()
	update(t, moved, func() { moved.Annotations[porticov1.AnnotationAddressPool] = "fence-b" })
	writeIngress(t, moved, "198.51.100.194")
	createService(t, ns, "b-waiting", withAnnotation(porticov1.AnnotationAddressPool, "fence-b"))

	// The initial list brings a-moved to the queue before b-waiting (the apiserver lists in
	// name order, one worker decides in queue order).
	behind := runBehind(t, moved, stale)
	expectWaiting(t, ns, "b-waiting", "a-moved's stored status listed it")

	// The cache catches up; its event brings a-moved back (here: an edit).
	behind.catchUp()
	update(t, moved, func() { moved.Labels = map[string]string{"touched": "yes"} })
	waitIPs(t, ns, "a-moved", "198.51.100.194")
	expectWaiting(t, ns, "b-waiting", "a-moved lists it")
}

// TestNewLeaderAsksForAServiceItsCacheLacks: the same lagging cache, without the Service at all
// (created just before the apiserver went away, say). Not in the cache does not mean gone: the
// new leader asks the apiserver, and frees the address only once the Service is gone there.
func TestNewLeaderAsksForAServiceItsCacheLacks(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	createPoolsBeforeController(t, map[string]porticov1.IPAddressPoolSpec{"fence-c": addresses("198.51.100.195/32")})
	hidden := createService(t, ns, "a-hidden", withAnnotation(porticov1.AnnotationAddressPool, "fence-c"))
	writeIngress(t, hidden, "198.51.100.195")
	createService(t, ns, "b-waiting", withAnnotation(porticov1.AnnotationAddressPool, "fence-c"))

	runBehind(t, hidden, nil)
	expectWaiting(t, ns, "b-waiting", "a-hidden's stored status listed it")

	// Gone for real: its deletion's event brings it back, the apiserver says it is gone.
	if err := cp.Client.Delete(ctx, hidden); err != nil {
		t.Fatal(err)
	}
	waitIPs(t, ns, "b-waiting", "198.51.100.195")
}

// runBehind runs the controller with its cached reads of svc answered from stale (nil: not
// found) until catchUp, and returns once it has read svc so.
func runBehind(t *testing.T, svc, stale *corev1.Service) *staleCache {
	t.Helper()
	behind := &staleCache{key: client.ObjectKeyFromObject(svc), copy: stale, served: make(chan struct{}, 1)}
	cp.RunManager(t, func(mgr ctrl.Manager) error { return controller.Setup(mgr, controller.Options{}) }, behind.wrap)
	select {
	case <-behind.served:
	case <-time.After(30 * time.Second):
		t.Fatalf("the controller never read %s", svc.Name)
	}
	return behind
}

// staleCache makes the manager's cached reads of one Service return an old copy of it (none:
// not found) until catchUp, as an informer that has not yet seen the later versions would.
type staleCache struct {
	key    client.ObjectKey
	copy   *corev1.Service
	served chan struct{}
	caught chan struct{}
}

func (s *staleCache) wrap(o *ctrl.Options) {
	s.caught = make(chan struct{})
	intercept(o, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if svc, ok := obj.(*corev1.Service); ok && key == s.key {
				select {
				case <-s.caught:
				default:
					select {
					case s.served <- struct{}{}:
					default:
					}
					if s.copy == nil {
						return apierrors.NewNotFound(corev1.Resource("services"), key.Name)
					}
					s.copy.DeepCopyInto(svc)
					return nil
				}
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
}

func (s *staleCache) catchUp() { close(s.caught) }
