// Command portico-speaker runs on every node (a DaemonSet with hostNetwork and CAP_NET_RAW): it
// answers ARP/NDP for the LoadBalancer addresses this node owns and advertises addresses to BGP
// routers through an embedded GoBGP. See docs/speaker-l2.md and docs/speaker-bgp.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/kube"
	"github.com/portico-lb/portico/speaker"
	"github.com/portico-lb/portico/speaker/bgp"
	"github.com/portico-lb/portico/speaker/l2"
	"github.com/portico-lb/portico/speaker/membership"
	"github.com/portico-lb/portico/speaker/selfcheck"
)

type options struct {
	node, lbClass, metricsAddr string
	probeAddr                  string
	bindAddr                   string
	port                       int
	secret                     string
	detection                  membership.Detection
	selfCheck                  selfcheck.Options
}

func main() {
	var o options
	flag.StringVar(&o.node, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, from the downward API)")
	flag.StringVar(&o.lbClass, "load-balancer-class", v1alpha1.DefaultLoadBalancerClass, "spec.loadBalancerClass handled besides no class")
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", ":7474", "address the Prometheus metrics endpoint binds to; 0 disables it")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":7475", "address the /healthz (main loop alive) and /readyz (synced and joined) endpoints bind to; 0 disables them")
	flag.StringVar(&o.bindAddr, "memberlist-bind-address", "0.0.0.0", "address memberlist gossip binds to (UDP and TCP)")
	flag.IntVar(&o.port, "memberlist-port", 7946, "memberlist port, the same on every node")
	flag.StringVar(&o.secret, "memberlist-secret", "", "namespace/name of a Secret whose key \"secretkey\" (16, 24 or 32 bytes) encrypts gossip; empty sends it in clear")
	flag.DurationVar(&o.detection.ProbeInterval, "memberlist-probe-interval", membership.DefaultDetection.ProbeInterval, "how often each member probes another")
	flag.DurationVar(&o.detection.ProbeTimeout, "memberlist-probe-timeout", membership.DefaultDetection.ProbeTimeout, "how long a probe waits for its answer")
	flag.IntVar(&o.detection.SuspicionMult, "memberlist-suspicion-mult", membership.DefaultDetection.SuspicionMult, "a suspected member is declared dead after this many probe intervals (scaled by log10 of the group size)")
	o.selfCheck = selfcheck.DefaultOptions
	flag.DurationVar(&o.selfCheck.Interval, "self-check-interval", o.selfCheck.Interval, "how often the addresses other nodes answer for are probed (ARP) to report who answers; 0 switches the self-check off")
	flag.Float64Var(&o.selfCheck.Rate, "self-check-rate", o.selfCheck.Rate, "self-check probes per second at most")
	flag.DurationVar(&o.selfCheck.Wait, "self-check-wait", o.selfCheck.Wait, "how long answers to one self-check probe are collected")
	logOpts := zap.Options{}
	logOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&logOpts)))
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "portico-speaker:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.node == "" {
		return fmt.Errorf("no node name: set --node-name or NODE_NAME")
	}
	log := ctrl.Log.WithName("speaker").WithValues("node", o.node)
	mgr, err := kube.NewManager(ctrl.Options{Metrics: metricsserver.Options{BindAddress: o.metricsAddr}, HealthProbeBindAddress: o.probeAddr})
	if err != nil {
		return err
	}
	key, err := readKey(mgr.GetAPIReader(), o.secret)
	if err != nil {
		return err
	}
	group, err := membership.Start(membership.Config{Name: o.node, BindAddr: o.bindAddr, BindPort: o.port, Key: key, Detection: o.detection})
	if err != nil {
		return err
	}
	metrics := speaker.NewMetrics(crmetrics.Registry)
	sessions := &bgp.Sessions{Log: log.WithName("bgp")}
	crmetrics.Registry.MustRegister(sessions)
	s := &speaker.Speaker{
		Node: o.node, LBClass: o.lbClass, Cache: mgr.GetCache(), Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Group: group, MLPort: o.port,
		Announce: l2.NewAnnouncer(log.WithName("l2"), metrics), BGP: sessions, Recorder: mgr.GetEventRecorderFor("portico-speaker"),
		Metrics: metrics, Log: log, SelfCheck: o.selfCheck,
	}
	if err := mgr.Add(s); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("main-loop", s.Alive); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("synced-and-joined", s.Ready); err != nil {
		return err
	}
	log.Info("starting", "memberlist", membership.HostPort(o.bindAddr, o.port), "detection", o.detection, "encrypted", key != nil)
	return mgr.Start(ctrl.SetupSignalHandler())
}

// readKey reads the gossip key once at start; a missing Secret is an error rather than a
// silent fallback to clear text.
func readKey(r client.Reader, ref string) ([]byte, error) {
	if ref == "" {
		return nil, nil
	}
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("--memberlist-secret %q: want namespace/name", ref)
	}
	var sec corev1.Secret
	if err := r.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &sec); err != nil {
		return nil, fmt.Errorf("reading memberlist key from Secret %s: %w", ref, err)
	}
	key := sec.Data["secretkey"]
	if len(key) == 0 {
		return nil, fmt.Errorf("Secret %s has no key \"secretkey\"", ref)
	}
	return key, nil
}
