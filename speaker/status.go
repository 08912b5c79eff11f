package speaker

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/bgp"
	"github.com/portico-lb/portico/speaker/l2"
)

// statusWriteInterval is the least time between two writes of the Speaker status. A status
// listing many entries waits longer, statusWritePerEntry more for each (up to
// statusWriteMaxInterval): the apiserver decodes, validates and stores a CRD's status whole, in
// JSON, so during a burst a node listing 1000 addresses cost the apiserver more than the
// burst's own writes (BENCHMARKS.md, "The Speaker status paced by its size"). A change after a
// quiet spell is written at once; only a burst waits.
const (
	statusWriteInterval    = 500 * time.Millisecond
	statusWritePerEntry    = time.Millisecond
	statusWriteMaxInterval = 10 * time.Second
)

// writePause is the least time from a write of st to the next write.
func writePause(st v1alpha1.SpeakerStatus) time.Duration {
	n := len(st.Announcements) + len(st.SelfChecks) + len(st.ForeignAnswers)
	if st.BGP != nil {
		n += len(st.BGP.Routes)
	}
	return min(statusWriteInterval+time.Duration(n)*statusWritePerEntry, statusWriteMaxInterval)
}

type statusReport struct {
	status    v1alpha1.SpeakerStatus
	ready     metav1.Condition
	strictARP *metav1.Condition // nil: no kube-ipvs0 here
	listed    uint64            // the statusView generation of the announcements and routes (0: unknown)
}

// report queues the status of the plan with this reconcile's problems, replacing any report
// not yet written. mine and routed are the addresses whose L2 or BGP entries may have
// changed, prefixes the routes that did (all: every one may have).
func (s *Speaker) report(plan Plan, problems []string, mine, routed []netip.Addr, prefixes []netip.Prefix, all bool, sessions map[string]bgp.State) {
	s.view.update(plan, s.ifaces, mine, routed, prefixes, all)
	r := s.view.report(plan, problems)
	// Reading every link costs more than planning a change, so it is done at most once a
	// second, and once more a second after a change that found them fresh.
	if now := time.Now(); now.Sub(s.macsAt) >= time.Second {
		s.macs, s.macsAt, s.macsAgain = hardwareAddrs(), now, false
	} else if !s.macsAgain {
		s.macsAgain = true
		time.AfterFunc(s.macsAt.Add(time.Second).Sub(now), func() { s.trigger(causeStatus) })
	}
	r.status.HardwareAddrs = s.macs
	if c := s.checks.Load(); c != nil {
		r.status.SelfChecks, r.status.OmittedSelfChecks = c.checks, c.omitted
	}
	s.foreign.Load().setForeign(&r.status)
	r.status.Sessions, r.status.BGPPeersUp = sessionStatus(sessions)
	r.status.BGP = bgpPeersStatus(plan.BGP, sessions) // its routes are listed when it is written
	r.status.Interfaces, r.status.OmittedInterfaces = interfaceStatus(s.Announce.Interfaces())
	r.strictARP = strictARPCondition(s.Announce.Interfaces(), "/proc/sys")
	select {
	case <-s.reports:
	default:
	}
	s.reports <- r
}

// statusView is the Speaker status's announcements, kept between reports by address, and its
// BGP routes, by prefix: a change rewrites the entries it touched, and the lists are made only
// when the status is written (at most once per writePause), not on every change; gen counts the
// changes, so the status writer tells changed lists without comparing them. The status writer
// reads it from its own goroutine, hence the lock.
type statusView struct {
	mu         sync.Mutex
	l2, bgp    map[netip.Addr][]v1alpha1.Announcement
	routes     map[netip.Prefix][]v1alpha1.AdvertisedRoute
	aggregates map[netip.Prefix]bool // the routed prefixes of more than one address, listed here or not
	gen        uint64
}

// planStatus is what the Speaker status says of a plan: its announcements (L2 on the
// interfaces answered, then BGP), its problems, and Ready. It reads nothing else, so the L2
// transcripts print exactly what a node writes.
func planStatus(plan Plan, answered map[netip.Addr][]string) statusReport {
	var v statusView
	v.update(plan, answered, keysOf(plan.Mine, plan.Mine), keysOf(plan.Routed, plan.Routed), nil, true)
	r := v.report(plan, plan.Problems)
	r.status.BGP = bgpPeersStatus(plan.BGP, nil)
	r.listed = v.fill(&r.status)
	return r
}

// update rewrites the entries of the addresses in mine (L2) and routed (BGP) and of the routes
// (see updateRoutes); the generation moves when an entry changed.
func (v *statusView) update(plan Plan, answered map[netip.Addr][]string, mine, routed []netip.Addr, prefixes []netip.Prefix, all bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.l2 == nil {
		v.l2, v.bgp = map[netip.Addr][]v1alpha1.Announcement{}, map[netip.Addr][]v1alpha1.Announcement{}
		v.routes, v.aggregates = map[netip.Prefix][]v1alpha1.AdvertisedRoute{}, map[netip.Prefix]bool{}
		v.gen++
	}
	v.updateRoutes(plan, routed, prefixes, all)
	// One entry per Service: Services sharing an address each find themselves.
	for _, ip := range mine {
		var entries []v1alpha1.Announcement
		for _, svc := range plan.Mine[ip].Services {
			entries = append(entries, v1alpha1.Announcement{IP: ip.String(), Service: svc, Protocol: v1alpha1.ProtocolL2, Interfaces: answered[ip]})
		}
		setEntries(v, v.l2, ip, entries)
	}
	// BGP: every advertising node advertises the same, so only the teller lists an address;
	// one Service changing rewrites one Speaker, however many nodes advertise it.
	for _, ip := range routed {
		var entries []v1alpha1.Announcement
		if c := plan.Routed[ip]; c.Teller {
			for _, svc := range c.Services {
				entries = append(entries, v1alpha1.Announcement{IP: ip.String(), Service: svc, Protocol: v1alpha1.ProtocolBGP, Peers: c.Peers})
			}
		}
		setEntries(v, v.bgp, ip, entries)
	}
}

// setEntries replaces the entries of k in m (none: k goes), moving v's generation when they
// changed. The caller holds v.mu.
func setEntries[K comparable, E any](v *statusView, m map[K][]E, k K, entries []E) {
	if apiequality.Semantic.DeepEqual(m[k], entries) {
		return
	}
	v.gen++
	if len(entries) == 0 {
		delete(m, k)
	} else {
		m[k] = entries
	}
}

// fill sets st's announcements as the status lists them (L2 by address, then BGP by address)
// and, when st has a BGP part, its routes, and returns their generation.
func (v *statusView) fill(st *v1alpha1.SpeakerStatus) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []v1alpha1.Announcement
	for _, m := range []map[netip.Addr][]v1alpha1.Announcement{v.l2, v.bgp} {
		for _, ip := range keysOf(m, m) {
			out = append(out, m[ip]...)
		}
	}
	st.Announcements = out
	if st.BGP != nil {
		b := *st.BGP
		b.Routes, b.OmittedRoutes = v.listRoutes()
		st.BGP = &b
	}
	return v.gen
}

// report is the status of the announcements of generation listed (the list itself is made
// when it is written), with problems and the Ready they make.
func (v *statusView) report(plan Plan, problems []string) statusReport {
	st := v1alpha1.SpeakerStatus{ConfigErrors: problems, L2Announcements: int32(len(plan.Mine))}
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Running", Message: "answering for its addresses"}
	if len(problems) > 0 {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "ConfigErrors", problems[0]
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return statusReport{status: st, ready: ready, listed: v.gen}
}

// writeStatuses writes reports until ctx ends, retrying a failed write every 500 ms unless a
// newer report arrives first.
func (s *Speaker) writeStatuses(ctx context.Context) {
	var written *statusReport
	for {
		var r statusReport
		select {
		case <-ctx.Done():
			return
		case r = <-s.reports:
		}
		for {
			if written != nil && sameStatus(*written, r) {
				break
			}
			if r.listed != 0 {
				r.listed = s.view.fill(&r.status)
			}
			s.busy.Stir() // events wait for the write and a lull after it
			err := s.writeStatus(ctx, r)
			s.busy.Stir()
			if err == nil {
				written = &r
				// At most one write per writePause: the status holds one entry per address,
				// and while many Services change it would otherwise be rewritten (and sent
				// through etcd) for every one of them. Newer reports replace the waiting one
				// meanwhile.
				t := time.NewTimer(writePause(r.status))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				break
			}
			s.Log.Info("writing Speaker status failed, retrying", "error", err.Error())
			t := time.NewTimer(500 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case r = <-s.reports:
				t.Stop()
			case <-t.C:
			}
		}
	}
}

func (s *Speaker) writeStatus(ctx context.Context, r statusReport) error {
	sp := &v1alpha1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: s.Node}}
	if err := s.Client.Get(ctx, types.NamespacedName{Name: sp.Name}, sp); apierrors.IsNotFound(err) {
		if err := s.Client.Create(ctx, sp); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	st := r.status
	st.Conditions = slices.Clone(sp.Status.Conditions)
	setCondition(&st.Conditions, r.ready, sp.Generation)
	if r.strictARP != nil {
		setCondition(&st.Conditions, *r.strictARP, sp.Generation)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionStrictARP)
	}
	sp.Status = st
	return s.Client.UpdateStatus(ctx, sp)
}

// sameStatus compares two reports; the announcements and routes by their generation when both
// have one (one of them may not be listed yet).
func sameStatus(a, b statusReport) bool {
	if a.listed != 0 && b.listed != 0 {
		if a.listed != b.listed {
			return false
		}
		a.status, b.status = unlisted(a.status), unlisted(b.status)
	}
	return a.ready.Status == b.ready.Status && a.ready.Message == b.ready.Message && apiequality.Semantic.DeepEqual(a.status, b.status) &&
		apiequality.Semantic.DeepEqual(a.strictARP, b.strictARP)
}

// unlisted is st without the lists statusView makes.
func unlisted(st v1alpha1.SpeakerStatus) v1alpha1.SpeakerStatus {
	st.Announcements = nil
	if st.BGP != nil {
		b := *st.BGP
		b.Routes, b.OmittedRoutes = nil, 0
		st.BGP = &b
	}
	return st
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

// sessionStatus lists the sessions by peer name and counts the Established ones.
func sessionStatus(states map[string]bgp.State) ([]v1alpha1.PeerSession, int32) {
	out := make([]v1alpha1.PeerSession, 0, len(states))
	up := int32(0)
	for _, name := range slices.Sorted(maps.Keys(states)) {
		st := states[name]
		ps := v1alpha1.PeerSession{Peer: name, State: st.State, Since: &metav1.Time{Time: st.Since}}
		switch {
		case st.Established():
			up++
		case st.Message != "":
			ps.Message = st.Message
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
