package decide

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// Peer is a BGPPeer's status folded from the sessions the speakers report in their Speaker
// objects (the controller is the peer's only writer): one entry per node, and the
// SessionsEstablished condition naming the nodes whose session is not up. writes is false when
// the stored status says that already.
func Peer(peer *porticov1.BGPPeer, speakers []porticov1.Speaker, now time.Time) (st porticov1.BGPPeerStatus, writes bool) {
	st = foldSessions(peer.Name, speakers)
	st.Conditions = slices.Clone(peer.Status.Conditions)
	cond := sessionsCondition(st.Sessions)
	cond.ObservedGeneration, cond.LastTransitionTime = peer.Generation, metav1.NewTime(now)
	meta.SetStatusCondition(&st.Conditions, cond)
	if profile := peer.Spec.BFDProfile; profile != "" {
		bfd := bfdCondition(string(profile), peer.Name, speakers)
		bfd.ObservedGeneration, bfd.LastTransitionTime = peer.Generation, metav1.NewTime(now)
		meta.SetStatusCondition(&st.Conditions, bfd)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, porticov1.ConditionBFD)
	}
	return st, !equality.Semantic.DeepEqual(st, peer.Status)
}

// bfdCondition says whether every node's session with the peer runs BFD with its profile, from
// the speakers' reports: the nodes that cannot apply it, grouped by why (the first group's
// reason is the condition's), or how many do.
func bfdCondition(profile, peer string, speakers []porticov1.Speaker) metav1.Condition {
	c := metav1.Condition{Type: porticov1.ConditionBFD}
	type why struct{ reason, message string }
	var whys []why
	without := map[why][]string{}
	sessions := 0
	for _, sp := range speakers {
		for _, s := range sp.Status.Sessions {
			if s.Peer != peer {
				continue
			}
			sessions++
			if s.BFDReason != "" {
				w := why{s.BFDReason, s.BFDMessage}
				if without[w] == nil {
					whys = append(whys, w)
				}
				without[w] = append(without[w], sp.Name)
			}
		}
	}
	switch {
	case sessions == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, porticov1.ReasonNoSessions, "no speaker holds a session with this peer"
	case len(whys) > 0:
		slices.SortFunc(whys, func(a, b why) int { return strings.Compare(slices.Min(without[a]), slices.Min(without[b])) })
		parts := make([]string, 0, len(whys))
		for _, w := range whys {
			nodes := without[w]
			slices.Sort(nodes)
			verb := "runs"
			if len(nodes) > 1 {
				verb = "run"
			}
			parts = append(parts, fmt.Sprintf("%s %s without BFD: %s", strings.Join(nodes, ", "), verb, w.message))
		}
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, whys[0].reason, strings.Join(parts, "; ")
	default:
		c.Status, c.Reason = metav1.ConditionTrue, porticov1.ReasonBFDProfileApplied
		c.Message = fmt.Sprintf("%d of %d sessions run BFD with profile %s", sessions, sessions, profile)
	}
	return c
}

// foldSessions collects every node's session with the named peer, sorted by node.
func foldSessions(peer string, speakers []porticov1.Speaker) porticov1.BGPPeerStatus {
	var st porticov1.BGPPeerStatus
	for _, sp := range speakers {
		for _, s := range sp.Status.Sessions {
			if s.Peer == peer {
				st.Sessions = append(st.Sessions, porticov1.BGPSessionState{Node: sp.Name, State: s.State, Since: s.Since, Message: s.Message, Reason: s.Reason})
			}
		}
	}
	slices.SortFunc(st.Sessions, func(a, b porticov1.BGPSessionState) int { return strings.Compare(a.Node, b.Node) })
	return st
}

func sessionsCondition(sessions []porticov1.BGPSessionState) metav1.Condition {
	c := metav1.Condition{Type: porticov1.ConditionSessionsEstablished}
	var down, overLimit []string
	for _, s := range sessions {
		if s.State != "Established" {
			down = append(down, fmt.Sprintf("%s (%s)", s.Node, s.State))
			if s.Reason == porticov1.ReasonPrefixLimitReached {
				overLimit = append(overLimit, s.Node)
			}
		}
	}
	switch {
	case len(sessions) == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, porticov1.ReasonNoSessions,
			"no speaker holds a session with this peer: no node matches its nodeSelectors, no speaker runs, or a speaker reports a problem in its Speaker status"
	case len(overLimit) > 0:
		// The router's doing, and the fix is on the router (or maxPrefixes): said first.
		c.Status, c.Reason = metav1.ConditionFalse, porticov1.ReasonPrefixLimitReached
		c.Message = fmt.Sprintf("%d of %d sessions not established: %s; ceased on %s because the router sent more routes than maxPrefixes "+
			"(the speakers use none: filter what the router sends them, or raise maxPrefixes)",
			len(down), len(sessions), strings.Join(down, ", "), strings.Join(overLimit, ", "))
	case len(down) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, porticov1.ReasonNotEstablished
		c.Message = fmt.Sprintf("%d of %d sessions not established: %s", len(down), len(sessions), strings.Join(down, ", "))
	default:
		c.Status, c.Reason = metav1.ConditionTrue, porticov1.ReasonAllEstablished
		c.Message = fmt.Sprintf("%d of %d sessions established", len(sessions), len(sessions))
	}
	return c
}
