package speaker

import (
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/speaker/kubeapi"
	"github.com/portico-lb/portico/speaker/selfcheck"
)

// Options are a speaker's configuration: its node, the clients and sides it is given, and the
// flags of portico-speaker.
type Options struct {
	Node    string
	LBClass string
	Cache   *kubeapi.Cache
	Client  *kubeapi.Client // writes, and reads that must be fresh (the Speaker object before its update), go straight to the apiserver
	MLPort  int             // peers' memberlist port, to join them at their nodes' InternalIP
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
	// before it withdraws them (plan.StopOf, plan.World.DrainGrace); zero withdraws at once.
	DrainGrace time.Duration
	// SelfCheck paces the probes of addresses other nodes own; a zero Interval switches it off.
	SelfCheck selfcheck.Options
	// Conflicts paces the probes of the addresses pools hand out next (probing.go).
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
}

// DefaultDrainGrace is how long a cordoned node advertises its routes with GRACEFUL_SHUTDOWN
// before it withdraws them (plan.World.DrainGrace): long enough for every router to receive
// the update and move new flows, short next to a drain's pod evictions (docs/speaker-bgp.md).
const DefaultDrainGrace = 30 * time.Second
