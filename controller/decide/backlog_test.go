package decide

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// TestBacklogOrderDoesNotDependOnStart: over random clusters (pools, Services created in
// random seconds, some in the same one, some naming a pool or an address or a sharing key), a
// controller started after them all (the backlog served, then the decisions in the informers'
// order, by name) gives each Service what a controller that was up first gives it (each
// decided as it is created, oldest first).
func TestBacklogOrderDoesNotDependOnStart(t *testing.T) {
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 48))
		pools, svcs := randomBacklog(rng)
		upFirst, later := NewBook(), NewBook()
		upFirst.SetPools(pools)
		later.SetPools(pools)
		byAge := slices.Clone(svcs)
		slices.SortFunc(byAge, func(x, y *corev1.Service) int {
			return OlderFirst(x.CreationTimestamp.Time, x.Name, y.CreationTimestamp.Time, y.Name)
		})
		for _, svc := range byAge {
			decideFor(upFirst, svc, pools)
		}
		var pending []*Asked
		for _, svc := range svcs { // by name, as the informers list them
			pending = append(pending, AskedOf(svc, nil))
		}
		later.Rebuild(nil, false)
		later.Await(pending)
		later.ServeBacklog(pools)
		for _, svc := range svcs {
			decideFor(later, svc, pools)
		}
		for _, svc := range svcs {
			key := svc.Namespace + "/" + svc.Name
			a, _ := upFirst.alloc.Assignment(key)
			b, _ := later.alloc.Assignment(key)
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("seed %d: %s (created %s): %v with the controller up first, %v when it started later",
					seed, key, svc.CreationTimestamp.Format(time.TimeOnly), a, b)
			}
		}
	}
}

func decideFor(b *Book, svc *corev1.Service, pools []porticov1.IPAddressPool) {
	in := Seen{Key: svc.Namespace + "/" + svc.Name, Svc: svc, Ours: true}
	in.Req, in.ReqErr = Request(svc, pools, nil)
	Service(b, in)
}

// randomBacklog is up to three small pools and up to twelve Services, sorted by name.
func randomBacklog(rng *rand.Rand) ([]porticov1.IPAddressPool, []*corev1.Service) {
	var pools []porticov1.IPAddressPool
	for i := range 1 + rng.IntN(3) {
		p := porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Generation: 1}}
		p.Spec.Addresses = []porticov1.AddressRange{porticov1.AddressRange(fmt.Sprintf("198.51.100.%d-198.51.100.%d", 10*i, 10*i+rng.IntN(5)))}
		if rng.IntN(3) == 0 {
			p.Spec.AutoAssign = new(bool)
		}
		pools = append(pools, p)
	}
	start := time.Date(2026, 12, 5, 16, 0, 0, 0, time.UTC)
	var svcs []*corev1.Service
	for i := range 1 + rng.IntN(12) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("s%02d", i),
			UID: types.UID(fmt.Sprint(i)), CreationTimestamp: metav1.NewTime(start.Add(time.Duration(rng.IntN(4)) * time.Second)),
			Annotations: map[string]string{}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: int32(80 + rng.IntN(2))}}}}
		switch rng.IntN(5) {
		case 0:
			svc.Annotations[porticov1.AnnotationAddressPool] = pools[rng.IntN(len(pools))].Name
		case 1:
			svc.Annotations[porticov1.AnnotationLoadBalancerIPs] = fmt.Sprintf("198.51.100.%d", rng.IntN(25))
		case 2:
			svc.Annotations[porticov1.AnnotationAllowSharedIP] = "k"
		}
		svcs = append(svcs, svc)
	}
	return pools, svcs
}
