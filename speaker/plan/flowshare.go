package plan

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-lb/portico/rules"
)

// Flow sharing keeps connections open across a change of this node's place in the ECMP sets of
// its BGP addresses (a drain, an uncordon): a router with plain per-flow hashing remaps flows
// between all the nodes then, to nodes that have no conntrack entry for them. The node that
// makes the change knows it in advance; before applying it, it asks every member to share its
// flows, waits for every member's acks, applies the change, and asks again. What is decided
// here: when a node shares and which addresses (FlowsToShare, StopShares), the acks a round
// awaits (ShareRound), the hand-off slots to give back (StaleSlots) and the node address flows
// are handed to (NodeAddressFor). The speaker's flowshare.go sends the messages.

// UnknownStanding is a node's standing before the speaker's first plan.
const UnknownStanding rules.BGPStanding = -1

// FlowsToShare are the addresses whose ECMP set this plan changes by changing this node's
// place in it: when its standing changes (cordoned: GRACEFUL_SHUTDOWN; its grace over:
// withdrawn; uncordoned: advertised again; UnknownStanding to any: the speaker's first plan,
// which advertises the node's routes after a start), every address it advertised before or
// advertises now. Other changes (a Service added or deleted) change every node's routes alike,
// or none's.
func FlowsToShare(before, after rules.BGPStanding, routedBefore, routedAfter map[netip.Addr]BGPClaim) []netip.Addr {
	if before == after {
		return nil
	}
	return addrsOf(routedBefore, routedAfter)
}

// StopShares reports whether a stop of the BGP side changes the ECMP sets: a stop for good
// withdraws every route, a restart those of sessions without graceful restart.
func StopShares(keep bool, peers map[string]Peer) bool {
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

// ShareRound is what the asker of one round of flow sharing awaits: from every member, an ack
// for every other member's flows.
type ShareRound struct {
	awaited map[ackPair]bool
}

// ackPair is one ack the asker awaits: receiver has listed holder's flows.
type ackPair struct{ receiver, holder string }

// NewShareRound is a round among members (the asker's live members, itself included).
func NewShareRound(members []string) *ShareRound {
	r := &ShareRound{awaited: map[ackPair]bool{}}
	for _, to := range members {
		for _, from := range members {
			if to != from {
				r.awaited[ackPair{to, from}] = true
			}
		}
	}
	return r
}

// Acked records that receiver listed holder's flows.
func (r *ShareRound) Acked(receiver, holder string) { delete(r.awaited, ackPair{receiver, holder}) }

// Drop gives up on a member that cannot be reached: none of its acks come, nor the others' for
// its flows.
func (r *ShareRound) Drop(member string) {
	for p := range r.awaited {
		if p.receiver == member || p.holder == member {
			delete(r.awaited, p)
		}
	}
}

// Done reports whether nothing is awaited any more.
func (r *ShareRound) Done() bool { return len(r.awaited) == 0 }

// Missing lists the acks still awaited, "receiver<-holder", sorted.
func (r *ShareRound) Missing() []string {
	out := make([]string, 0, len(r.awaited))
	for p := range r.awaited {
		out = append(out, p.receiver+"<-"+p.holder)
	}
	slices.Sort(out)
	return out
}

// StaleSlots are the node addresses of slots (the hand-off's, by slot) that are no Node's
// InternalIP, sorted; none when no Node is known (a cache not read yet is no reason to cut the
// flows passed on).
func StaleSlots(slots map[int]netip.Addr, nodes []corev1.Node) []netip.Addr {
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

// NodeAddressFor is the address of a node, among ips, to hand ip's flows to: of ip's family,
// on one of this node's subnets when one is (the route's next hop must be on the link).
func NodeAddressFor(ip netip.Addr, ips []netip.Addr, subnets []netip.Prefix) (netip.Addr, bool) {
	ips = slices.DeleteFunc(slices.Clone(ips), func(a netip.Addr) bool { return a.Is4() != ip.Is4() })
	for _, a := range ips {
		if slices.ContainsFunc(subnets, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return a, true
		}
	}
	if len(ips) == 0 {
		return netip.Addr{}, false
	}
	return ips[0], true
}

// addrsOf is every address of either map, sorted.
func addrsOf[A, B any](a map[netip.Addr]A, b map[netip.Addr]B) []netip.Addr {
	out := make([]netip.Addr, 0, len(a)+len(b))
	for ip := range a {
		out = append(out, ip)
	}
	for ip := range b {
		if _, dup := a[ip]; !dup {
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
