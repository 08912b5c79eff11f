package controller

import (
	"context"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
	"github.com/portico-lb/portico/internal/events"
	"github.com/portico-lb/portico/rules"
)

// Options configure the controller.
type Options struct {
	// LoadBalancerClass is the spec.loadBalancerClass handled besides no class; default
	// portico.dev/lb.
	LoadBalancerClass string
	// Metrics receive the controller's series; nil: series no registry serves.
	Metrics *Metrics
	// NewsAfter is how long a health problem (a False EndpointsReady, Announced or Reachable)
	// lasts before an event tells it; 0: 30 s. The condition says it at once.
	NewsAfter time.Duration
	// IgnoreClassless leaves Services without a loadBalancerClass to another load balancer;
	// the speakers must run with the same setting.
	IgnoreClassless bool
	// Lease proves, before each write, that this replica still holds the leader lease
	// (FenceLeaderElection); nil without leader election.
	Lease *LeaseFence
	// SpeakerNamespace is where the speakers renew their Leases: a Speaker counts in the
	// Services' conditions only while its speaker's Lease is fresh. "" reads no Lease and
	// counts every Speaker. The manager's cache must be told (CacheOptions).
	SpeakerNamespace string
}

// CacheOptions set what the manager's cache keeps: no object's managedFields, which nothing
// here reads and which are about a third of a cached Service (and of every copy a List makes).
// A status update sent from a copy without them leaves the stored ones as they are. Unlike the
// speaker's cache (speaker.TrimForCache), it keeps kubectl's last-applied annotation: the
// controller writes Services, and a status update also stores the annotations it carries, so
// a copy without it would delete it from the Service.
//
// Of the Leases it keeps the speakers' alone, in speakerNamespace: a cluster-wide watch would
// follow every node's heartbeat Lease too.
func CacheOptions(o *ctrl.Options, speakerNamespace string) {
	o.Cache.DefaultTransform = cache.TransformStripManagedFields()
	if speakerNamespace != "" {
		if o.Cache.ByObject == nil {
			o.Cache.ByObject = map[client.Object]cache.ByObject{}
		}
		o.Cache.ByObject[&coordinationv1.Lease{}] = cache.ByObject{
			Namespaces: map[string]cache.Config{speakerNamespace: {}},
			Label:      labels.SelectorFromSet(labels.Set{rules.SpeakerLeaseLabel: ""}),
		}
	}
}

// EventReporter is the reportingController of every event the controller sends.
const EventReporter = "portico-controller"

// Setup registers every Portico reconciler with the manager. They share one allocator, fed
// first from the pools and every Service's status, so no address moves across restarts, and
// one status writer, so their writes to a Service never fight.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.LoadBalancerClass == "" {
		opts.LoadBalancerClass = porticov1.DefaultLoadBalancerClass
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	// Every write goes through c: none is sent unless the lease is proven held.
	c := fenced(mgr.GetClient(), opts.Lease)
	s := newState(mgr.GetClient(), opts.LoadBalancerClass)
	s.live = mgr.GetAPIReader()
	s.ignoreClassless = opts.IgnoreClassless
	tell := newTeller(nil, mgr.GetClient(), opts.Metrics, s.poolsDirty)
	w := newStatusWriter(c.Status(), mgr.GetAPIReader(), tell.lull)
	if err := mgr.Add(w); err != nil {
		return err
	}
	// Events wait behind the Services' status writes. The sender runs on the leader only, with
	// the reconcilers whose events it sends (a Runnable the manager starts after election).
	host, _ := os.Hostname()
	recorder := events.NewSender(events.Options{Create: func(ctx context.Context, ev *eventsv1.Event) error { return c.Create(ctx, ev) }, Scheme: mgr.GetScheme(), Controller: EventReporter,
		Instance: EventReporter + "-" + host, Quiet: tell.quiet, Metrics: opts.Metrics.events})
	if err := mgr.Add(recorder); err != nil {
		return err
	}
	tell.rec = recorder
	news := decide.NewNewsDesk(opts.NewsAfter, time.Time{})
	news.Hold() // until this leader has reviewed the Services it finds (HealthReconciler.expectReviews)
	if err := (&PoolReconciler{Client: c, tell: tell, state: s, metrics: opts.Metrics, writer: w, news: news}).setup(mgr); err != nil {
		return err
	}
	if err := (&BGPPeerReconciler{Client: c, writer: w}).setup(mgr); err != nil {
		return err
	}
	if err := (&AdvertisementReconciler{Client: c, tell: tell, writer: w}).setup(mgr); err != nil {
		return err
	}
	cluster, err := newClusterKinds(context.Background(), mgr.GetCache())
	if err != nil {
		return err
	}
	if cluster.liveness, err = newSpeakerLiveness(context.Background(), mgr.GetCache(), opts.SpeakerNamespace); err != nil {
		return err
	}
	if err := mgr.Add(cluster.liveness); err != nil {
		return err
	}
	health := &HealthReconciler{Client: c, tell: tell, ours: s.ours, writer: w, news: news, cluster: cluster}
	if err := (&ServiceReconciler{Client: c, tell: tell, state: s, metrics: opts.Metrics, writer: w, cluster: cluster}).setup(mgr); err != nil {
		return err
	}
	return health.setup(mgr)
}
