package sim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// workload schedules what users and the infrastructure do until busyUntil: Services created
// in three namespaces, edited (pool, requested address, sharing key, type), deleted (some
// held by a finalizer), namespaces relabelled, pool edits, and replicas paused (some past their
// lease) and restarted. Pools are small, so Services wait for addresses and get them as
// others let go; pool tenant takes only the Services of namespaces labelled team=b.
func (w *world) workload() {
	a := w.api
	for ns, team := range map[string]string{"default": "", "team-a": "a", "team-b": "b"} {
		a.namespaces[ns] = map[string]string{}
		if team != "" {
			a.namespaces[ns]["team"] = team
		}
	}
	w.after(0, nil, func() { a.setPool("home", "10.0.0.1-10.0.0.6") })
	if w.chance(0.5) {
		w.after(0, nil, func() { a.setPool("tenant", "10.0.2.1-10.0.2.3") })
	}
	if w.chance(0.5) {
		w.after(0, nil, func() { a.setPool("extra", "10.0.1.1-10.0.1.3") })
	}
	if w.opts.DualPools {
		w.after(0, nil, func() { a.setPool("home-v6", "2001:db8::1-2001:db8::4") })
	}
	services := 4 + w.rng.IntN(8)
	for i := range services {
		w.after(w.between(0, 20*time.Second), nil, func() { a.createService(w.newService(i)) })
	}
	for range 15 + w.rng.IntN(40) {
		w.after(w.between(time.Second, busyUntil-10*time.Second), nil, w.userAction)
	}
	for range w.rng.IntN(6) {
		w.after(w.between(time.Second, busyUntil-20*time.Second), nil, func() {
			r := w.pick()
			if w.chance(0.5) {
				r.pause(w.between(leaseDuration+time.Second, 3*leaseDuration))
			} else {
				r.pause(w.between(10*time.Millisecond, 5*time.Second))
			}
		})
	}
	for range w.rng.IntN(3) {
		w.after(w.between(time.Second, busyUntil-20*time.Second), nil, func() { w.pick().restart("killed") })
	}
}

// pick chooses a replica, the leader more often than not.
func (w *world) pick() *replica {
	if w.chance(0.7) {
		for _, r := range w.replicas {
			if r.leading {
				return r
			}
		}
	}
	return w.replicas[w.rng.IntN(len(w.replicas))]
}

// newService is Service i, in one of the three namespaces: a LoadBalancer with its own port
// mostly (so Services with one sharing key may share an address), 80 or 443 sometimes (so they
// may not), maybe a finalizer, a sharing key, a requested address or pool.
func (w *world) newService(i int) *corev1.Service {
	name := fmt.Sprintf("s%d", i)
	ns := []string{"default", "default", "default", "team-a", "team-b"}[w.rng.IntN(5)]
	port := []int32{int32(1000 + i), int32(1000 + i), int32(1000 + i), 80, 443}[w.rng.IntN(5)]
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: port}}}}
	if w.chance(0.3) {
		svc.Finalizers = []string{"example.com/hold"}
	}
	if w.chance(0.3) {
		svc.Annotations[porticov1.AnnotationAllowSharedIP] = "k1"
	}
	if w.chance(0.2) {
		svc.Annotations[porticov1.AnnotationLoadBalancerIPs] = w.address()
	}
	if w.chance(0.15) {
		svc.Annotations[porticov1.AnnotationAddressPool] = w.poolName()
	}
	if w.opts.DualPools && w.chance(0.5) {
		w.dualStack(svc)
	}
	return svc
}

// dualStack makes svc dual-stack (Options.DualPools), either family first, required or
// preferred; it may name both pools or ask for an address of each.
func (w *world) dualStack(svc *corev1.Service) {
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	if w.chance(0.3) {
		slices.Reverse(svc.Spec.IPFamilies)
	}
	policy := []corev1.IPFamilyPolicy{corev1.IPFamilyPolicyRequireDualStack, corev1.IPFamilyPolicyPreferDualStack}[w.rng.IntN(2)]
	svc.Spec.IPFamilyPolicy = &policy
	switch n := w.rng.IntN(10); {
	case n < 3:
		svc.Annotations[porticov1.AnnotationAddressPool] = w.dualPoolNames()
	case n < 5:
		svc.Annotations[porticov1.AnnotationLoadBalancerIPs] = w.address() + "," + w.address6()
	}
}

// dualPoolNames names two pools, one per family mostly; sometimes two of one family (refused).
func (w *world) dualPoolNames() string {
	return []string{"home,home-v6", "home-v6,extra", "home-v6,home", "home,extra"}[w.rng.IntN(4)]
}

// address6 is an IPv6 address a user may ask for: in pool home-v6, or just outside.
func (w *world) address6() string {
	return fmt.Sprintf("2001:db8::%d", 1+w.rng.IntN(6))
}

// address is an address a user may ask for: in a pool, or just outside.
func (w *world) address() string {
	if w.chance(0.7) {
		return fmt.Sprintf("10.0.0.%d", 1+w.rng.IntN(8))
	}
	return fmt.Sprintf("10.0.1.%d", 1+w.rng.IntN(4))
}

func (w *world) poolName() string {
	return []string{"home", "extra", "tenant", "other"}[w.rng.IntN(4)]
}

// userAction is one random thing a user does.
func (w *world) userAction() {
	a := w.api
	keys := slices.Sorted(maps.Keys(a.services))
	if len(keys) == 0 || w.chance(0.1) {
		a.createService(w.newService(20 + w.rng.IntN(20)))
		return
	}
	key := keys[w.rng.IntN(len(keys))]
	switch n := w.rng.IntN(100); {
	case n < 40:
		w.annotationEdit(key, n)
	case n < 55:
		a.editService(key, "type", func(svc *corev1.Service) {
			if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
				svc.Spec.Type = corev1.ServiceTypeClusterIP
			} else {
				svc.Spec.Type = corev1.ServiceTypeLoadBalancer
			}
		})
	case n < 70:
		a.deleteService(key)
	case n < 78:
		a.dropFinalizers(key)
	case n < 96:
		w.poolEdit(n)
	default:
		a.createService(w.newService(20 + w.rng.IntN(20)))
	}
}

// annotationEdit is userAction's n under 40: the Service's pool, requested address or
// sharing key edited (or removed).
func (w *world) annotationEdit(key string, n int) {
	annotate := func(what, ann, value string) {
		w.api.editService(key, what, func(svc *corev1.Service) {
			if value == "" {
				delete(svc.Annotations, ann)
			} else {
				metav1.SetMetaDataAnnotation(&svc.ObjectMeta, ann, value)
			}
		})
	}
	switch {
	case n < 15:
		pool := []string{"", w.poolName()}[w.rng.IntN(2)]
		if w.opts.DualPools && w.chance(0.4) {
			pool = w.dualPoolNames()
		}
		annotate("pool", porticov1.AnnotationAddressPool, pool)
	case n < 30:
		annotate("requested address", porticov1.AnnotationLoadBalancerIPs, []string{"", w.address()}[w.rng.IntN(2)])
	default:
		// Only with Options.SharingKeyEdits: a Service whose sharing key is edited while its
		// new request cannot be met keeps its address under the old key, beside Services of that
		// key (docs/reliability.md, Simulation).
		if !w.opts.SharingKeyEdits {
			return
		}
		annotate("sharing key", porticov1.AnnotationAllowSharedIP, []string{"", "k1", "k2"}[w.rng.IntN(3)])
	}
}

// poolEdit is userAction's n from 78 to 95: a pool's addresses edited, the extra pool created
// or deleted, or a namespace's team label changed.
func (w *world) poolEdit(n int) {
	a := w.api
	switch {
	case n < 85:
		if w.opts.DualPools && w.chance(0.5) {
			a.setPool("home-v6", []string{"2001:db8::1-2001:db8::4", "2001:db8::1-2001:db8::2", "2001:db8::3-2001:db8::6"}[w.rng.IntN(3)])
			return
		}
		a.setPool("home", []string{"10.0.0.1-10.0.0.6", "10.0.0.1-10.0.0.4", "10.0.0.3-10.0.0.8"}[w.rng.IntN(3)])
	case n < 92:
		if _, ok := a.pools["extra"]; ok && w.chance(0.5) {
			a.deletePool("extra")
		} else {
			a.setPool("extra", "10.0.1.1-10.0.1.3")
		}
	default:
		// team-a joins team b or leaves it: pool tenant's namespaceSelectors take its Services
		// or let them go elsewhere.
		a.labelNamespace("team-a", []string{"a", "b"}[w.rng.IntN(2)])
	}
}

// describe is a Service in a transcript line.
func describe(svc *corev1.Service) string {
	var b strings.Builder
	b.WriteString(string(svc.Spec.Type))
	if svc.DeletionTimestamp != nil {
		b.WriteString(" Terminating")
	}
	for _, f := range []struct{ name, ann string }{{"ip", porticov1.AnnotationLoadBalancerIPs},
		{"pool", porticov1.AnnotationAddressPool}, {"share", porticov1.AnnotationAllowSharedIP}} {
		if v, ok := svc.Annotations[f.ann]; ok {
			fmt.Fprintf(&b, " %s=%s", f.name, v)
		}
	}
	if len(svc.Spec.IPFamilies) > 1 {
		fmt.Fprintf(&b, " families=%v", svc.Spec.IPFamilies)
	}
	if len(svc.Finalizers) > 0 {
		b.WriteString(" finalizer")
	}
	if ips := porticov1.IngressAddrs(svc); len(ips) > 0 {
		fmt.Fprintf(&b, " ingress=%v", ips)
	}
	return b.String()
}
