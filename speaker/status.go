package speaker

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/bgp"
	"github.com/portico-lb/portico/speaker/l2"
	"github.com/portico-lb/portico/speaker/plan"
	"github.com/portico-lb/portico/speaker/status"
)

// report queues the status of the plan with this reconcile's problems, replacing any report
// not yet written. mine and routed are the addresses whose L2 or BGP entries may have
// changed, prefixes the routes that did (all: every one may have).
func (s *Speaker) report(p plan.Plan, problems []string, mine, routed []netip.Addr, prefixes []netip.Prefix, all bool, sessions map[string]bgp.State) {
	s.view.Update(p, s.ifaces, mine, routed, prefixes, all)
	r := s.view.Report(p, problems)
	// Reading every link costs more than planning a change, so it is done at most once a
	// second, and once more a second after a change that found them fresh.
	if now := time.Now(); now.Sub(s.macsAt) >= time.Second {
		s.macs, s.macsAt, s.macsAgain = hardwareAddrs(), now, false
	} else if !s.macsAgain {
		s.macsAgain = true
		time.AfterFunc(s.macsAt.Add(time.Second).Sub(now), func() { s.trigger(causeStatus) })
	}
	r.Status.HardwareAddrs = s.macs
	if c := s.checks.Load(); c != nil {
		r.Status.SelfChecks, r.Status.OmittedSelfChecks = c.checks, c.omitted
	}
	if f := s.foreign.Load(); f != nil {
		r.Status.ForeignAnswers = *f
	}
	r.Status.Sessions, r.Status.BGPPeersUp = sessionStatus(sessions)
	r.Status.BGP = status.BGPPeers(p.BGP, sessions) // its routes are listed when it is written
	r.Status.Interfaces, r.Status.OmittedInterfaces = interfaceStatus(s.Announce.Interfaces())
	r.StrictARP = strictARPCondition(s.Announce.Interfaces(), "/proc/sys")
	select {
	case <-s.reports:
	default:
	}
	s.reports <- r
}

// writeStatuses writes reports until ctx ends, retrying a failed write every 500 ms unless a
// newer report arrives first.
func (s *Speaker) writeStatuses(ctx context.Context) {
	var written *status.Report
	for {
		var r status.Report
		select {
		case <-ctx.Done():
			return
		case r = <-s.reports:
		}
		for {
			if written != nil && status.Same(*written, r) {
				break
			}
			if r.Listed != 0 {
				r.Listed = s.view.Fill(&r.Status)
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
				t := time.NewTimer(status.WritePause(r.Status))
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

func (s *Speaker) writeStatus(ctx context.Context, r status.Report) error {
	sp := &v1alpha1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: s.Node}}
	if err := s.Client.Get(ctx, types.NamespacedName{Name: sp.Name}, sp); apierrors.IsNotFound(err) {
		if err := s.Client.Create(ctx, sp); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	st := r.Status
	st.Conditions = slices.Clone(sp.Status.Conditions)
	setCondition(&st.Conditions, r.Ready, sp.Generation)
	if r.StrictARP != nil {
		setCondition(&st.Conditions, *r.StrictARP, sp.Generation)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionStrictARP)
	}
	sp.Status = st
	return s.Client.UpdateStatus(ctx, sp)
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
