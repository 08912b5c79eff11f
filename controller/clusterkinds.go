package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
	"github.com/portico-lb/portico/rules"
)

// clusterKinds reads the cluster-wide kinds the health conditions are folded from straight
// from their informers' stores. The health of every Service reads all of them, and a cached
// List makes, for each call, a new object of the kind by reflection (to find its informer)
// and a list to fill: a tenth of what the controller allocated in a 5000-Service backlog.
// What it returns shares the cache's objects: read only.
type clusterKinds struct {
	Stores
	liveness *speakerLiveness // which Speakers count
	clock    Clock
}

// InformerStores finds (or adds) the informers of the cluster-wide kinds in c. Called before
// the manager starts, so the manager waits for them to sync before any reconciler runs (a
// cached List would wait too; a store does not).
func InformerStores(ctx context.Context, c cache.Cache) (Stores, error) {
	var k Stores
	for _, s := range []struct {
		obj   client.Object
		store *toolscache.Store
	}{{&porticov1.Speaker{}, &k.Speakers}, {&porticov1.L2Advertisement{}, &k.L2Advertisements},
		{&porticov1.BGPAdvertisement{}, &k.BGPAdvertisements}, {&porticov1.BGPPeer{}, &k.BGPPeers}, {&porticov1.IPAddressPool{}, &k.Pools},
		{&corev1.Node{}, &k.Nodes}} {
		inf, err := c.GetInformer(ctx, s.obj)
		if err != nil {
			return Stores{}, err
		}
		withStore, ok := inf.(interface{ GetStore() toolscache.Store })
		if !ok {
			return Stores{}, fmt.Errorf("the cache's informer for %T (%T) has no store to read", s.obj, inf)
		}
		*s.store = withStore.GetStore()
	}
	return k, nil
}

// fill sets f's cluster-wide lists; the Speakers are those of live speakers.
func (k *clusterKinds) fill(f *decide.HealthFacts) {
	k.liveness.count(f, storeItems[porticov1.Speaker](k.Speakers), k.clock.Now())
	f.L2Advertisements = storeItems[porticov1.L2Advertisement](k.L2Advertisements)
	f.BGPAdvertisements = storeItems[porticov1.BGPAdvertisement](k.BGPAdvertisements)
	f.BGPPeers = storeItems[porticov1.BGPPeer](k.BGPPeers)
	f.Pools = storeItems[porticov1.IPAddressPool](k.Pools)
	f.Nodes = storeItems[corev1.Node](k.Nodes)
	f.IgnoreExcludeLabel = rules.IgnoreExcludeLabel(f.Speakers)
}

// storeItems are a store's objects of type T, as the values a List's Items hold (shallow
// copies: their slices and maps are the cache's).
func storeItems[T any](s toolscache.Store) []T {
	objs := s.List()
	items := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(*T); ok {
			items = append(items, *t)
		}
	}
	return items
}
