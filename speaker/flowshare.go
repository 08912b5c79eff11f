package speaker

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/handoff"
	"github.com/portico-lb/portico/speaker/plan"
)

// Flow sharing keeps connections open across a change of this node's place in the ECMP sets of
// its BGP addresses (a drain, an uncordon): a router with plain per-flow hashing remaps flows
// between all the nodes then, to nodes that have no conntrack entry for them. The node that
// makes the change knows it in advance; before applying it, it asks every member to share its
// flows: each one lists the TCP flows to the addresses that it holds (its conntrack entries)
// and sends them to every other member, which lists them in its hand-off (handoff.SetFlows: a
// packet of a listed flow it has no state for goes to the holder) and acks to the asker. The
// asker waits for every ack, at most flowShareWait, applies the change, and asks again (the
// flows opened meanwhile). This file is the pure part: what to share when, the messages, the
// acks awaited; flowsharing.go does the I/O.

// flowsToShare are the addresses whose ECMP set this plan changes by changing this node's place
// in it: when its standing changes (cordoned: GRACEFUL_SHUTDOWN; its grace over: withdrawn;
// uncordoned: advertised again; unknownStanding to any: the speaker's first plan, which
// advertises the node's routes after a start), every address it advertised before or
// advertises now. Other changes (a Service added or deleted) change every node's routes alike,
// or none's.
func flowsToShare(before, after rules.BGPStanding, routedBefore, routedAfter map[netip.Addr]plan.BGPClaim) []netip.Addr {
	if before == after {
		return nil
	}
	return keysOf(routedBefore, routedAfter)
}

// staleSlots are the node addresses of slots (the hand-off's, by slot) that are no Node's
// InternalIP, sorted; none when no Node is known (a cache not read yet is no reason to cut the
// flows passed on).
func staleSlots(slots map[int]netip.Addr, nodes []corev1.Node) []netip.Addr {
	if len(nodes) == 0 {
		return nil
	}
	known := map[netip.Addr]bool{}
	for i := range nodes {
		for _, ip := range rules.InternalIPs(&nodes[i]) {
			known[ip] = true
		}
	}
	var out []netip.Addr
	for _, via := range slots {
		if !known[via] {
			out = append(out, via)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// unknownStanding is the standing before a speaker's first plan.
const unknownStanding rules.BGPStanding = -1

// stopShares reports whether a stop of the BGP side changes the ECMP sets: a stop for good
// withdraws every route, a restart those of sessions without graceful restart.
func stopShares(keep bool, peers map[string]plan.Peer) bool {
	if !keep {
		return true
	}
	for _, p := range peers {
		if !p.GracefulRestart {
			return true
		}
	}
	return false
}

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

// ackPair is one ack the asker awaits: receiver has listed holder's flows.
type ackPair struct{ receiver, holder string }

// shareRound is what the asker of one round awaits: from every member, an ack for every other
// member's flows.
type shareRound struct {
	awaited map[ackPair]bool
	done    chan struct{} // closed when nothing is awaited
}

func newShareRound(members []string) *shareRound {
	r := &shareRound{awaited: map[ackPair]bool{}, done: make(chan struct{})}
	for _, to := range members {
		for _, from := range members {
			if to != from {
				r.awaited[ackPair{to, from}] = true
			}
		}
	}
	r.check()
	return r
}

// acked records an ack; drop gives up on a member that cannot be reached (none of its acks
// come, nor the others' for its flows).
func (r *shareRound) acked(receiver, holder string) {
	delete(r.awaited, ackPair{receiver, holder})
	r.check()
}

func (r *shareRound) drop(member string) {
	for p := range r.awaited {
		if p.receiver == member || p.holder == member {
			delete(r.awaited, p)
		}
	}
	r.check()
}

func (r *shareRound) check() {
	if len(r.awaited) == 0 {
		select {
		case <-r.done:
		default:
			close(r.done)
		}
	}
}

// missing lists the acks still awaited, "receiver<-holder", sorted.
func (r *shareRound) missing() []string {
	out := make([]string, 0, len(r.awaited))
	for p := range r.awaited {
		out = append(out, p.receiver+"<-"+p.holder)
	}
	slices.Sort(out)
	return out
}
