package speaker

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/kubeapi"
	"github.com/portico-lb/portico/speaker/l2"
	"github.com/portico-lb/portico/speaker/membership"
	"github.com/portico-lb/portico/speaker/plan"
	"github.com/portico-lb/portico/speaker/selfcheck"
)

// Speaker is one node's speaker: the loop that turns the cluster's objects and the gossip
// group's members into a plan (package plan) and drives the sides that carry it out: the L2
// side (answerer: ARP/NDP), the BGP side (advertiser: the sessions and routes) and the
// reporting (reporter: the Speaker status and the events). A change to Services or their
// EndpointSlices plans those Services again (Planner.Update), any other watched change and
// every membership change the whole plan; changes arriving together are planned in one pass
// (reconcile.go).
type Speaker struct {
	Node    string
	LBClass string
	Cache   *kubeapi.Cache
	Client  *kubeapi.Client // writes, and reads that must be fresh (the Speaker object before its update), go straight to the apiserver
	Group   *membership.Group
	MLPort  int // peers' memberlist port, to join them at their nodes' InternalIP
	// KeySecret names the memberlist Secret, read again every KeyRefresh; nil: gossip in clear.
	KeySecret  *types.NamespacedName
	KeyRefresh time.Duration
	Announce   Announcer
	BGP        Router
	Guard      Guard // nil: none
	// DataPath is the Speaker's DataPath condition, found at start (status.DataPath); nil: none.
	DataPath *metav1.Condition
	// Handoff passes the flows of addresses this node took over to their previous owner for
	// HandoffGrace after the move, and for HandoffLinger after that owner answers again
	// (takeovers.go; zero: DefaultHandoffLinger); nil: none.
	Handoff       Handoff
	HandoffGrace  time.Duration
	HandoffLinger time.Duration
	// HandoffMarks is the HandoffMarks condition the Speaker status carries, and tells once by
	// an event when False (handoffmarks.go); nil: none (the hand-off is off).
	HandoffMarks *metav1.Condition
	// ShareFlows: before this node changes its place in its BGP addresses' ECMP sets (a
	// drain, an uncordon), the members share their flows through the hand-off
	// (flowshare.go); needs Handoff.
	ShareFlows bool
	// ShareFlowsLate is how long after a change of this node's place the members share their
	// flows a last time (flowshare.go; zero: DefaultShareFlowsLate).
	ShareFlowsLate time.Duration
	Metrics        *Metrics
	Log            logr.Logger
	// IgnoreExcludeLabel lets nodes labelled exclude-from-external-load-balancers announce.
	IgnoreExcludeLabel bool
	// IgnoreClassless leaves Services without a loadBalancerClass to another load balancer.
	IgnoreClassless bool
	// L2BalanceSettle is how long every speaker must have been alive and every L2 address held
	// where it is before one moves for balance (election.Balance); zero balances nothing.
	L2BalanceSettle time.Duration
	// DrainGrace is how long a cordoned node advertises its routes with GRACEFUL_SHUTDOWN
	// before it withdraws them (drain.go); zero withdraws at once.
	DrainGrace time.Duration
	// SelfCheck paces the probes of addresses other nodes own; a zero Interval switches it off.
	SelfCheck selfcheck.Options
	// Conflicts paces the probes of the addresses pools hand out next (conflicts.go).
	Conflicts ConflictProbing
	// RoutesUpWait bounds how long readiness waits for the BGP sessions that carry this node's
	// routes after the start (RoutesUp); zero does not wait for them.
	RoutesUpWait time.Duration
	// LeaseNamespace is where this speaker renews its Lease every LeaseRenew (lease.go); ""
	// renews none, and then the controller counts every Speaker as live only while no speaker
	// holds a Lease.
	LeaseNamespace string
	LeaseRenew     time.Duration
	// DaemonSet names the speakers' DaemonSet, read at shutdown: deleted, it is an uninstall,
	// whose BGP routes are withdrawn at once (shutdown.go); zero: not read.
	DaemonSet types.NamespacedName
	// WatchLinks follows this node's links for the subnets it can answer on (subnets.go);
	// false (a recording Announcer) reports none, and the others take it to answer anywhere.
	WatchLinks bool

	// The sides the loop drives, made by Start.
	answerer   *answerer
	advertiser *advertiser
	reporter   *reporter
	takeovers  *takeovers

	kick       chan struct{}
	cause      atomic.Value // string: why the next reconcile runs
	lostAt     atomic.Int64 // unix nanos of the latest member loss not yet acted upon
	joined     atomic.Bool  // a member joined since the latest reconcile
	joinedAt   atomic.Int64 // unix nanos of the latest member's join, or this speaker's start (plan.World.MembersSince)
	joining    atomic.Bool
	pending    pendingReplan
	planner    *plan.Planner
	secrets    secretCache         // the BGPPeers' password Secrets (secrets.go)
	vrfAbsent  atomic.Bool         // a BGPPeer names a VRF device this node lacks (vrfs.go)
	cordons    cordons             // when each cordoned node was first seen cordoned (drain.go)
	flowRounds flowRounds          // the flow-sharing rounds this node awaits acks of (flowshare.go)
	flowShare  *v1alpha1.FlowShare // the latest round asked before a change, for the status; the loop's alone
	loopAt     atomic.Int64        // unix nanos of the main loop's latest turn; 0 until it starts (probes.go)
	startedAt  time.Time           // when Start began (RoutesUp)
	planned    atomic.Bool         // the first plan has been applied (RoutesUp)

	subnets    atomic.Pointer[[]netip.Prefix] // where this node can answer (watchSubnets); nil: not followed
	synced     atomic.Bool                    // the cache has synced: Admit can check claims
	refused    refusals
	keyProblem string // why the memberlist Secret's keys were not applied; "" when they were
}

// Announcer answers ARP/NDP for the addresses this node owns: an *l2.Announcer, or what
// records the wanted addresses where only the API load is of interest (the scale simulation).
type Announcer interface {
	Set(want l2.Want) (answered map[netip.Addr][]string, problems []error)
	Reannounce()
	// Silence stops answering at once; Close, which follows, releases the sockets.
	Silence()
	Close() error
	Interfaces() []l2.Verdict
	// SolicitNeighbour asks at once for the next hop's link-layer address towards a member
	// heard again after a partition, when the kernel has not resolved it (l2.SolicitNeighbour).
	SolicitNeighbour(ip netip.Addr) (asked bool, err error)
}

// Router holds this node's BGP sessions and routes: a *bgpproc.Supervisor (GoBGP in a child
// process) or a *bgp.Sessions (in this one), or a recorder as for Announcer. SetOnChange, called
// before the first Apply, gives it the function it calls when a session changes state.
type Router interface {
	Apply(ctx context.Context, d plan.BGP) []error
	Close()
	States() map[string]plan.SessionState
	SetOnChange(func(before, after plan.SessionState))
}

// Start runs until ctx ends; then it stops answering at once and leaves the group, so the other
// speakers take over without waiting for failure detection.
func (s *Speaker) Start(ctx context.Context) error {
	s.startedAt = time.Now()
	s.joinedAt.Store(s.startedAt.UnixNano())
	s.kick = make(chan struct{}, 1)
	s.reporter = newReporter(s)
	s.takeovers = newTakeovers(s.Handoff, plan.TakeoverTimes{Grace: s.HandoffGrace, Linger: cmp.Or(s.HandoffLinger, DefaultHandoffLinger)}, s.Log, s.Metrics)
	s.answerer = &answerer{announce: s.Announce, node: s.Node, metrics: s.Metrics, log: s.Log, tell: s.reporter,
		owned: map[netip.Addr]plan.Claim{}}
	s.advertiser = &advertiser{router: s.BGP, node: s.Node, log: s.Log, tell: s.reporter, trigger: s.trigger, standing: plan.UnknownStanding,
		routed: map[netip.Addr]plan.BGPClaim{}}
	s.BGP.SetOnChange(func(before, after plan.SessionState) { s.advertiser.sessionChanged(ctx, before, after) })
	// Events and the status go to the apiserver from their own goroutines: a slow or
	// unreachable apiserver must never delay reacting to a member's loss.
	s.reporter.start(ctx)
	for _, obj := range []runtime.Object{&corev1.Service{}, &discoveryv1.EndpointSlice{}, &corev1.Node{},
		&v1alpha1.L2Advertisement{}, &v1alpha1.IPAddressPool{}, &v1alpha1.BGPPeer{}, &v1alpha1.BGPAdvertisement{}, &v1alpha1.BFDProfile{}} {
		if err := s.Cache.AddEventHandler(obj, s.changeHandler(obj)); err != nil {
			return err
		}
	}
	if err := s.Cache.AddEventHandler(&v1alpha1.Speaker{}, s.speakersHandler()); err != nil {
		return err
	}
	if s.WatchLinks {
		hold := &l2.HoldDown{Hold: subnetHold}
		s.readSubnets(hold)
		go s.watchSubnets(ctx, hold)
	}
	if !s.Cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("cache never synced")
	}
	s.synced.Store(true)
	s.Metrics.keys.Set(float64(s.Group.Keys().Count()))
	// A speaker that answered before joining would see itself alone and claim every address,
	// so the first join completes before the first plan.
	s.joinPeers(ctx, true)
	go s.renewLease(ctx)
	go s.runSelfCheck(ctx)
	go s.runConflictProbes(ctx)
	rejoin := time.NewTicker(500 * time.Millisecond)
	defer rejoin.Stop()
	// Re-reads BGP password Secrets (they are not watched), and VRF devices still missing.
	refresh := time.NewTicker(secretRefresh)
	defer refresh.Stop()
	var reloadKeys <-chan time.Time
	if s.KeySecret != nil {
		t := time.NewTicker(s.KeyRefresh)
		defer t.Stop()
		reloadKeys = t.C
	}
	s.replanAll("config")
	for {
		s.turned()
		select {
		case <-ctx.Done():
			s.shutdown()
			return nil
		case ch := <-s.Group.Changes():
			s.Log.Info("membership changed", "member", ch.Name, "alive", ch.Joined, "how", ch.How)
			if ch.Joined {
				s.joined.Store(true)
				s.joinedAt.Store(time.Now().UnixNano())
				s.replanAll("member-joined")
			} else {
				s.Metrics.membersLost.Inc()
				s.lostAt.CompareAndSwap(0, ch.At.UnixNano())
				s.replanAll("member-lost")
			}
		case <-rejoin.C:
			// Rejoining nodes that are not members heals a partition within half a second
			// (memberlist alone would wait for its dead-node gossip, 30 s by default), which
			// bounds how long two nodes answer for one address afterwards.
			s.joinPeers(ctx, false)
			if s.refusalsExpired() {
				s.trigger(causeStatus)
			}
		case <-reloadKeys:
			s.reloadKeys(ctx)
		case <-refresh.C:
			if s.secrets.held() || s.vrfAbsent.Load() {
				s.replanAll("secret-refresh")
			}
		case <-s.kick:
			s.reconcile(ctx)
		}
	}
}

func (s *Speaker) trigger(cause string) {
	s.reporter.stir()
	if cause == causeStatus {
		cause = "" // only the status changes: whatever cause is pending stays
	}
	// member-lost wins over a config cause queued before it, so failovers are counted as such.
	if prev, _ := s.cause.Load().(string); cause != "" && (prev != "member-lost" || cause == "member-lost") {
		s.cause.Store(cause)
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// joinPeers contacts the nodes whose speakers are not members, at their InternalIP; wait makes
// it return only when the attempt is over.
func (s *Speaker) joinPeers(ctx context.Context, wait bool) {
	if !s.joining.CompareAndSwap(false, true) {
		return // a join is still waiting on an unreachable peer
	}
	var nodes corev1.NodeList
	if err := s.Cache.List(ctx, &nodes); err != nil {
		s.joining.Store(false)
		return
	}
	var peers []string
	for _, n := range nodes.Items {
		if n.Name == s.Node || s.Group.IsAlive(n.Name) {
			continue
		}
		for _, ip := range rules.InternalIPs(&n) {
			peers = append(peers, membership.HostPort(ip.String(), s.MLPort))
		}
	}
	join := func() {
		defer s.joining.Store(false)
		if err := s.Group.Join(peers); err != nil {
			s.Log.V(1).Info("joining peers", "peers", peers, "error", err.Error())
		}
	}
	if wait {
		join()
		return
	}
	go join()
}
