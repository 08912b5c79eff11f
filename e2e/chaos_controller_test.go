//go:build chaos

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/controlplane"
)

const chaosNS = "chaos"

// chaosHold is a finalizer that keeps some deleted Services Terminating: they keep their
// addresses until the end.
const chaosHold = "chaos.portico.dev/hold"

// ipHistory watches Services and counts address changes per Service: an address replaced by
// another (or by none) while the Service was not edited is an address lost.
type ipHistory struct {
	mu      sync.Mutex
	last    map[string]string // Service → its addresses, as last seen
	changes map[string][]string
}

func watchHistory(t testing.TB, cp *controlplane.ControlPlane) *ipHistory {
	t.Helper()
	h := &ipHistory{last: map[string]string{}, changes: map[string][]string{}}
	// An informer relists after the apiserver restarts, so a change made meanwhile is seen.
	factory := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(cp.Config), 0, informers.WithNamespace(chaosNS))
	inf := factory.Core().V1().Services().Informer()
	seen := func(obj any) {
		svc, ok := obj.(*corev1.Service)
		if !ok {
			return
		}
		var ips []string
		for _, in := range svc.Status.LoadBalancer.Ingress {
			ips = append(ips, in.IP)
		}
		now := strings.Join(ips, ",")
		h.mu.Lock()
		defer h.mu.Unlock()
		if before := h.last[svc.Name]; before != "" && before != now {
			h.changes[svc.Name] = append(h.changes[svc.Name], before+" → "+now)
		}
		h.last[svc.Name] = now
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	return h
}

// startChaos starts a control plane with the chaos namespace, the pools <prefix>-main
// (autoAssign) and <prefix>-extra (explicit requests only), and the watches on every Service's
// address history and on two holders at any moment.
func startChaos(t testing.TB, prefix string, main, extra porticov1.AddressRange) (*controlplane.ControlPlane, *ipHistory, *duplicateWatch) {
	t.Helper()
	cp := startControlPlane(t)
	ctx := context.Background()
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chaosNS}}); err != nil {
		t.Fatal(err)
	}
	createPool(t, cp, prefix+"-main", main)
	pool := &porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-extra"},
		Spec: porticov1.IPAddressPoolSpec{Addresses: []porticov1.AddressRange{extra}, AutoAssign: ptr.To(false)}}
	if err := cp.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return cp, watchHistory(t, cp), watchDuplicates(t, cp)
}

// createChaosService creates a LoadBalancer Service in the chaos namespace, retrying while
// the apiserver is down.
func createChaosService(t testing.TB, cp *controlplane.ControlPlane, name string) {
	t.Helper()
	retrying(t, "create "+name, func(ctx context.Context) error {
		err := cp.Client.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: chaosNS, Name: name, Annotations: map[string]string{}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		})
		if apierrors.IsAlreadyExists(err) { // created by an attempt whose answer was lost
			return nil
		}
		return err
	})
}

// chaosEdits are the edits a worker makes to a Service it created; each one may move its
// address, so the Service is marked edited first.
var chaosEdits = []struct {
	name string
	edit func(svc *corev1.Service, i int)
}{
	{"request the other pool", func(svc *corev1.Service, _ int) {
		svc.Annotations[porticov1.AnnotationAddressPool] = "chaos-extra"
	}},
	{"request an address", func(svc *corev1.Service, i int) {
		// Few addresses for many Services: some requests collide and must wait with a reason.
		svc.Annotations[porticov1.AnnotationLoadBalancerIPs] = fmt.Sprintf("198.18.64.%d", 1+i%200)
	}},
	{"share", func(svc *corev1.Service, i int) {
		svc.Annotations[porticov1.AnnotationAllowSharedIP] = fmt.Sprintf("key-%d", i%7)
		svc.Spec.Ports[0].Port = int32(1000 + i)
	}},
	{"flip the type", func(svc *corev1.Service, _ int) {
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			svc.Spec.Type = corev1.ServiceTypeClusterIP
		} else {
			svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		}
	}},
	{"bad annotation", func(svc *corev1.Service, _ int) {
		svc.Annotations[porticov1.AnnotationLoadBalancerIPs] = "198.18.64.300"
	}},
}

// TestChaosController: N Services created, edited and deleted from eight workers while one
// of two controller replicas (leader election, 4 s lease) is SIGKILLed every 2–4 s, and the
// apiserver and etcd restart once half-way. Afterwards every invariant holds and no
// Service that was never edited saw its address change.
func TestChaosController(t *testing.T) {
	n := chaosServices(t)
	cp, history, duplicates := startChaos(t, "chaos", "198.18.0.0/20", "198.18.64.0/24")
	ctx := context.Background()

	args := []string{"--leader-elect", "--leader-election-namespace", "default",
		"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms"}
	reps := &replicas{t: t, start: func(name string) *controllerProcess {
		return startController(t, cp, logFile(t, name), args...)
	}}
	stop, stormDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(stormDone); reps.storm(stop, 8) }()

	var (
		editedMu    sync.Mutex
		edited      = map[string]bool{}
		created     atomic.Int64
		deleted     atomic.Int64
		held        atomic.Int64
		editCounts  = make([]atomic.Int64, len(chaosEdits))
		restarted   = make(chan error, 1)
		restartDone = make(chan struct{})
	)
	const workers = 8
	// edit makes a random edit to one of the given Services.
	edit := func(rng *rand.Rand, from []int) {
		j := from[rng.IntN(len(from))]
		k := rng.IntN(len(chaosEdits))
		target := fmt.Sprintf("svc-%04d", j)
		editedMu.Lock()
		edited[target] = true
		editedMu.Unlock()
		retrying(t, chaosEdits[k].name+" on "+target, func(ctx context.Context) error {
			var svc corev1.Service
			if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: chaosNS, Name: target}, &svc); err != nil {
				return err
			}
			if svc.Annotations == nil {
				svc.Annotations = map[string]string{}
			}
			chaosEdits[k].edit(&svc, j)
			return cp.Client.Update(ctx, &svc)
		})
		editCounts[k].Add(1)
	}
	// The apiserver and etcd restart once, after a few kills; the workers go on editing
	// until the storm has killed minKills replicas and the restart is done.
	const minKills = 8
	go func() {
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
			return reps.kills() >= minKills/2, nil
		})
		began := time.Now()
		err := cp.Restart()
		report(t, "apiserver and etcd restarted in %s (error: %v)", time.Since(began).Round(100*time.Millisecond), err)
		restarted <- err
		close(restartDone)
	}()
	stormOver := func() bool {
		select {
		case <-restartDone:
			return reps.kills() >= minKills
		default:
			return false
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			var mine []int // this worker's live Services: ops on one Service stay in order
			for i := w; i < n || !stormOver(); i += workers {
				if i >= n { // every Service is created: go on editing until the storm is over
					edit(rng, mine[:min(len(mine), 4)]) // a few hot Services, so most stay untouched
					continue
				}
				name := fmt.Sprintf("svc-%04d", i)
				createChaosService(t, cp, name)
				mine = append(mine, i)
				created.Add(1)
				switch r := rng.Float64(); {
				case r < 0.3 && len(mine) > 1:
					edit(rng, mine[:len(mine)-1])
				case r < 0.4 && len(mine) > 1:
					x := rng.IntN(len(mine) - 1)
					target := fmt.Sprintf("svc-%04d", mine[x])
					mine = append(mine[:x], mine[x+1:]...)
					if rng.IntN(2) == 0 { // half stay Terminating, held by a finalizer, to the end
						retrying(t, "hold "+target, func(ctx context.Context) error {
							var svc corev1.Service
							if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: chaosNS, Name: target}, &svc); err != nil {
								return err
							}
							if !slices.Contains(svc.Finalizers, chaosHold) {
								svc.Finalizers = append(svc.Finalizers, chaosHold)
							}
							return cp.Client.Update(ctx, &svc)
						})
						held.Add(1)
					}
					retrying(t, "delete "+target, func(ctx context.Context) error {
						return client.IgnoreNotFound(cp.Client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: chaosNS, Name: target}}))
					})
					deleted.Add(1)
					editedMu.Lock()
					edited[target] = true // gone: its history no longer counts
					editedMu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if err := <-restarted; err != nil {
		t.Fatalf("restarting the apiserver and etcd: %v", err)
	}
	close(stop)
	<-stormDone
	calm := time.Now()
	counts := waitInvariants(t, cp.Client, 3*time.Minute)
	settle := time.Since(calm)
	events, twice := duplicates.check(t)

	history.mu.Lock()
	defer history.mu.Unlock()
	lost := 0
	for name, changes := range history.changes {
		if !edited[name] {
			lost++
			t.Errorf("%s was never edited, yet its address changed: %s", name, strings.Join(changes, "; "))
		}
	}
	var edits []string
	for k, e := range chaosEdits {
		edits = append(edits, fmt.Sprintf("%d %s", editCounts[k].Load(), e.name))
	}
	reps.mu.Lock()
	defer reps.mu.Unlock()
	report(t, "%d Services created, %d deleted (%d of them held Terminating by a finalizer to the end), edits: %s", created.Load(), deleted.Load(), held.Load(), strings.Join(edits, ", "))
	report(t, "%d controller replicas SIGKILLed, %d started, %d exited on their own (lease lost while the apiserver was down); apiserver+etcd restarted once", reps.killed, reps.started, reps.exited)
	report(t, "after the storm: %s; settled %s after the last kill", counts, settle.Round(100*time.Millisecond))
	report(t, "addresses changed on Services never edited: %d (of %d Services that ever held one)", lost, len(history.last))
	report(t, "moments with an address held twice, in %d Service events watched through the storm: %d", events, twice)
}
