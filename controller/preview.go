package controller

import (
	"cmp"
	"context"
	"errors"
	"math/big"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
	"github.com/portico-lb/portico/controller/decide"
)

// PoolPreview is what a pool change does to one pool.
type PoolPreview struct {
	Name string
	// Change is "added", "removed", "changed" or "unchanged".
	Change string
	// Assigned and Available after the change (Available "" for a removed pool).
	Assigned  int64
	Available string
}

// ServicePreview is what a pool change does to one LoadBalancer Service.
type ServicePreview struct {
	Service string // namespace/name
	Before  allocator.Assignment
	After   allocator.Assignment
	// Effect is one of "keeps", "changes pool", "orphaned", "gets", "waits".
	Effect string
	// Why a Service keeps waiting ("PoolExhausted: ..."); "" otherwise.
	Why string
}

// PoolsPreview is what PreviewPools finds a pool change would do. (The speaker's Plan, what
// one node announces, is unrelated.)
type PoolsPreview struct {
	Pools    []PoolPreview
	Services []ServicePreview
}

// PreviewPools computes what replacing the cluster's pools by pools would do, with the
// controller's own allocator and request rules, changing nothing: the allocator is rebuilt
// from the Services' status exactly as on a controller restart, given the new pools, and the
// backlog of waiting Services is served in it as the controller serves it (oldest first,
// decide.OlderFirst). Pools not named in pools are kept unless removeOthers.
func PreviewPools(ctx context.Context, reader client.Reader, lbClass string, pools []porticov1.IPAddressPool, removeOthers bool) (PoolsPreview, error) {
	if lbClass == "" {
		lbClass = porticov1.DefaultLoadBalancerClass
	}
	s := newState(reader, lbClass)
	b := decide.NewBook() // this call's own: nothing shares it
	pending, err := s.load(ctx, b)
	if err != nil {
		return PoolsPreview{}, err
	}
	alloc := b.Allocator()
	var current porticov1.IPAddressPoolList
	if err := reader.List(ctx, &current); err != nil {
		return PoolsPreview{}, err
	}
	next, poolPreviews := mergePools(current.Items, pools, removeOthers)

	var svcs corev1.ServiceList
	if err := reader.List(ctx, &svcs); err != nil {
		return PoolsPreview{}, err
	}
	before := map[string]allocator.Assignment{}
	for i := range svcs.Items {
		key := svcs.Items[i].Namespace + "/" + svcs.Items[i].Name
		before[key], _ = alloc.Assignment(key)
	}
	apools := make([]allocator.Pool, len(next))
	for i := range next {
		apools[i] = decide.AllocatorPool(&next[i])
	}
	alloc.SetPools(apools) // not the book's SetPools: a pool from a file may carry its stored generation
	b.Await(pending)
	b.ServeBacklog(next)

	var preview PoolsPreview
	for i := range svcs.Items {
		if svc := &svcs.Items[i]; s.ours(svc) {
			key := svc.Namespace + "/" + svc.Name
			sp := ServicePreview{Service: key, Before: before[key]}
			sp.After, _ = alloc.Assignment(key)
			if len(sp.Before.IPs) > 0 {
				sp.Effect = keptEffect(sp.Before, sp.After)
			} else {
				sp.Effect, sp.Why = waitEffect(waitsFor(ctx, s, alloc, svc, next, sp.After))
			}
			preview.Services = append(preview.Services, sp)
		}
	}
	preview.Pools = counted(poolPreviews, alloc)
	slices.SortFunc(preview.Services, func(a, b ServicePreview) int { return cmp.Compare(a.Service, b.Service) })
	return preview, nil
}

// waitsFor says why a Service the backlog did not serve still waits (nil: it was served),
// asking the allocator again: a failed allocation changes nothing.
func waitsFor(ctx context.Context, s *state, alloc *allocator.Allocator, svc *corev1.Service, pools []porticov1.IPAddressPool, got allocator.Assignment) error {
	if len(got.IPs) > 0 {
		return nil
	}
	req, err := decide.Request(svc, pools, s.labelsOf(ctx, svc.Namespace))
	if err != nil {
		return err
	}
	_, err = alloc.Allocate(req)
	return err
}

// counted fills in each pool's counts after the change.
func counted(pools []PoolPreview, alloc *allocator.Allocator) []PoolPreview {
	for i := range pools {
		p := &pools[i]
		if st, ok := alloc.Stats(p.Name); ok {
			p.Assigned = st.Assigned[0] + st.Assigned[1]
			p.Available = new(big.Int).Add(st.Available[0], st.Available[1]).String()
		}
	}
	return pools
}

// keptEffect is what the change does to a Service that holds addresses.
func keptEffect(before, after allocator.Assignment) string {
	switch {
	case after.Orphaned() && !before.Orphaned():
		return "orphaned"
	case after.Pool() != before.Pool():
		return "changes pool"
	}
	return "keeps"
}

// waitEffect is what the change does to a waiting Service, given its allocation's error.
func waitEffect(err error) (effect, why string) {
	var aerr *allocator.Error
	switch {
	case err == nil:
		return "gets", ""
	case errors.As(err, &aerr):
		return "waits", string(aerr.Reason) + ": " + aerr.Message
	}
	return "waits", err.Error()
}

// mergePools applies the given pools over the current ones, by name.
func mergePools(current, given []porticov1.IPAddressPool, removeOthers bool) ([]porticov1.IPAddressPool, []PoolPreview) {
	byName := map[string]*porticov1.IPAddressPool{}
	for i := range given {
		byName[given[i].Name] = &given[i]
	}
	var next []porticov1.IPAddressPool
	var previews []PoolPreview
	for i := range current {
		cur := &current[i]
		g, ok := byName[cur.Name]
		switch {
		case ok:
			change := "unchanged"
			if !equality.Semantic.DeepEqual(cur.Spec, g.Spec) {
				change = "changed"
			}
			next = append(next, *g)
			previews = append(previews, PoolPreview{Name: cur.Name, Change: change})
			delete(byName, cur.Name)
		case removeOthers:
			previews = append(previews, PoolPreview{Name: cur.Name, Change: "removed"})
		default:
			next = append(next, *cur)
			previews = append(previews, PoolPreview{Name: cur.Name, Change: "unchanged"})
		}
	}
	for i := range given {
		if _, ok := byName[given[i].Name]; ok {
			next = append(next, given[i])
			previews = append(previews, PoolPreview{Name: given[i].Name, Change: "added"})
		}
	}
	slices.SortFunc(previews, func(a, b PoolPreview) int { return cmp.Compare(a.Name, b.Name) })
	return next, previews
}
