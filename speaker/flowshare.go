package speaker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/handoff"
	"github.com/portico-lb/portico/speaker/plan"
)

// Flow sharing keeps connections open across a change of this node's place in the ECMP sets of
// its BGP addresses (a drain, an uncordon; package plan says when, and which addresses):
// before applying the change, this node asks every member to share its flows: each one lists
// the TCP flows to the addresses that it holds (its conntrack entries) and sends them to every
// other member, which lists them in its hand-off (handoff.SetFlows: a packet of a listed flow
// it has no state for goes to the holder) and acks to the asker. The asker waits for every ack
// (plan.ShareRound), at most flowShareWait, applies the change, and asks again (the flows
// opened meanwhile). This file sends and answers the messages.

// Kinds of flow-sharing message.
const (
	kindAsk   = "ask"   // the asker to every member: share your flows of Addrs with Members
	kindFlows = "flows" // a member to every other one: the flows it holds
	kindAck   = "ack"   // a member to the asker: Holder's flows are listed here
)

// flowMessage is one flow-sharing message, JSON over the gossip group's encrypted streams.
type flowMessage struct {
	Kind  string `json:"kind"`
	Round uint64 `json:"round"`
	Asker string `json:"asker"`
	From  string `json:"from"`
	// Addrs and Members: an ask's addresses and the members that share (the asker's live
	// members, itself included).
	Addrs   []netip.Addr `json:"addrs,omitempty"`
	Members []string     `json:"members,omitempty"`
	// Flows: the sender's flows (kindFlows); Truncated: it holds more than it sent.
	Flows     []handoff.Flow `json:"flows,omitempty"`
	Truncated bool           `json:"truncated,omitempty"`
	// Holder: whose flows an ack is for.
	Holder string `json:"holder,omitempty"`
}

// maxSharedFlows bounds the flows one member sends in one message (per address it is the
// same bound): a few hundred kilobytes.
const maxSharedFlows = 8192

func (m flowMessage) encode() []byte {
	b, _ := json.Marshal(m) // nothing in it fails to marshal
	return b
}

func decodeFlowMessage(b []byte) (flowMessage, error) {
	var m flowMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("a flow-sharing message that does not decode: %w", err)
	}
	switch {
	case m.Kind != kindAsk && m.Kind != kindFlows && m.Kind != kindAck:
		return m, fmt.Errorf("a flow-sharing message of unknown kind %q", m.Kind)
	case m.Asker == "" || m.From == "":
		return m, fmt.Errorf("a flow-sharing message %q without its asker or sender", m.Kind)
	case len(m.Flows) > maxSharedFlows:
		return m, fmt.Errorf("%s sent %d flows, more than %d", m.From, len(m.Flows), maxSharedFlows)
	}
	return m, nil
}

// flowShareWait bounds how long a node waits for every member's acks before it changes its
// place in the ECMP sets anyway (and counts the round as incomplete).
const flowShareWait = 2 * time.Second

// flowHoldBack is how long a member asked for its flows holds the round's addresses back
// (handoff.HoldBack): the round, the change and the second round, after it, that lists the
// flows opened meanwhile; each ask starts it again.
const flowHoldBack = 2*flowShareWait + time.Second

// DefaultShareFlowsLate is how long after a change of this node's place in the ECMP sets the
// members share their flows a last time. The router applies the change a moment after this
// node's update reaches it; a connection opened through the old next hop in that moment is in
// neither the round before the change nor the one right after it, and once the router rehashes
// it reaches a node that has it listed nowhere (on the kubelet cluster, a connection opened
// 0.6 s into a drain was held back, then reset). A router that programs its forwarding table
// later than this (a hardware router under load) wants a longer --bgp-share-flows-late; the
// hold-back (flowHoldBack, from the last round's ask) covers it.
const DefaultShareFlowsLate = 250 * time.Millisecond

// shareFlowsAfterChange shares once right after a change (the flows opened during the first
// round) and once more ShareFlowsLate later (those opened before the router applied it).
func (s *Speaker) shareFlowsAfterChange(ctx context.Context, addrs []netip.Addr) {
	go s.shareFlows(ctx, addrs, "bgp-standing-changed")
	select {
	case <-time.After(cmp.Or(s.ShareFlowsLate, DefaultShareFlowsLate)):
		s.shareFlows(ctx, addrs, "bgp-standing-changed-late")
	case <-ctx.Done():
	}
}

// flowSharing is the speaker's side of flow sharing: the rounds it awaits acks of, and the
// latest round asked before a change, for the status (the loop's alone).
type flowSharing struct {
	rounds flowRounds
	latest *v1alpha1.FlowShare
}

// flowRounds are the rounds this node asked for and still awaits acks of.
type flowRounds struct {
	mu     sync.Mutex
	next   uint64
	rounds map[uint64]*awaitedRound
}

// awaitedRound is a round's acks (plan.ShareRound) and done, closed once none is awaited.
type awaitedRound struct {
	acks *plan.ShareRound
	done chan struct{}
}

// check closes done once nothing is awaited; the caller holds flowRounds.mu.
func (r *awaitedRound) check() {
	if r.acks.Done() {
		select {
		case <-r.done:
		default:
			close(r.done)
		}
	}
}

// shareFlows asks every live member to share its flows of addrs with the others, and waits for
// their acks, at most flowShareWait, and returns how the round went for the
// Speaker status. It does nothing (nil) without a hand-off or with flow sharing switched off,
// or alone in the group.
func (s *Speaker) shareFlows(ctx context.Context, addrs []netip.Addr, why string) *v1alpha1.FlowShare {
	if s.Handoff == nil || !s.ShareFlows || len(addrs) == 0 {
		return nil
	}
	members := s.Group.Alive()
	if !slices.Contains(members, s.Node) {
		members = append(members, s.Node)
	}
	if len(members) < 2 {
		return nil
	}
	start := time.Now()
	round, r := s.flows.rounds.open(start, members)
	defer s.flows.rounds.close(round)
	ask := flowMessage{Kind: kindAsk, Round: round, Asker: s.Node, From: s.Node, Addrs: addrs, Members: members}
	for _, m := range members {
		if m == s.Node {
			continue
		}
		if err := s.Group.Send(m, ask.encode()); err != nil {
			s.Log.Info("could not ask a member for its flows", "member", m, "error", err.Error())
			s.flowAck(round, "", m)
		}
	}
	go s.sendFlows(ask) // this node's own share
	wait := time.NewTimer(flowShareWait)
	defer wait.Stop()
	complete := true
	select {
	case <-r.done:
	case <-wait.C:
		complete = false
	case <-ctx.Done():
		complete = false
	}
	missing := s.flows.rounds.missing(r)
	took := time.Since(start)
	s.Metrics.flowShares.WithLabelValues(shareResult(complete)).Inc()
	if !complete {
		s.Log.Info("changing this node's place in the ECMP sets without every member's flows", "why", why,
			"addresses", len(addrs), "missing", missing, "waited", took.Round(time.Millisecond))
	} else {
		s.Log.Info("members shared their flows", "why", why, "addresses", len(addrs), "members", len(members),
			"took", took.Round(time.Millisecond))
	}
	return &v1alpha1.FlowShare{At: metav1.NewTime(start.Truncate(time.Second)), Reason: why, Complete: complete,
		Missing: missing[:min(len(missing), maxMissingListed)], Members: int32(len(members)),
		Took: metav1.Duration{Duration: took.Round(time.Millisecond)}}
}

// open registers a round among members, numbered uniquely across this node's restarts too.
func (fr *flowRounds) open(start time.Time, members []string) (uint64, *awaitedRound) {
	r := &awaitedRound{acks: plan.NewShareRound(members), done: make(chan struct{})}
	fr.mu.Lock()
	defer fr.mu.Unlock()
	r.check()
	fr.next++
	round := uint64(start.UnixNano()) + fr.next
	if fr.rounds == nil {
		fr.rounds = map[uint64]*awaitedRound{}
	}
	fr.rounds[round] = r
	return round, r
}

// close forgets a round: its late acks are ignored.
func (fr *flowRounds) close(round uint64) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	delete(fr.rounds, round)
}

// missing lists the acks r still awaits.
func (fr *flowRounds) missing(r *awaitedRound) []string {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	return r.acks.Missing()
}

// maxMissingListed is the API's bound on status.flowShare.missing.
const maxMissingListed = 16

func shareResult(complete bool) string {
	if complete {
		return "complete"
	}
	return "incomplete"
}

// flowAck records an ack of round (an empty receiver: drop the member holder, unreachable).
func (s *Speaker) flowAck(round uint64, receiver, holder string) {
	s.flows.rounds.mu.Lock()
	defer s.flows.rounds.mu.Unlock()
	r := s.flows.rounds.rounds[round]
	switch {
	case r == nil: // late, or another life's
	case receiver == "":
		r.acks.Drop(holder)
		r.check()
	default:
		r.acks.Acked(receiver, holder)
		r.check()
	}
}

// FlowMessage is membership's Config.Message: a flow-sharing message from another member.
func (s *Speaker) FlowMessage(b []byte) {
	m, err := decodeFlowMessage(b)
	if err != nil {
		s.Log.Info("ignored a flow-sharing message", "error", err.Error())
		return
	}
	if s.Handoff == nil || !s.ShareFlows {
		return // its asker gives up waiting on this node after flowShareWait
	}
	switch m.Kind {
	case kindAsk:
		go s.sendFlows(m)
	case kindFlows:
		s.listFlows(m)
	case kindAck:
		s.flowAck(m.Round, m.From, m.Holder)
	}
}

// sendFlows sends the flows this node holds to every other member of ask, and holds ask's
// addresses back meanwhile.
func (s *Speaker) sendFlows(ask flowMessage) {
	if err := s.Handoff.HoldBack(ask.Addrs, flowHoldBack); err != nil {
		s.Log.Error(err, "holding back the flows no member listed yet")
	}
	held, err := s.Handoff.HeldFlows(ask.Addrs, maxSharedFlows)
	if err != nil {
		s.Log.Error(err, "reading this node's flows to share")
	}
	out := flowMessage{Kind: kindFlows, Round: ask.Round, Asker: ask.Asker, From: s.Node}
	for _, ip := range slices.SortedFunc(maps.Keys(held), netip.Addr.Compare) {
		room := maxSharedFlows - len(out.Flows)
		out.Truncated = out.Truncated || len(held[ip]) > room
		out.Flows = append(out.Flows, held[ip][:min(room, len(held[ip]))]...)
	}
	if out.Truncated {
		s.Log.Info("sharing only some of this node's flows", "sent", len(out.Flows), "bound", maxSharedFlows)
	}
	s.Metrics.flowsShared.Add(float64(len(out.Flows)))
	msg := out.encode()
	for _, to := range ask.Members {
		if to == s.Node {
			continue
		}
		if err := s.Group.Send(to, msg); err != nil {
			s.Log.Info("could not share this node's flows with a member", "member", to, "error", err.Error())
		}
	}
}

// listFlows lists the flows another member holds in the hand-off, routed to that member's node
// address of each flow's family, and acks to the asker.
func (s *Speaker) listFlows(m flowMessage) {
	listed := 0
	var node corev1.Node
	if err := s.Cache.Get(context.Background(), types.NamespacedName{Name: m.From}, &node); err != nil {
		s.Log.Info("not listing a member's flows: its Node cannot be read", "member", m.From, "error", err.Error())
	} else {
		subnets, _ := s.ownSubnets()
		for _, v4 := range []bool{true, false} {
			flows := slices.DeleteFunc(slices.Clone(m.Flows), func(f handoff.Flow) bool { return f.Service.Addr().Is4() != v4 })
			if len(flows) == 0 {
				continue
			}
			via, ok := plan.NodeAddressFor(flows[0].Service.Addr(), rules.InternalIPs(&node), subnets)
			if !ok {
				s.Log.Info("not listing a member's flows: its Node has no InternalIP of their family", "member", m.From)
				continue
			}
			n, err := s.Handoff.SetFlows(via, flows, s.HandoffGrace)
			if err != nil {
				s.Log.Error(err, "listing a member's flows", "member", m.From, "via", via)
			}
			listed += n
		}
	}
	s.Metrics.flowsListed.Add(float64(listed))
	ack := flowMessage{Kind: kindAck, Round: m.Round, Asker: m.Asker, From: s.Node, Holder: m.From}
	if m.Asker == s.Node {
		s.flowAck(m.Round, s.Node, m.From)
		return
	}
	if err := s.Group.Send(m.Asker, ack.encode()); err != nil {
		s.Log.Info("could not ack a member's flows", "asker", m.Asker, "error", err.Error())
	}
}

// giveBackSlots gives back the hand-off's slots of node addresses no Node has any more (the
// plan's Step: plan.StaleSlots), so that they do not run out as nodes come and go. A slot that
// listed flows still refer to stays until they expire, and goes at a later full plan.
func (s *Speaker) giveBackSlots(vias []netip.Addr) {
	for _, via := range vias {
		if err := s.Handoff.RemoveSlot(via); errors.Is(err, handoff.ErrEntriesLeft) {
			s.Log.Error(err, "gave back the hand-off slot of a node address no Node has", "via", via)
			continue
		} else if err != nil {
			s.Log.V(1).Info("keeping the slot of a node address no Node has, for now", "via", via, "error", err.Error())
			continue
		}
		s.Log.Info("gave back the hand-off slot of a node address no Node has", "via", via)
	}
}
