// Command portico-controller assigns addresses from IPAddressPools to LoadBalancer Services
// and reports on pools. Run two replicas with --leader-elect for high availability.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
	"github.com/portico-lb/portico/internal/kube"
)

func main() {
	metricsAddr := flag.String("metrics-bind-address", ":7472", "address the Prometheus metrics endpoint binds to; 0 disables it")
	probeAddr := flag.String("health-probe-bind-address", ":7473", "address the /healthz and /readyz endpoints bind to")
	pprofAddr := flag.String("pprof-bind-address", "0", "address Go's /debug/pprof endpoints bind to (heap and CPU profiles); 0 disables them")
	leaderElect := flag.Bool("leader-elect", false, "elect one active replica through a Lease, so two or more can run")
	leaderNamespace := flag.String("leader-election-namespace", "", "namespace of the leader Lease (default: the pod's own)")
	leaseDuration := flag.Duration("leader-elect-lease-duration", 15*time.Second, "how long followers wait before taking over from a leader that stopped renewing")
	renewDeadline := flag.Duration("leader-elect-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it steps down")
	retryPeriod := flag.Duration("leader-elect-retry-period", 2*time.Second, "how often candidates try to take the lease")
	var copts controller.Options
	flag.StringVar(&copts.LoadBalancerClass, "load-balancer-class", porticov1.DefaultLoadBalancerClass, "spec.loadBalancerClass handled besides Services with no class")
	flag.DurationVar(&copts.NewsAfter, "news-after", 30*time.Second, "how long a Service's health problem lasts before an event tells it (its condition says it at once)")
	flag.BoolVar(&copts.IgnoreClassless, "ignore-classless", false,
		"leave Services with no spec.loadBalancerClass to another load balancer, handling only --load-balancer-class (the speakers need the same flag)")
	flag.StringVar(&copts.SpeakerNamespace, "speaker-namespace", os.Getenv("POD_NAMESPACE"),
		"namespace where the speakers renew their Leases: a speaker counts in the Services' conditions only while its Lease is fresh (default $POD_NAMESPACE; empty counts every Speaker object)")
	logOpts := zap.Options{}
	logOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(logr.New(lazyValues{sink: zap.New(zap.UseFlagOptions(&logOpts)).GetSink()}))

	opts := ctrl.Options{
		Metrics:                 metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:  *probeAddr,
		PprofBindAddress:        *pprofAddr,
		LeaderElection:          *leaderElect,
		LeaderElectionID:        "portico-controller.portico.dev",
		LeaderElectionNamespace: *leaderNamespace,
		LeaseDuration:           leaseDuration,
		RenewDeadline:           renewDeadline,
		RetryPeriod:             retryPeriod,
		// Stepping down at once on shutdown lets the other replica take over without
		// waiting for the lease to expire.
		LeaderElectionReleaseOnCancel: true,
	}
	controller.CacheOptions(&opts, copts.SpeakerNamespace)
	if os.Getenv("GOGC") == "" {
		// The heap may grow to 1.5 times what is live before a collection, not twice: at
		// 5000 Services about 30 MB is live and the collector's share of CPU stays near zero,
		// so the headroom, not the live data, was most of the peak.
		debug.SetGCPercent(50)
	}
	if err := run(opts, copts); err != nil {
		fmt.Fprintln(os.Stderr, "portico-controller:", err)
		os.Exit(1)
	}
}

func run(opts ctrl.Options, copts controller.Options) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	// A replica that cannot prove it still holds the lease (paused past it, say) writes nothing;
	// its identity names its pod, for the apiserver's own check (portico-controller-leader-only).
	if copts.Lease, err = controller.FenceLeaderElection(cfg, &opts, os.Getenv("POD_NAME")); err != nil {
		return err
	}
	mgr, err := kube.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	// The controller's series join controller-runtime's on the endpoint the manager serves.
	copts.Metrics = controller.NewMetrics(metrics.Registry)
	if err := controller.Setup(mgr, copts); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
