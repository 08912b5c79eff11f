package speaker

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/l2"
	"github.com/portico-lb/portico/speaker/membership"
	"github.com/portico-lb/portico/speaker/plan"
)

// Speaker is one node's speaker: the loop that turns the cluster's objects and the gossip
// group's members into a plan and the plan's actions (package plan), and the sides that carry
// them out: the forwarding guard, the hand-off's takeovers, the L2 side (answerer: ARP/NDP),
// flow sharing, the BGP side (advertiser: the sessions and routes) and the reporting (reporter:
// the Speaker status and the events). A change to Services or their EndpointSlices plans those
// Services again (Planner.Update), any other watched change and every membership change the
// whole plan; changes arriving together are planned in one pass (reconcile.go).
type Speaker struct {
	Options
	// Group is the gossip group, started with the Speaker's Admit, Resumed and FlowMessage
	// before Start.
	Group *membership.Group

	inbox   inbox         // what the next pass plans, and why (inbox.go)
	reads   reads         // what the plan reads besides the cache: Secrets, VRFs, cordons, links (world.go)
	planner *plan.Planner // made by the first pass
	// The sides that carry the plan's actions out, made by Start.
	answerer   *answerer
	advertiser *advertiser
	takeovers  *takeovers // nil: no hand-off
	flows      flowSharing
	reporter   *reporter
	gossip     gossipState // admission of members, the gossip keys (gossip.go)
	health     health      // what the probes read (readiness.go)
}

// New is a speaker with options o; its Group is set before Start.
func New(o Options) *Speaker { return &Speaker{Options: o} }

// Announcer answers ARP/NDP for the addresses this node owns: an *l2.Announcer, or what
// records the wanted addresses where only the API load is of interest (the scale simulation).
type Announcer interface {
	Set(want l2.Want) (answered map[netip.Addr][]string, problems []error)
	Reannounce()
	// AnnounceOnce announces addresses again, as their gratuitousInterval asks.
	AnnounceOnce(ips []netip.Addr) []error
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
	s.health.startedAt = time.Now()
	s.inbox.joinedAt.Store(s.health.startedAt.UnixNano())
	s.inbox.kick = make(chan struct{}, 1)
	s.makeSides(ctx)
	if err := s.watch(ctx); err != nil {
		return err
	}
	if !s.Cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("cache never synced")
	}
	s.gossip.synced.Store(true)
	s.Metrics.keys.Set(float64(s.Group.Keys().Count()))
	// A speaker that answered before joining would see itself alone and claim every address,
	// so the first join completes before the first plan.
	s.joinPeers(ctx, true)
	if renewsLease(s.Options) {
		go newLeaseRenewer(s.Options, clock.RealClock{}).run(ctx)
	}
	go s.answerer.repeat.run(ctx)
	go s.runSelfCheck(ctx)
	go s.runConflictProbes(ctx)
	s.replanAll("config")
	s.loop(ctx)
	return nil
}

// makeSides makes the sides that carry the plan's actions out.
func (s *Speaker) makeSides(ctx context.Context) {
	s.reporter = newReporter(s)
	s.takeovers = newTakeovers(s.Handoff, plan.TakeoverTimes{Grace: s.HandoffGrace, Linger: cmp.Or(s.HandoffLinger, DefaultHandoffLinger)}, s.Log, s.Metrics)
	s.answerer = &answerer{announce: s.Announce, node: s.Node, metrics: s.Metrics, log: s.Log, tell: s.reporter,
		owned: map[netip.Addr]plan.Claim{}, repeat: newRepeater(s.Announce.AnnounceOnce, s.Log)}
	s.advertiser = &advertiser{router: s.BGP, node: s.Node, log: s.Log, tell: s.reporter, trigger: s.trigger, standing: plan.UnknownStanding,
		routed: map[netip.Addr]plan.BGPClaim{}}
	s.BGP.SetOnChange(func(before, after plan.SessionState) { s.advertiser.sessionChanged(ctx, before, after) })
	// Events and the status go to the apiserver from their own goroutines: a slow or
	// unreachable apiserver must never delay reacting to a member's loss.
	s.reporter.start(ctx)
}

// watch has the cache's informers and, when followed, this node's links fill the inbox.
func (s *Speaker) watch(ctx context.Context) error {
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
	return nil
}

// loop turns until ctx ends, then stops the speaker: each turn takes one of the membership's
// changes, a timer's tick or the inbox's kick, which runs a pass (reconcile).
func (s *Speaker) loop(ctx context.Context) {
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
	for {
		s.turned()
		select {
		case <-ctx.Done():
			s.shutdown()
			return
		case ch := <-s.Group.Changes():
			s.membershipChanged(ch)
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
			if s.reads.secrets.held() || s.reads.vrfAbsent.Load() {
				s.replanAll("secret-refresh")
			}
		case <-s.inbox.kick:
			s.reconcile(ctx)
		}
	}
}

// membershipChanged notes a member's join or loss in the inbox: the next pass plans everything.
func (s *Speaker) membershipChanged(ch membership.Change) {
	s.Log.Info("membership changed", "member", ch.Name, "alive", ch.Joined, "how", ch.How)
	if ch.Joined {
		s.inbox.joined.Store(true)
		s.inbox.joinedAt.Store(time.Now().UnixNano())
		s.replanAll("member-joined")
		return
	}
	s.Metrics.membersLost.Inc()
	s.inbox.lostAt.CompareAndSwap(0, ch.At.UnixNano())
	s.replanAll("member-lost")
}

// joinPeers contacts the nodes whose speakers are not members, at their InternalIP; wait makes
// it return only when the attempt is over.
func (s *Speaker) joinPeers(ctx context.Context, wait bool) {
	if !s.gossip.joining.CompareAndSwap(false, true) {
		return // a join is still waiting on an unreachable peer
	}
	var nodes corev1.NodeList
	if err := s.Cache.List(ctx, &nodes); err != nil {
		s.gossip.joining.Store(false)
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
		defer s.gossip.joining.Store(false)
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
