package controller

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
	"github.com/portico-lb/portico/controller/internal/seeded"
)

// Shell is the controller around its pure core: the reconcilers that gather and write, the
// book behind its lock and the status writer, wired to their ports. Setup registers it with a
// manager; the simulator (controller/sim) builds it on its own ports and drives it, one step
// at a time, so that what it checks is this code.
type Shell struct {
	Services *ServiceReconciler
	Health   *HealthReconciler
	Pools    *PoolReconciler
	peers    *BGPPeerReconciler
	ads      *AdvertisementReconciler
	cluster  *clusterKinds
	tell     *teller
}

// NewShell wires the controller's shell to p. Events are sent by nobody until Setup gives the
// shell a sender; every Speaker counts (no speaker Lease is read) until Setup gives it the
// Leases.
func NewShell(p Ports, opts Options) *Shell {
	if opts.LoadBalancerClass == "" {
		opts.LoadBalancerClass = porticov1.DefaultLoadBalancerClass
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	s := newState(p.Cache, opts.LoadBalancerClass)
	s.live, s.clock, s.ignoreClassless = p.Live, p.Clock, opts.IgnoreClassless
	q := p.Queues
	if q.Services == nil {
		q = Queues{Services: newChanQueue(4096), Health: newChanQueue(1024), Pools: newChanQueue(1024)}
	}
	s.retry, s.dirty = q.Services, q.Pools
	tell := newTeller(p.Cache, opts.Metrics, p.Clock, s.poolsDirty)
	w := newStatusWriter(p)
	news := decide.NewNewsDesk(opts.NewsAfter, time.Time{})
	news.Hold()                                                      // until this leader has reviewed the Services it finds (HealthReconciler.reviewFirst)
	liveness, _ := newSpeakerLiveness(context.Background(), nil, "") // reads nothing
	cluster := &clusterKinds{Stores: p.Stores, liveness: liveness, clock: p.Clock}
	return &Shell{
		Services: &ServiceReconciler{reader: p.Cache, tell: tell, state: s, metrics: opts.Metrics, writer: w, cluster: cluster},
		Health: &HealthReconciler{reader: p.Cache, clock: p.Clock, tell: tell, ours: s.ours, writer: w, news: news, cluster: cluster,
			retries: q.Health},
		Pools: &PoolReconciler{reader: p.Cache, tell: tell, state: s, metrics: opts.Metrics, writer: w, news: news,
			lastWrite: map[string]time.Time{}},
		peers: &BGPPeerReconciler{reader: p.Cache, clock: p.Clock, writer: w, retries: newChanQueue(64)},
		ads: &AdvertisementReconciler{reader: p.Cache, clock: p.Clock, tell: tell, writer: w,
			l2Retry: newChanQueue(64), bgpRetry: newChanQueue(64)},
		cluster: cluster,
		tell:    tell,
	}
}

// ReviewFirst tells the news desk which Services this leader reviews first, as a leader does
// once its cache has synced.
func (sh *Shell) ReviewFirst(ctx context.Context) { sh.Health.reviewFirst(ctx) }

// WaitingIn lists the waiting Services of a namespace whose labels changed: the Service
// reconciler's watch of Namespaces.
func (sh *Shell) WaitingIn(namespace string) []types.NamespacedName {
	var keys []types.NamespacedName
	ns := &metav1.PartialObjectMetadata{}
	ns.Name = namespace
	for _, r := range sh.Services.waitingIn(context.Background(), ns) {
		keys = append(keys, r.NamespacedName)
	}
	return keys
}

// Seed switches on deliberately broken rules (seeded.Bugs): only the simulator's positive
// controls do, to see each invariant catch a controller that breaks it.
func (sh *Shell) Seed(b seeded.Bugs) {
	sh.Services.state.book.Do(func(bk *decide.Book) { bk.Seed(b) })
	sh.Services.writer.mu.Lock()
	sh.Services.writer.writes.Seed(b)
	sh.Services.writer.mu.Unlock()
}
