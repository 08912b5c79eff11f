package controller

import (
	"context"
	"os"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// Setup registers every Portico reconciler with the manager (NewShell: one allocator, fed first
// from the pools and every Service's status, so no address moves across restarts, and one
// status writer, so their writes never fight), on its cache, its apiserver reader and the
// lease fence.
func Setup(mgr ctrl.Manager, opts Options) error {
	// Every write goes through c: none is sent unless the lease is proven held.
	c := fenced(mgr.GetClient(), opts.Lease)
	stores, err := InformerStores(context.Background(), mgr.GetCache())
	if err != nil {
		return err
	}
	lanes := newGoLanes()
	if err := mgr.Add(lanes); err != nil {
		return err
	}
	sh := NewShell(Ports{Cache: mgr.GetClient(), Live: mgr.GetAPIReader(), Stores: stores,
		Status: opts.Lease.Updates(mgr.GetClient().Status()), Clock: wallClock{}, Lanes: lanes}, opts)
	// Events wait behind the Services' status writes. The sender runs on the leader only, with
	// the reconcilers whose events it sends (a Runnable the manager starts after election).
	w := sh.Services.writer
	w.lull = events.NewLull(eventLull)
	host, _ := os.Hostname()
	sender := events.NewSender(events.Options{Create: func(ctx context.Context, ev *eventsv1.Event) error { return c.Create(ctx, ev) }, Scheme: mgr.GetScheme(), Controller: EventReporter,
		Instance: EventReporter + "-" + host, Quiet: w.lull.Quiet, Metrics: sh.tell.metrics.events})
	if err := mgr.Add(sender); err != nil {
		return err
	}
	sh.tell.rec = sender
	liveness, err := newSpeakerLiveness(context.Background(), mgr.GetCache(), opts.SpeakerNamespace)
	if err != nil {
		return err
	}
	sh.cluster.liveness = liveness
	if err := mgr.Add(liveness); err != nil {
		return err
	}
	if err := sh.Pools.metrics.registerObjectMetrics(mgr.GetCache(), sh.cluster, mgr.Elected(), opts.Lease); err != nil {
		return err
	}
	for _, setup := range []func(ctrl.Manager) error{sh.Pools.setup, sh.peers.setup, sh.ads.setup, sh.Services.setup, sh.Health.setup} {
		if err := setup(mgr); err != nil {
			return err
		}
	}
	return nil
}
