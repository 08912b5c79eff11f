package speaker

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
)

// pendingChanges collects, between two reconciles, the Services that changed (a Service or one
// of its EndpointSlices), or that everything must be planned again (any other object, the
// members, the BGP passwords). The informers' handlers fill it; the main loop takes it.
type pendingChanges struct {
	mu     sync.Mutex
	all    bool
	keys   map[string]bool
	slices map[string]map[string]bool // EndpointSlice names by Service key: a Service's slices without listing all
}

func (p *pendingChanges) everything() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.all = true
}

// take returns the Services changed since the last take, sorted, or all: plan everything.
func (p *pendingChanges) take() (keys []string, all bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys = slices.Sorted(maps.Keys(p.keys))
	all, p.all, p.keys = p.all, false, nil
	return keys, all
}

func (p *pendingChanges) service(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.keys == nil {
		p.keys = map[string]bool{}
	}
	p.keys[key] = true
}

// slice notes an EndpointSlice added, changed or (gone) deleted: its Service changed.
func (p *pendingChanges) slice(es *discoveryv1.EndpointSlice, gone bool) {
	svc := es.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return
	}
	key := es.Namespace + "/" + svc
	p.mu.Lock()
	if p.slices == nil {
		p.slices = map[string]map[string]bool{}
	}
	if gone {
		delete(p.slices[key], es.Name)
		if len(p.slices[key]) == 0 {
			delete(p.slices, key)
		}
	} else {
		if p.slices[key] == nil {
			p.slices[key] = map[string]bool{}
		}
		p.slices[key][es.Name] = true
	}
	p.mu.Unlock()
	p.service(key)
}

// slicesOf are the names of the Service's EndpointSlices, sorted.
func (p *pendingChanges) slicesOf(key string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.slices[key]))
}

// changeHandler is the informer handler for obj's kind: Services and EndpointSlices name the
// Service that changed, every other kind asks for a whole plan.
func (s *Speaker) changeHandler(obj runtime.Object) toolscache.ResourceEventHandlerFuncs {
	note := func(o any, gone bool) {
		if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		switch o := o.(type) {
		case *corev1.Service:
			s.pending.service(o.Namespace + "/" + o.Name)
		case *discoveryv1.EndpointSlice:
			s.pending.slice(o, gone)
		default:
			s.pending.everything()
		}
		s.trigger("config")
	}
	switch obj.(type) {
	case *corev1.Service, *discoveryv1.EndpointSlice:
	default:
		note = func(any, bool) { s.replanAll("config") }
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { note(o, false) },
		UpdateFunc: func(old, o any) { note(old, true); note(o, false) },
		DeleteFunc: func(o any) { note(o, true) },
	}
}

// replanAll has the next reconcile plan every Service.
func (s *Speaker) replanAll(cause string) {
	s.pending.everything()
	s.trigger(cause)
}

// changedServices reads the Services named by keys and their EndpointSlices from the cache (a
// key it does not find was deleted).
func (s *Speaker) changedServices(ctx context.Context, keys []string) ([]corev1.Service, []discoveryv1.EndpointSlice, error) {
	svcs := make([]corev1.Service, 0, len(keys))
	var eps []discoveryv1.EndpointSlice
	for _, key := range keys {
		ns, name, _ := strings.Cut(key, "/")
		var svc corev1.Service
		if err := s.Cache.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &svc); err != nil {
			if !apierrors.IsNotFound(err) {
				return nil, nil, err
			}
			continue
		}
		svcs = append(svcs, svc)
		if svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
			continue // only Local Services read their endpoints
		}
		for _, sliceName := range s.pending.slicesOf(key) {
			var es discoveryv1.EndpointSlice
			if err := s.Cache.Get(ctx, types.NamespacedName{Namespace: ns, Name: sliceName}, &es); err != nil && !apierrors.IsNotFound(err) {
				return nil, nil, err
			} else if err == nil {
				eps = append(eps, es)
			}
		}
	}
	return svcs, eps, nil
}
