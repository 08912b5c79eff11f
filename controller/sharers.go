package controller

import (
	"context"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
)

// ingressIPIndex indexes the cached Services by their ingress addresses: Services sharing an
// address have one owner (rules.L2Owner), which the Announced condition of each names, and a
// speaker's self-check of an address concerns every Service holding it.
const ingressIPIndex = "portico.dev/ingress-ip"

// ingressIPs is ingressIPIndex's index function.
func ingressIPs(o client.Object) []string {
	svc, ok := o.(*corev1.Service)
	if !ok {
		return nil
	}
	var out []string
	for _, ip := range porticov1.IngressAddrs(svc) {
		out = append(out, ip.String())
	}
	return out
}

// holdingAny lists the cached Services of ours that hold ip, read only (no copies).
func holdingAny(ctx context.Context, c client.Reader, ours func(*corev1.Service) bool, ip netip.Addr) ([]*corev1.Service, error) {
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs, client.MatchingFields{ingressIPIndex: ip.String()}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	var out []*corev1.Service
	for i := range svcs.Items {
		if ours(&svcs.Items[i]) {
			out = append(out, &svcs.Items[i])
		}
	}
	return out, nil
}

// gatherSharers adds to f the Services of ours sharing an address with svc, and the
// EndpointSlices of those with externalTrafficPolicy Local: the owner of a shared address is
// elected from every Service listing it.
func gatherSharers(ctx context.Context, c client.Reader, ours func(*corev1.Service) bool, svc *corev1.Service, f *decide.HealthFacts) error {
	seen := map[client.ObjectKey]bool{client.ObjectKeyFromObject(svc): true}
	for _, ip := range porticov1.IngressAddrs(svc) {
		holders, err := holdingAny(ctx, c, ours, ip)
		if err != nil {
			return err
		}
		for _, s := range holders {
			if seen[client.ObjectKeyFromObject(s)] {
				continue
			}
			seen[client.ObjectKeyFromObject(s)] = true
			f.Services = append(f.Services, *s)
			if s.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
				continue
			}
			var slices discoveryv1.EndpointSliceList
			if err := c.List(ctx, &slices, client.InNamespace(s.Namespace), client.MatchingFields{sliceServiceIndex: s.Name}); err != nil {
				return err
			}
			f.EndpointSlices = append(f.EndpointSlices, slices.Items...)
		}
	}
	return nil
}

// sharersOf maps a Service's change (its addresses, labels, policy, or its going) to the other
// Services holding one of its addresses: their owner is elected over it too.
func (r *HealthReconciler) sharersOf(ctx context.Context, o client.Object) []reconcile.Request {
	svc, ok := o.(*corev1.Service)
	if !ok {
		return nil
	}
	var reqs []reconcile.Request
	for _, ip := range porticov1.IngressAddrs(svc) {
		holders, err := holdingAny(ctx, r.reader, r.ours, ip)
		if err != nil {
			return reqs
		}
		for _, h := range holders {
			if h.Namespace != svc.Namespace || h.Name != svc.Name {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(h)})
			}
		}
	}
	return reqs
}

// sliceServices maps an EndpointSlice to its Service and, for a Service with
// externalTrafficPolicy Local (whose endpoints say which nodes may answer), the Services
// sharing its addresses.
func (r *HealthReconciler) sliceServices(ctx context.Context, o client.Object) []reconcile.Request {
	reqs := sliceService(ctx, o)
	if len(reqs) == 0 {
		return nil
	}
	var svc corev1.Service
	if err := r.reader.Get(ctx, reqs[0].NamespacedName, &svc); err != nil || svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		return reqs
	}
	return append(reqs, r.sharersOf(ctx, &svc)...)
}
