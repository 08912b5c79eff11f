package speaker

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/events"
	"github.com/portico-lb/portico/speaker/kubeapi"
	"github.com/portico-lb/portico/speaker/l2"
	"github.com/portico-lb/portico/speaker/plan"
	"github.com/portico-lb/portico/speaker/status"
)

// reporter is the speaker's reporting: the Speaker status, written from its own goroutine
// (a newer report replaces one not yet written), and the events (Announced for Services,
// SessionUp and SessionDown for BGPPeers), sent once the speaker is quiet (busy).
type reporter struct {
	node string
	// ignoreExcludeLabel is the speaker's --ignore-exclude-lb-label, reported so that the
	// controller elects as the speakers do.
	ignoreExcludeLabel bool
	client             *kubeapi.Client
	cache              *kubeapi.Cache
	log                logr.Logger
	metrics            *Metrics
	trigger            func(cause string) // the loop's: a report to write without a plan to change

	events    *events.Sender
	busy      *events.Lull // stirred by every change and Speaker status write
	view      status.View
	reports   chan status.Report // the latest status to write; a newer one replaces an unwritten one
	macs      []string           // hardwareAddrs as read at macsAt
	macsAt    time.Time
	macsAgain bool                            // a re-read is on its way
	checks    atomic.Pointer[selfCheckReport] // the latest self-check results (selfcheck.go)
	foreign   atomic.Pointer[foreignRound]    // the conflict prober's latest round (conflicts.go)

	handoffMarks *metav1.Condition // the Speaker's HandoffMarks condition (nil: none)
	marksTold    bool              // a False one's event sent
	dataPath     *metav1.Condition // Speaker.DataPath
}

func newReporter(s *Speaker) *reporter {
	r := &reporter{node: s.Node, ignoreExcludeLabel: s.IgnoreExcludeLabel, client: s.Client, cache: s.Cache, log: s.Log, metrics: s.Metrics, trigger: s.trigger,
		busy: events.NewLull(eventLull), reports: make(chan status.Report, 1), handoffMarks: s.HandoffMarks,
		dataPath: s.DataPath}
	r.events = events.NewSender(events.Options{Create: s.Client.CreateEvent, Scheme: s.Client.Scheme(), Controller: "portico-speaker",
		Instance: "portico-speaker-" + s.Node, Quiet: r.busy.Quiet, Metrics: s.Metrics.events})
	return r
}

// eventLull is how long the speaker must have had no change to react to and no Speaker status
// to write before its events go out. A burst's changes arrive milliseconds apart (BenchmarkBGP's
// 3000 writes: 4 to 10 ms apart on average), and during one the status is written at least
// status.WriteInterval apart, so twice that interval without either means the burst is over;
// the events then no longer compete with the writes that bring the addresses and routes.
// Measured there: during the burst only the overdue events went (about ten a second after the
// first 10 s), the rest after it.
const eventLull = 2 * status.WriteInterval

// start sends the events and writes the reports until ctx ends.
func (r *reporter) start(ctx context.Context) {
	go func() { _ = r.events.Start(ctx) }()
	go r.writeStatuses(ctx)
}

// stir notes a change: the events wait for a lull.
func (r *reporter) stir() { r.busy.Stir() }

// reconciled is what one reconcile hands the reporter.
type reconciled struct {
	plan       plan.Plan
	problems   []string                // the plan's and the sides'
	answered   map[netip.Addr][]string // the interfaces each L2 address is answered on
	interfaces []l2.Verdict            // the Announcer's view of this node's interfaces
	subnets    []string                // where this node can answer (nil: not followed)
	// mine and routed are the addresses whose L2 or BGP entries may have changed, prefixes the
	// routes that did (all: every one may have).
	mine, routed []netip.Addr
	prefixes     []netip.Prefix
	all          bool
	sessions     map[string]plan.SessionState
	takeovers    []v1alpha1.Handoff
	flowShare    *v1alpha1.FlowShare
}

// report queues the status of a reconcile, replacing any report not yet written.
func (r *reporter) report(rc reconciled) {
	r.view.Update(rc.plan, rc.answered, rc.mine, rc.routed, rc.prefixes, rc.all, time.Now())
	rep := r.view.Report(rc.plan, rc.problems)
	// Reading every link costs more than planning a change, so it is done at most once a
	// second, and once more a second after a change that found them fresh.
	if now := time.Now(); now.Sub(r.macsAt) >= time.Second {
		r.macs, r.macsAt, r.macsAgain = hardwareAddrs(), now, false
	} else if !r.macsAgain {
		r.macsAgain = true
		time.AfterFunc(r.macsAt.Add(time.Second).Sub(now), func() { r.trigger(causeStatus) })
	}
	rep.Status.HardwareAddrs = r.macs
	rep.Status.IgnoreExcludeLabel = r.ignoreExcludeLabel
	if c := r.checks.Load(); c != nil {
		rep.Status.SelfChecks, rep.Status.OmittedSelfChecks = c.checks, c.omitted
	}
	r.foreign.Load().setForeign(&rep.Status)
	rep.Status.Sessions, rep.Status.BGPPeersUp = sessionStatus(rc.sessions, rc.plan.BFDProblems)
	rep.Status.BGP = status.BGPPeers(rc.plan.BGP, rc.sessions) // its routes are listed when it is written
	rep.Status.Interfaces, rep.Status.OmittedInterfaces = interfaceStatus(rc.interfaces)
	rep.Status.Subnets = rc.subnets
	rep.Status.Handoffs = rc.takeovers
	rep.Status.FlowShare = rc.flowShare
	rep.StrictARP = strictARPCondition(rc.interfaces, "/proc/sys")
	select {
	case <-r.reports:
	default:
	}
	r.reports <- rep
}

// services tells each of the Services, by a Normal "Announced" event, what this node does for them.
func (r *reporter) services(ctx context.Context, services []string, format string, args ...any) {
	for _, key := range services {
		ns, name, _ := strings.Cut(key, "/")
		var svc corev1.Service
		if err := r.cache.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &svc); err != nil {
			continue
		}
		r.events.Eventf(&svc, nil, corev1.EventTypeNormal, "Announced", "Announce", format, args...)
	}
}

// session tells the BGPPeer of a session that went up or down.
func (r *reporter) session(ctx context.Context, st plan.SessionState, up bool) {
	var peer v1alpha1.BGPPeer
	if err := r.cache.Get(ctx, types.NamespacedName{Name: st.Peer}, &peer); err != nil {
		return
	}
	if up {
		r.events.Eventf(&peer, nil, corev1.EventTypeNormal, "SessionUp", "Peer", "node %s: BGP session with %s established", r.node, st.Address)
	} else {
		r.events.Eventf(&peer, nil, corev1.EventTypeWarning, "SessionDown", "Peer", "node %s: BGP session with %s down (now %s)", r.node, st.Address, st.State)
	}
}

// writeStatuses writes reports until ctx ends, retrying a failed write every 500 ms unless a
// newer report arrives first.
func (r *reporter) writeStatuses(ctx context.Context) {
	var written *status.Report
	for {
		var rep status.Report
		select {
		case <-ctx.Done():
			return
		case rep = <-r.reports:
		}
		for {
			if written != nil && status.Same(*written, rep) {
				break
			}
			if rep.Listed != 0 {
				rep.Listed = r.view.Fill(&rep.Status)
			}
			r.busy.Stir() // events wait for the write and a lull after it
			err := r.writeStatus(ctx, rep)
			r.busy.Stir()
			if err == nil {
				written = &rep
				// At most one write per WritePause: the status holds one entry per address,
				// and while many Services change it would otherwise be rewritten (and sent
				// through etcd) for every one of them. Newer reports replace the waiting one
				// meanwhile.
				t := time.NewTimer(status.WritePause(rep.Status))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				break
			}
			r.log.Info("writing Speaker status failed, retrying", "error", err.Error())
			t := time.NewTimer(500 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case rep = <-r.reports:
				t.Stop()
			case <-t.C:
			}
		}
	}
}

// unlistL2 clears the L2 announcements from the Speaker status as the speaker stops in order:
// its addresses are taken over at once (it left the group), and a claim left behind would
// only be beaten by the takers' later ones (rules.L2Owner), or, should this node come back
// before they are written, take its addresses back. Tried once, within a second: a killed
// speaker leaves its status as it was anyway.
func (r *reporter) unlistL2() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	sp := &v1alpha1.Speaker{}
	if err := r.client.Get(ctx, types.NamespacedName{Name: r.node}, sp); err != nil {
		if !apierrors.IsNotFound(err) {
			r.log.Error(err, "reading the Speaker to clear its L2 announcements")
		}
		return
	}
	sp.Status.Announcements = slices.DeleteFunc(sp.Status.Announcements, func(a v1alpha1.Announcement) bool { return a.Protocol == v1alpha1.ProtocolL2 })
	sp.Status.L2Announcements = 0
	if err := r.client.UpdateStatus(ctx, sp); err != nil {
		r.log.Error(err, "clearing the Speaker's L2 announcements")
	}
}

func (r *reporter) writeStatus(ctx context.Context, rep status.Report) error {
	sp := &v1alpha1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: r.node}}
	if err := r.client.Get(ctx, types.NamespacedName{Name: sp.Name}, sp); apierrors.IsNotFound(err) {
		if err := r.client.Create(ctx, sp); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	st := rep.Status
	st.Conditions = slices.Clone(sp.Status.Conditions)
	setCondition(&st.Conditions, rep.Ready, sp.Generation)
	if rep.StrictARP != nil {
		setCondition(&st.Conditions, *rep.StrictARP, sp.Generation)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionStrictARP)
	}
	if r.handoffMarks != nil {
		setCondition(&st.Conditions, *r.handoffMarks, sp.Generation)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionHandoffMarks)
	}
	if r.dataPath != nil {
		setCondition(&st.Conditions, *r.dataPath, sp.Generation)
	}
	sp.Status = st
	r.metrics.speakerConditions(st.Conditions)
	if err := r.client.UpdateStatus(ctx, sp); err != nil {
		return err
	}
	if c := r.handoffMarks; c != nil && c.Status == metav1.ConditionFalse && !r.marksTold {
		r.marksTold = true // told once per start: the condition stays
		r.events.Eventf(sp, nil, corev1.EventTypeWarning, c.Reason, "Handoff", "node %s: %s", r.node, c.Message)
	}
	return nil
}

// interfaceStatus lists the interfaces that answer first, then those left out with the reason,
// within the API's cap (the rest counted).
func interfaceStatus(verdicts []l2.Verdict) ([]v1alpha1.SpeakerInterface, int32) {
	out := make([]v1alpha1.SpeakerInterface, 0, len(verdicts))
	for _, answers := range []bool{true, false} {
		for _, v := range verdicts {
			if v.Answers == answers {
				out = append(out, v1alpha1.SpeakerInterface{Name: v.Name, Answers: v.Answers, Reason: v.Reason})
			}
		}
	}
	if len(out) > v1alpha1.MaxSpeakerInterfaces {
		return out[:v1alpha1.MaxSpeakerInterfaces], int32(len(out) - v1alpha1.MaxSpeakerInterfaces)
	}
	return out, 0
}

// sessionStatus lists the sessions by peer name, with why one runs without the BFD its peer
// asks for, and counts the Established ones.
func sessionStatus(states map[string]plan.SessionState, noBFD map[string]plan.BFDProblem) ([]v1alpha1.PeerSession, int32) {
	out := make([]v1alpha1.PeerSession, 0, len(states))
	up := int32(0)
	for _, name := range slices.Sorted(maps.Keys(states)) {
		st := states[name]
		ps := v1alpha1.PeerSession{Peer: name, State: st.State, Since: &metav1.Time{Time: st.Since},
			BFDReason: noBFD[name].Reason, BFDMessage: noBFD[name].Message}
		switch {
		case st.Established():
			up++
		case st.Message != "":
			ps.Message, ps.Reason = st.Message, st.Reason
		default:
			ps.Message = fmt.Sprintf("no session with %s yet (%s)", st.Address, st.State)
		}
		out = append(out, ps)
	}
	return out, up
}

func setCondition(conds *[]metav1.Condition, c metav1.Condition, gen int64) {
	c.ObservedGeneration = gen
	c.LastTransitionTime = metav1.Now()
	for i := range *conds {
		if (*conds)[i].Type == c.Type {
			if (*conds)[i].Status == c.Status {
				c.LastTransitionTime = (*conds)[i].LastTransitionTime
			}
			(*conds)[i] = c
			return
		}
	}
	*conds = append(*conds, c)
}
