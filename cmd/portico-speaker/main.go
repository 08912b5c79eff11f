// Command portico-speaker runs on every node (a DaemonSet with hostNetwork, CAP_NET_RAW and
// CAP_NET_ADMIN): it answers ARP/NDP for the LoadBalancer addresses this node owns, advertises
// addresses to BGP routers through GoBGP (in a child process of its own, the same binary's
// bgp-process subcommand), and guards the addresses it announces
// (speaker/guard). See docs/speaker-l2.md and docs/speaker-bgp.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/kube/watchlist"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker"
	"github.com/portico-lb/portico/speaker/bgpproc"
	"github.com/portico-lb/portico/speaker/gossipkey"
	"github.com/portico-lb/portico/speaker/guard"
	"github.com/portico-lb/portico/speaker/handoff"
	"github.com/portico-lb/portico/speaker/kubeapi"
	"github.com/portico-lb/portico/speaker/l2"
	"github.com/portico-lb/portico/speaker/membership"
	"github.com/portico-lb/portico/speaker/plan"
	"github.com/portico-lb/portico/speaker/selfcheck"
	"github.com/portico-lb/portico/speaker/status"
)

type options struct {
	node, lbClass, metricsAddr string
	probeAddr                  string
	pprofAddr                  string
	bindAddr                   string
	port                       int
	secret                     string
	createSecret               bool
	keyRefresh                 time.Duration
	detection                  membership.Detection
	selfCheck                  selfcheck.Options
	conflicts                  speaker.ConflictProbing
	ignoreExcludeLabel         bool
	ignoreClassless            bool
	forwardGuard               bool
	handoffGrace               time.Duration
	handoffLinger              time.Duration
	handoffMark                uint
	handoffSlotMask            uint
	shareFlows                 bool
	shareFlowsLate             time.Duration
	routesUpWait               time.Duration
	drainGrace                 time.Duration
	l2BalanceSettle            time.Duration
	bgpMemoryLimitMiB          int64
	bgpSocket                  string
	leaseNamespace             string
	daemonSet                  string
	leaseRenew                 time.Duration
	controlPlaneConfig         string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == bgpSubcommand {
		if err := runBGPProcess(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "portico-speaker "+bgpSubcommand+":", err)
			os.Exit(1)
		}
		return
	}
	var o options
	bindFlags(&o)
	bindMemberlistFlags(&o)
	bindHandoffFlags(&o)
	bindProbeFlags(&o)
	logOpts := zap.Options{}
	logOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	logf.SetLogger(zap.New(zap.UseFlagOptions(&logOpts)))
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "portico-speaker:", err)
		os.Exit(1)
	}
}

// bindFlags binds the speaker's general and BGP flags to o.
func bindFlags(o *options) {
	flag.StringVar(&o.node, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, from the downward API)")
	flag.StringVar(&o.lbClass, "load-balancer-class", v1alpha1.DefaultLoadBalancerClass, "spec.loadBalancerClass handled besides no class")
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", ":7474", "address the Prometheus metrics endpoint binds to: a port alone binds to this node's address (the gossip's, see --memberlist-bind-address), 0.0.0.0:7474 or [::]:7474 to every interface; 0 disables it")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":7475", "address the /healthz (main loop alive) and /readyz (synced, joined, BGP sessions up) endpoints bind to: a port alone binds to this node's address (which the kubelet probes: a host-network pod's IP is its node's), 0.0.0.0:7475 to every interface; 0 disables them")
	flag.DurationVar(&o.routesUpWait, "bgp-ready-wait", speaker.DefaultRoutesUpWait, "how long after the start readiness waits for the BGP sessions that carry this node's routes, so that a rolling update replaces the next node only once this one's routes are back; 0 does not wait")
	flag.DurationVar(&o.drainGrace, "bgp-drain-grace", speaker.DefaultDrainGrace, "how long a cordoned node (kubectl cordon or drain) advertises its routes with the GRACEFUL_SHUTDOWN community (65535:0) before it withdraws them, so that routers move traffic away while the routes still exist; 0 withdraws at once")
	flag.DurationVar(&o.l2BalanceSettle, "l2-balance-settle", rules.DefaultL2BalanceSettle, "an L2 address stays on the node answering for it; once every speaker has been alive, no node cordoned and no address moved for this long, one address moves from a node holding more than 1.25 × the mean to its hash's choice, then one per this interval (every speaker must run with the same value; 0 never balances)")
	flag.Int64Var(&o.bgpMemoryLimitMiB, "bgp-memory-limit-mib", 128, "without --bgp-socket the BGP side (GoBGP and BFD) runs in a child process, restarted when it fails; it is killed and restarted when its anonymous resident memory (heap and runtime, not the binary's pages) goes above this many MiB (0: no limit)")
	flag.StringVar(&o.bgpSocket, "bgp-socket", "", "a unix socket (in a volume shared with the pod's bgp container) where the BGP side, run by the kubelet in a container of its own with its own memory limit (portico-speaker bgp-process --speaker-socket), connects; empty: the speaker runs it as its child process (--bgp-memory-limit-mib)")
	flag.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "address Go's /debug/pprof endpoints bind to, for memory and CPU profiles (a port alone: this node's address); 0 disables them")
	flag.BoolVar(&o.ignoreExcludeLabel, "ignore-exclude-lb-label", false,
		"announce from nodes labelled node.kubernetes.io/exclude-from-external-load-balancers too (single-node and control-plane-only clusters, whose nodes carry it)")
	flag.BoolVar(&o.ignoreClassless, "ignore-classless", false,
		"leave Services with no spec.loadBalancerClass to another load balancer, handling only --load-balancer-class (the controller needs the same flag)")
	flag.BoolVar(&o.forwardGuard, "forward-guard", true,
		"drop packets to the addresses this node announces that nothing on the node translated (nftables table inet portico; needs CAP_NET_ADMIN), so that clients arriving before the service proxy's rule connect on their next retransmission instead of being routed back out")
	flag.StringVar(&o.controlPlaneConfig, "control-plane-config", "", "the control-plane mode: hold the Kubernetes API's own address (the VIP) among the control-plane nodes this file lists, with no apiserver needed; the other flags but --node-name and the --memberlist-probe, -heartbeat and -suspicion timings are not read (docs/control-plane.md)")
	flag.StringVar(&o.daemonSet, "daemonset", "", "the speakers' DaemonSet in --namespace, read when this speaker stops: gone or being deleted (an uninstall), the BGP routes are withdrawn at once rather than left to the routers' graceful restart; empty: not read")
}

// bindMemberlistFlags binds the gossip group's flags to o.
func bindMemberlistFlags(o *options) {
	flag.StringVar(&o.bindAddr, "memberlist-bind-address", os.Getenv("HOST_IP"),
		"address memberlist gossip binds to (UDP and TCP), one of this node's InternalIP addresses (default $HOST_IP, from the downward API's status.hostIP; when empty, the Node's first InternalIP)")
	flag.IntVar(&o.port, "memberlist-port", 7946, "memberlist port, the same on every node")
	flag.StringVar(&o.secret, "memberlist-secret", "", "namespace/name of a Secret whose key \"secretkey\" (16, 24 or 32 bytes) encrypts gossip and whose optional \"acceptedkeys\" (one per line) also decrypt it; empty sends gossip in clear")
	flag.BoolVar(&o.createSecret, "memberlist-create-secret", false, "create the --memberlist-secret with a random 32-byte key when it does not exist (the first speaker to start does; it never replaces one); false: a missing Secret stops the speaker")
	flag.DurationVar(&o.keyRefresh, "memberlist-key-refresh", 30*time.Second, "how often the memberlist Secret is read again for changed keys")
	flag.DurationVar(&o.detection.ProbeInterval, "memberlist-probe-interval", membership.DefaultDetection.ProbeInterval, "how often each member probes another")
	flag.DurationVar(&o.detection.ProbeTimeout, "memberlist-probe-timeout", membership.DefaultDetection.ProbeTimeout, "how long a probe waits for its answer")
	flag.DurationVar(&o.detection.Heartbeat, "memberlist-heartbeat", membership.DefaultDetection.Heartbeat, "how often each member sends its two watchers (the members after it in name order) a heartbeat; one silent for two is checked at its kernel and found dead within about four, and its watchers tell every other member (0: memberlist's detection alone)")
	flag.IntVar(&o.detection.SuspicionMult, "memberlist-suspicion-mult", membership.DefaultDetection.SuspicionMult, "a suspected member is declared dead after this many probe intervals (scaled by log10 of the group size)")
}

// bindHandoffFlags binds the hand-off's and flow sharing's flags to o.
func bindHandoffFlags(o *options) {
	flag.DurationVar(&o.handoffGrace, "l2-handoff-grace", plan.DefaultHandoffGrace,
		"for this long after taking an L2 address over from a node that stays up, pass the packets of connections this node has no state for (opened through that node) on to that node, so they survive the move (nftables table inet portico-handoff, a policy-routing rule and table; needs CAP_NET_ADMIN); 0 switches it off and removes what an earlier run left")
	flag.DurationVar(&o.handoffLinger, "l2-handoff-linger", speaker.DefaultHandoffLinger,
		"after the node an L2 address was taken from answers for it again, go on passing the flows handed off to it for this long: clients that have not yet learnt the address's new MAC (those that ignore gratuitous ARP/NA until their next neighbour probe) still send here")
	flag.UintVar(&o.handoffMark, "l2-handoff-mark", uint(handoff.Defaults.Mark),
		"the bit of the packet and connection mark that the hand-off marks the flows it picks up with; must not be one that kube-proxy (0x4000, 0x8000), the CNI or a mesh uses")
	flag.BoolVar(&o.shareFlows, "bgp-share-flows", true,
		"before this node's BGP routes change for a drain or an uncordon, which makes routers with per-flow ECMP move flows between nodes, have every node share the connections it holds, so that a node a flow reaches without its state passes it on to the node that has it (through the hand-off: needs --l2-handoff-grace > 0, which is also how long a shared flow is listed); false shares nothing")
	flag.DurationVar(&o.shareFlowsLate, "bgp-share-flows-late", speaker.DefaultShareFlowsLate,
		"how long after this node's BGP routes change for a drain or an uncordon the nodes share their flows a last time: connections opened before the routers applied the change are listed then; longer for routers slow to program their forwarding tables")
	flag.UintVar(&o.handoffSlotMask, "handoff-slot-mask", uint(handoff.Defaults.SlotMask),
		"the contiguous bits of the packet and connection mark that say which node a shared flow is passed on to (one value per node address, and policy-routing tables 3581 onwards); must not overlap kube-proxy's, the CNI's or a mesh's marks; 0 passes no flow on by flow (--bgp-share-flows has no effect)")
}

// bindProbeFlags binds the Lease's, the self-check's and the conflict probes' flags to o.
func bindProbeFlags(o *options) {
	flag.StringVar(&o.leaseNamespace, "namespace", os.Getenv("POD_NAMESPACE"),
		"the speakers' namespace, where this speaker renews its Lease (default $POD_NAMESPACE, from the downward API); empty renews none")
	flag.DurationVar(&o.leaseRenew, "lease-renew-interval", speaker.DefaultLeaseRenew,
		"how often this speaker renews its Lease; the controller counts it out of the Services' conditions three intervals after the last renewal (0 renews none)")
	o.selfCheck = selfcheck.DefaultOptions
	flag.DurationVar(&o.selfCheck.Interval, "self-check-interval", o.selfCheck.Interval, "how often the addresses other nodes answer for are probed (ARP) to report who answers; 0 switches the self-check off")
	flag.Float64Var(&o.selfCheck.Rate, "self-check-rate", o.selfCheck.Rate, "self-check probes per second at most")
	flag.DurationVar(&o.selfCheck.Wait, "self-check-wait", o.selfCheck.Wait, "how long answers to one self-check probe are collected")
	o.conflicts = speaker.DefaultConflictProbing
	flag.DurationVar(&o.conflicts.Interval, "conflict-probe-interval", o.conflicts.Interval,
		"how often the addresses pools hand out next are probed (ARP probe from 0.0.0.0, DAD-style NDP) for foreign hosts already using them; 0 switches it off")
	flag.IntVar(&o.conflicts.Probes, "conflict-probe-count", o.conflicts.Probes, "probes per address per round (RFC 5227: 3)")
	flag.DurationVar(&o.conflicts.Spacing, "conflict-probe-spacing", o.conflicts.Spacing, "time between two probes of one address, during which answers are collected")
	flag.IntVar(&o.conflicts.ForgetAfter, "conflict-probe-forget-after", o.conflicts.ForgetAfter,
		"how many rounds in a row a foreign host must leave an address unanswered before it is no longer held back (1: the first round without an answer); a busy host can miss one round's probes")
}

func run(o options) error {
	if o.node == "" {
		return fmt.Errorf("no node name: set --node-name or NODE_NAME")
	}
	log := logf.Log.WithName("speaker").WithValues("node", o.node)
	if o.controlPlaneConfig != "" {
		return runControlPlane(o, log)
	}
	watchlist.Off()
	cfg, err := config.GetConfig()
	if err != nil {
		return err
	}
	cl, err := kubeapi.New(cfg)
	if err != nil {
		return err
	}
	bind, err := bindAddress(cl, o.node, o.bindAddr)
	if err != nil {
		return err
	}
	reg := newRegistry()
	metrics := speaker.NewMetrics(reg)
	bgpSide := newBGPSide(o, log, reg)
	cache := kubeapi.NewCache(cl, speaker.TrimForCache)
	handing, fwd, marks, byFlow, dataPath := openDataPath(o, log, reg)
	if o.daemonSet != "" && o.leaseNamespace == "" {
		return fmt.Errorf("--daemonset %q needs --namespace (default $POD_NAMESPACE), where the DaemonSet is", o.daemonSet)
	}
	s := speaker.New(speaker.Options{
		Node: o.node, LBClass: o.lbClass, Cache: cache, Client: cl, MLPort: o.port,
		Announce: l2.NewAnnouncer(log.WithName("l2"), metrics), BGP: bgpSide, Guard: fwd, DataPath: &dataPath,
		Handoff: handing, HandoffGrace: o.handoffGrace, HandoffLinger: o.handoffLinger, HandoffMarks: marks, ShareFlows: o.shareFlows && byFlow, ShareFlowsLate: o.shareFlowsLate,
		Metrics: metrics, Log: log, SelfCheck: o.selfCheck, Conflicts: o.conflicts, KeyRefresh: o.keyRefresh,
		IgnoreExcludeLabel: o.ignoreExcludeLabel, IgnoreClassless: o.ignoreClassless, RoutesUpWait: o.routesUpWait,
		DrainGrace: o.drainGrace, L2BalanceSettle: o.l2BalanceSettle, LeaseNamespace: o.leaseNamespace, LeaseRenew: o.leaseRenew, WatchLinks: true,
	})
	if o.daemonSet != "" {
		s.DaemonSet = types.NamespacedName{Namespace: o.leaseNamespace, Name: o.daemonSet}
	}
	keys, err := memberlistKeys(o, cl, s, log)
	if err != nil {
		return err
	}
	s.Group, err = membership.Start(membership.Config{Name: o.node, BindAddr: bind.String(), BindPort: o.port, Keys: keys,
		Detection: o.detection, Admit: s.Admit, Resumed: s.Resumed, Message: s.FlowMessage})
	if err != nil {
		return err
	}
	speaker.RegisterHeartbeatRefusals(reg, s.Group.HeartbeatsRefused)
	ctx := signals.SetupSignalHandler()
	if err := serveEndpoints(ctx, o, log, bind, s, prometheus.Gatherers{reg, bgpSide}); err != nil {
		return err
	}
	log.Info("starting", "memberlist", membership.HostPort(bind.String(), o.port), "detection", o.detection, "keys", keys.Count())
	cache.Start(ctx)
	// Start returns once the speaker has stopped answering and left the group.
	return s.Start(ctx)
}

// newBGPSide supervises the BGP side. GoBGP runs in a child process (or a container of its own,
// --bgp-socket): a panic or a hang there ends that process alone, and the ARP/NDP answers, which
// never depend on it, go on (docs/speaker-bgp.md).
func newBGPSide(o options, log logr.Logger, reg *prometheus.Registry) *bgpproc.Supervisor {
	bgpSide := &bgpproc.Supervisor{Log: log.WithName("bgp"), Command: bgpCommand(o.node, o.bgpMemoryLimitMiB),
		MemoryLimit: o.bgpMemoryLimitMiB << 20, Socket: o.bgpSocket, Metrics: bgpproc.NewMetrics(reg)}
	if o.bgpSocket != "" {
		bgpSide.MemoryLimit = 0 // its container's limit, which the kernel enforces
	}
	return bgpSide
}

// memberlistKeys reads the gossip keys from --memberlist-secret (made first with
// --memberlist-create-secret), and names the Secret in s for its reloads; none: gossip in clear.
func memberlistKeys(o options, cl *kubeapi.Client, s *speaker.Speaker, log logr.Logger) (membership.Keys, error) {
	var keys membership.Keys
	if o.secret == "" {
		return keys, nil
	}
	ns, name, ok := strings.Cut(o.secret, "/")
	if !ok || ns == "" || name == "" {
		return keys, fmt.Errorf("--memberlist-secret %q: want namespace/name", o.secret)
	}
	s.KeySecret = &types.NamespacedName{Namespace: ns, Name: name}
	// A missing Secret is an error rather than a silent fallback to clear text.
	if !o.createSecret {
		return speaker.ReadMemberlistKeys(context.Background(), cl, *s.KeySecret)
	}
	sec, created, err := gossipkey.Ensure(context.Background(), cl, *s.KeySecret)
	if err != nil {
		return keys, err
	}
	if created {
		log.Info("created the memberlist key Secret", "secret", *s.KeySecret)
	}
	return speaker.MemberlistKeys(sec)
}

// serveEndpoints serves the metrics (of metrics), the probes (of s) and pprof, as the flags
// say, until ctx ends.
func serveEndpoints(ctx context.Context, o options, log logr.Logger, bind netip.Addr, s *speaker.Speaker, metrics prometheus.Gatherers) error {
	for _, srv := range []struct {
		name, addr string
		mux        *http.ServeMux
	}{
		{"metrics", o.metricsAddr, metricsMux(metrics)},
		{"probes", o.probeAddr, probesMux(map[string]healthz.Checker{"main-loop": s.Alive}, map[string]healthz.Checker{"synced-and-joined": s.Ready, "bgp-sessions": s.RoutesUp})},
		{"pprof", o.pprofAddr, pprofMux()},
	} {
		addr, err := onNode(srv.addr, bind)
		if err != nil {
			return fmt.Errorf("%s server address %q: %w", srv.name, srv.addr, err)
		}
		if err := serve(ctx, log, srv.name, addr, srv.mux); err != nil {
			return fmt.Errorf("%s server: %w", srv.name, err)
		}
	}
	return nil
}

// bindAddress is where gossip binds: the flag's address, else the Node's first InternalIP. The
// other speakers admit this node only from one of its InternalIP addresses, so a wildcard
// (memberlist would advertise an address of its own choosing) is refused.
func bindAddress(r *kubeapi.Client, node, flagValue string) (netip.Addr, error) {
	if flagValue != "" {
		a, err := netip.ParseAddr(flagValue)
		if err != nil {
			return a, fmt.Errorf("--memberlist-bind-address: %w", err)
		}
		if a.IsUnspecified() {
			return a, fmt.Errorf("--memberlist-bind-address %s: give one of node %s's InternalIP addresses, not a wildcard", a, node)
		}
		return a, nil
	}
	var n corev1.Node
	if err := r.Get(context.Background(), types.NamespacedName{Name: node}, &n); err != nil {
		return netip.Addr{}, fmt.Errorf("no --memberlist-bind-address nor HOST_IP, and reading Node %s for its InternalIP: %w", node, err)
	}
	if ips := rules.InternalIPs(&n); len(ips) > 0 {
		return ips[0], nil
	}
	return netip.Addr{}, fmt.Errorf("no --memberlist-bind-address nor HOST_IP, and Node %s has no InternalIP", node)
}

// openDataPath opens the hand-off and the forwarding guard as the flags ask, and says in the
// Speaker's DataPath condition what the node lacks of its packet path: a capability or
// nf_tables (status.DataPath). A failure is logged, and the speaker runs on without them.
// It returns the hand-off's HandoffMarks condition and whether it hands off by flow too
// (openHandoff).
func openDataPath(o options, log logr.Logger, reg *prometheus.Registry) (handing speaker.Handoff, fwd speaker.Guard, marks *metav1.Condition, byFlow bool, dataPath metav1.Condition) {
	var exempt uint32
	path := status.DataPathFacts{Guard: o.forwardGuard, Handoff: o.handoffGrace > 0}
	if procStatus, err := os.ReadFile("/proc/self/status"); err == nil {
		path.NetRaw, path.NetAdmin = status.HeldCapabilities(string(procStatus))
	}
	h, marks, byFlow, err := openHandoff(o, log)
	if err == nil && h != nil {
		handing, exempt = h, uint32(o.handoffMark) // every flow it picks up has the bit in its connection mark
		speaker.RegisterHandoffCounts(reg, h.Counts, h.FlowCounts, h.HeldBackCount)
	} else if marks != nil && (marks.Reason == v1alpha1.ReasonMarksUnreadable || marks.Reason == v1alpha1.ReasonHandoffFailed) {
		path.HandoffErr = err // nftables refused, not a mark in use (that is HandoffMarks' news alone)
	}
	if o.forwardGuard {
		if g, err := guard.Open(exempt); err != nil {
			path.GuardErr = err
			log.Error(err, "no forwarding guard: untranslated packets to announced addresses will be routed back out (the speaker needs CAP_NET_ADMIN and the kernel nf_tables; --forward-guard=false silences this)")
		} else {
			fwd = g
			speaker.RegisterGuardDrops(reg, g.Dropped)
		}
	}
	dataPath = status.DataPath(path)
	if dataPath.Status != metav1.ConditionTrue {
		log.Error(nil, "the speaker lacks part of its packet path", "reason", dataPath.Reason, "message", dataPath.Message)
	}
	return handing, fwd, marks, byFlow, dataPath
}

// openHandoff opens the hand-off when --l2-handoff-grace is above 0 and its mark bit is no
// other rule's on the node (by flow too when its slot bits are no other rule's either: byFlow),
// and returns the Speaker's HandoffMarks condition; otherwise it removes what an earlier run
// left. A failure is logged, and the speaker runs on without it.
func openHandoff(o options, log logr.Logger) (h *handoff.Handoff, marks *metav1.Condition, byFlow bool, err error) {
	cfg := handoff.Defaults
	cfg.Mark, cfg.SlotMask = uint32(o.handoffMark), uint32(o.handoffSlotMask)
	if o.handoffGrace <= 0 {
		return nil, nil, false, handoff.Cleanup(cfg, true)
	}
	uses, err := cfg.SeenMarks(handoff.TableName, guard.TableName)
	check := cfg.CheckMarks(uses)
	cond := speaker.HandoffMarksCondition(cfg, check, err, nil)
	if err != nil || !check.Handoff {
		log.Error(err, "no L2 hand-off: connections open through a node that stays up are reset when their address moves", "reason", cond.Reason, "message", cond.Message)
		// An earlier run's table and rules go; the entries with the bit may be another's.
		return nil, &cond, false, errors.Join(err, handoff.Cleanup(cfg, false))
	}
	if !check.Flows {
		log.Info("no BGP flow sharing", "reason", cond.Reason, "message", cond.Message)
		cfg.SlotMask = 0
	}
	if h, err = handoff.Open(cfg); err != nil {
		log.Error(err, "no L2 hand-off: connections open through a node that stays up are reset when their address moves (the speaker needs CAP_NET_ADMIN and the kernel nf_tables; --l2-handoff-grace=0 silences this)")
		cond = speaker.HandoffMarksCondition(cfg, check, nil, err)
		return nil, &cond, false, err
	}
	return h, &cond, check.Flows, nil
}
