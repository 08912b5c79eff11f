package controller_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
)

// TestMovedServiceWaitsForItsWrites: found by the chaos run's continuous duplicate watch. A
// Service moved to another pool while its status write (listing its first address) was still
// on its way freed that address at once, because the cached status did not list it yet;
// another Service got it, and its write landed first: once the mover's write landed too, both
// listed the address until the mover's next write. The address must stay held until no write
// of the mover can list it.
func TestMovedServiceWaitsForItsWrites(t *testing.T) {
	ns, held := runHoldingWrites(t, "a")
	from, to := held.apart("moving-from", controller.PoolWriteLane), held.apart("moving-to", controller.PoolWriteLane)
	b := held.apart("b", func(name string) int { return controller.ServiceWriteLane(ns, name) })
	createPool(t, from, addresses("198.51.100.190/32"))
	createPool(t, to, addresses("198.51.100.191/32"))

	a := createService(t, ns, "a", withAnnotation(porticov1.AnnotationAddressPool, from))
	held.waitArrived(t) // a's write listing .190 is on its way, and stays there
	update(t, a, func() { a.Annotations[porticov1.AnnotationAddressPool] = to })
	// a holds .191 now; none of its writes has landed.
	waitPool(t, to, "1 address assigned", func(p *porticov1.IPAddressPool) bool { return p.Status.AssignedIPv4 == 1 })

	createService(t, ns, b, withAnnotation(porticov1.AnnotationAddressPool, from))
	expectWaiting(t, ns, b, "a's write listing it was still on its way: both list it once that write lands")

	held.release()
	waitIPs(t, ns, "a", "198.51.100.191")
	waitIPs(t, ns, b, "198.51.100.190")
}

// TestFlippedServiceWaitsForItsWrites: found by the chaos run's duplicate watch. A Service whose
// type flipped to ClusterIP gave its address back at once, while a status write of ours made
// for its LoadBalancer version was still on its way. After the conflict the writer applies that
// write to the Service as stored then: once the type has flipped back, it lands, and the
// address another Service got meanwhile is listed twice. The address must stay held until no
// write of ours can list it.
func TestFlippedServiceWaitsForItsWrites(t *testing.T) {
	ns, held := runHoldingWrites(t, "a")
	pool := held.apart("flipping", controller.PoolWriteLane)
	b := held.apart("b", func(name string) int { return controller.ServiceWriteLane(ns, name) })
	createPool(t, pool, addresses("198.51.100.192/32"))

	a := createService(t, ns, "a", withAnnotation(porticov1.AnnotationAddressPool, pool))
	held.waitArrived(t) // a's write listing .192 is on its way, and stays there
	update(t, a, func() { a.Spec.Type = corev1.ServiceTypeClusterIP })

	// b comes after a's flip in the one queue of Service changes, so it is decided after it.
	createService(t, ns, b, withAnnotation(porticov1.AnnotationAddressPool, pool))
	expectWaiting(t, ns, b, "a's write listing it was still on its way")

	update(t, a, func() { a.Spec.Type = corev1.ServiceTypeLoadBalancer })
	held.release() // the held write lands on a, a LoadBalancer again
	waitIPs(t, ns, "a", "198.51.100.192")
	expectWaiting(t, ns, b, "a lists it")
}

// runHoldingWrites runs the controller in a new namespace, holding its status writes to the
// Service named name (holdStatusWrites) until released or the test ends.
func runHoldingWrites(t *testing.T, name string) (string, *heldWrites) {
	t.Helper()
	ns := namespace(t, nil)
	held := holdStatusWrites(client.ObjectKey{Namespace: ns, Name: name})
	held.lane = controller.ServiceWriteLane(ns, name)
	cp.RunManager(t, func(mgr ctrl.Manager) error { return controller.Setup(mgr, controller.Options{}) }, held.wrap)
	t.Cleanup(held.release) // before the manager stops (cleanups run last first)
	return ns, held
}

// expectWaiting waits for the Service's IPAllocated condition and fails the test if the
// Service lists an address: while says who else lists it meanwhile.
func expectWaiting(t *testing.T, ns, name, while string) {
	t.Helper()
	svc := waitService(t, ns, name, "an IPAllocated condition", func(s *corev1.Service) bool { return allocated(s) != nil })
	if got := ips(svc); got != "" {
		t.Errorf("%s got %s while %s", name, got, while)
		return
	}
	t.Logf("%s waits: %s: %s", name, allocated(svc).Reason, allocated(svc).Message)
}

// heldWrites holds the controller's status writes to one Service until released: each is
// sent to the apiserver only then, as a slow request would be.
type heldWrites struct {
	key      client.ObjectKey
	lane     int // the writer's lane the held writes wait in
	arrived  chan struct{}
	released chan struct{}
	once     sync.Once
}

func holdStatusWrites(key client.ObjectKey) *heldWrites {
	return &heldWrites{key: key, arrived: make(chan struct{}, 100), released: make(chan struct{})}
}

// apart is the first of name, name-1, name-2, ... whose status writes go out in another of
// the writer's lanes than the held ones: a held write holds its lane, as a slow request does
// (each lane keeps its objects' writes in order), and these tests are about the address the
// held write may list, not about the objects that happen to share its lane.
func (h *heldWrites) apart(name string, laneOf func(string) int) string {
	for i := 0; ; i++ {
		n := name
		if i > 0 {
			n = fmt.Sprintf("%s-%d", name, i)
		}
		if laneOf(n) != h.lane {
			return n
		}
	}
}

// wrap makes the manager's client hold the writes.
func (h *heldWrites) wrap(o *ctrl.Options) {
	intercept(o, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if _, ok := obj.(*corev1.Service); ok && client.ObjectKeyFromObject(obj) == h.key {
				h.arrived <- struct{}{}
				select {
				case <-h.released:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
}

// intercept makes the manager's client (its cached reads and its writes to the real
// apiserver) go through funcs.
func intercept(o *ctrl.Options, funcs interceptor.Funcs) {
	o.NewClient = func(cfg *rest.Config, opts client.Options) (client.Client, error) {
		c, err := client.New(cfg, opts)
		if err != nil {
			return nil, err
		}
		return interceptor.NewClient(noWatch{c}, funcs), nil
	}
}

func (h *heldWrites) waitArrived(t *testing.T) {
	t.Helper()
	select {
	case <-h.arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("no status write for %s", h.key)
	}
}

// release lets every held write go, and those to come.
func (h *heldWrites) release() { h.once.Do(func() { close(h.released) }) }

// noWatch gives a client the Watch method the interceptor's type asks for; the manager's
// client is never asked to watch.
type noWatch struct{ client.Client }

func (noWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("not supported")
}
