package controller

import (
	"context"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// speakerChanges maps a Speaker's change to the Services whose health conditions it can change.
// Speakers rewrite their status with every address they gain or lose and with every self-check
// round, so re-running every addressed Service for each write cost the controller O(Services)
// per write; an update now re-runs the Services whose announcements or self-check answers
// changed. Anything else the conditions read of a Speaker (its MACs, interfaces, conditions),
// its creation and its deletion still re-run every addressed Service.
func (r *HealthReconciler) speakerChanges() handler.EventHandler {
	everything := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, req := range r.addressed(ctx, nil) {
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			everything(ctx, q)
		},
		DeleteFunc: func(ctx context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			everything(ctx, q)
		},
		GenericFunc: func(ctx context.Context, _ event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			everything(ctx, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			before, ok1 := e.ObjectOld.(*porticov1.Speaker)
			after, ok2 := e.ObjectNew.(*porticov1.Speaker)
			if !ok1 || !ok2 {
				everything(ctx, q)
				return
			}
			keys, probed, all := speakerChange(before, after)
			if all {
				everything(ctx, q)
				return
			}
			if len(probed) > 0 {
				keys = append(keys, r.holding(ctx, probed)...)
			}
			for _, key := range keys {
				ns, name, _ := strings.Cut(key, "/")
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
			}
		},
	}
}

// speakerChange compares two versions of a Speaker as the health conditions read them: the
// Services whose announcements changed, the addresses whose self-check answers changed (a
// probe's time alone is no change), or all when something read for every Service changed.
func speakerChange(before, after *porticov1.Speaker) (services []string, probed []netip.Addr, all bool) {
	if !equality.Semantic.DeepEqual(unlisted(before), unlisted(after)) || !equality.Semantic.DeepEqual(before.Labels, after.Labels) ||
		// whether the node holds BGP sessions (not their states): Announced names unfit BGP nodes
		(len(before.Status.Sessions) == 0) != (len(after.Status.Sessions) == 0) {
		return nil, nil, true
	}
	announced := func(s *porticov1.Speaker) map[string][]porticov1.Announcement {
		m := map[string][]porticov1.Announcement{}
		for _, a := range s.Status.Announcements {
			m[a.Service] = append(m[a.Service], a)
		}
		return m
	}
	services = changedKeys(announced(before), announced(after))
	answers := func(s *porticov1.Speaker) map[string]porticov1.SelfCheck {
		m := map[string]porticov1.SelfCheck{}
		for _, sc := range s.Status.SelfChecks {
			sc.Time = metav1.Time{}
			m[sc.IP] = sc
		}
		return m
	}
	for _, ip := range changedKeys(answers(before), answers(after)) {
		if a, err := netip.ParseAddr(ip); err == nil {
			probed = append(probed, a)
		}
	}
	return services, probed, false
}

// changedKeys are the keys, sorted, whose values differ between a and b, those in one only
// included.
func changedKeys[V any](a, b map[string]V) []string {
	var out []string
	for k, va := range a {
		if vb, ok := b[k]; !ok || !equality.Semantic.DeepEqual(va, vb) {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// unlisted is a Speaker's status without the per-Service and per-address lists speakerChange
// compares entry by entry, and without what no health condition reads (BGP sessions and
// routes, foreign hosts' answers and when they were heard).
func unlisted(s *porticov1.Speaker) porticov1.SpeakerStatus {
	st := s.Status
	st.Announcements, st.SelfChecks = nil, nil
	st.Sessions, st.BGPPeersUp, st.BGP, st.ForeignAnswers, st.ProbedAt = nil, 0, nil, nil, nil
	return st
}

// holding returns the addressed Services that hold one of ips, from the cache's index.
func (r *HealthReconciler) holding(ctx context.Context, ips []netip.Addr) []string {
	var keys []string
	for _, ip := range ips {
		svcs, err := holdingAny(ctx, r.reader, r.ours, ip)
		if err != nil {
			return nil
		}
		for _, svc := range svcs {
			keys = append(keys, svc.Namespace+"/"+svc.Name)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}
