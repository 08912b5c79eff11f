package speaker

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"

	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/handoff"
	"github.com/portico-lb/portico/speaker/plan"
)

// Handoff passes the flows of an address this node took over, that it has no state for, to the
// node that answered for it before (package handoff), so that the clients' open connections
// survive the move. A nil Handoff leaves them to the service proxy, which resets them.
type Handoff interface {
	Set(addr, via netip.Addr, grace time.Duration) error
	Remove(addr netip.Addr) error
	Adopted() []handoff.Entry
	// ForgetClosed deletes this node's entries of connections to addr that are over, which
	// would catch a handed-off connection reusing their client ports.
	ForgetClosed(addr netip.Addr) error
	Release() error
	// Clear removes the table, rules, routes and marked connection-tracking entries: no
	// speaker follows on this node.
	Clear() error
	// HeldFlows and SetFlows are flow sharing's (flowshare.go): the flows this node holds,
	// and those another node holds, listed to be handed to it.
	HeldFlows(addrs []netip.Addr, max int) (map[netip.Addr][]handoff.Flow, error)
	SetFlows(via netip.Addr, flows []handoff.Flow, grace time.Duration) (int, error)
	// HoldBack drops for d the packets to addrs of flows neither held nor listed here, while a
	// round of flow sharing is on.
	HoldBack(addrs []netip.Addr, d time.Duration) error
	// Slots and RemoveSlot: the node addresses flows are handed to, one given back.
	Slots() map[int]netip.Addr
	RemoveSlot(via netip.Addr) error
}

// handoffs is the speaker's side of the hand-off: which addresses this node hands off, and to
// which node address. An entry is set when this node takes an address over from a node that is
// still there (its Node exists and is not NotReady), and removed when its Node is gone or
// NotReady, or no node answers for the address, or linger after that node answers for the
// address again.
type handoffs struct {
	side    Handoff
	grace   time.Duration
	linger  time.Duration
	entries map[netip.Addr]handoffEntry
	wake    alarm // plans everything again when the earliest linger ends
}

// handoffEntry is where one address's flows go: the previous owner's node and its address,
// until when new flows are picked up (zero: unknown, or over), and since when that node has
// answered for the address again (zero: it does not).
type handoffEntry struct {
	via   netip.Addr
	node  string
	until time.Time
	back  time.Time
}

// DefaultHandoffLinger is how long an entry outlives its node's answering for the address again. The
// clients' packets still come here until they learn the address's new MAC: at once from the
// gratuitous ARP/NA for most, at their next neighbour probe for those that ignore it (Linux:
// reachable for up to 45 s, then 5 s of delay and 3 s of probes); meanwhile the entry passes
// the flows it handed off on to the node that holds them, which is where they belong again.
// Removed at once, those packets found no entry and no pick-up, the service proxy took them
// up afresh and the backend reset them (seen on the kubelet cluster: 48 of 50 connections
// reset when a killed speaker came back and took its address again).
const DefaultHandoffLinger = time.Minute

// DefaultHandoffGrace is --l2-handoff-grace's default: how long after taking an address over
// this node passes on the packets of connections opened through the node it took it from.
const DefaultHandoffGrace = 10 * time.Minute

// handOff brings the entries up to date after a plan: before the node answers for the
// addresses it gains (touched), so that their first handed-off packets find the entry.
func (s *Speaker) handOff(ctx context.Context, touched []netip.Addr) {
	h := s.handoffs
	if h == nil {
		return
	}
	var gained []netip.Addr
	for _, ip := range touched {
		if prev := s.planner.PreviousOwner(ip); s.planner.Owner(ip) == s.Node && prev != "" && prev != s.Node {
			gained = append(gained, ip)
		}
	}
	if len(gained) == 0 && len(h.entries) == 0 {
		return
	}
	var nodes corev1.NodeList
	if err := s.Cache.List(ctx, &nodes); err != nil {
		s.Log.Error(err, "reading the Nodes for the hand-off")
		return
	}
	byName := map[string]*corev1.Node{}
	byIP := map[netip.Addr]string{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if rules.FitnessOf(n).Unfit() {
			continue // its conntrack entries may be gone with it, or unreachable
		}
		byName[n.Name] = n
		for _, ip := range rules.InternalIPs(n) {
			byIP[ip] = n.Name
		}
	}
	now := time.Now()
	var lingerEnds time.Time
	for ip, e := range h.entries {
		node, there := byIP[e.via]
		owner := s.planner.Owner(ip)
		if there && owner != "" && owner != node {
			e.node = node // adopted entries come without it
			if owner != s.Node {
				e.back = time.Time{} // moved on to a third node: no linger to count
			}
			h.entries[ip] = e // taken back during the linger (back kept): a new takeover below
			continue
		}
		if there && owner == node {
			if e.back.IsZero() {
				e.back = now
				h.entries[ip] = e
			}
			if ends := e.back.Add(h.linger); now.Before(ends) {
				if lingerEnds.IsZero() || ends.Before(lingerEnds) {
					lingerEnds = ends
				}
				continue
			}
		}
		if err := h.side.Remove(ip); err != nil {
			s.Log.Error(err, "ending a hand-off", "ip", ip, "to", e.via)
			if !errors.Is(err, handoff.ErrEntriesLeft) {
				continue // tried again at the next plan
			}
		}
		delete(h.entries, ip)
		s.Log.Info("no longer handing off flows", "ip", ip, "to", e.via, "node", node)
	}
	subnets, _ := s.ownSubnets()
	for _, ip := range gained {
		prev := s.planner.PreviousOwner(ip)
		n, ok := byName[prev]
		if e, had := h.entries[ip]; !ok || had && e.node == prev && e.back.IsZero() {
			// Gone or unfit, or handed off to it already. An entry that lingered (prev
			// answered meanwhile) is set again: a new move, whose flows must be picked up
			// for a new grace (its element expires, and on the kubelet cluster it did, after
			// ten minutes of moves back and forth every few seconds: every flow reset).
			continue
		}
		via, ok := plan.NodeAddressFor(ip, rules.InternalIPs(n), subnets)
		if !ok {
			s.Log.Info("not handing off flows: the previous owner has no InternalIP of the address's family", "ip", ip, "node", prev)
			continue
		}
		if err := h.side.Set(ip, via, h.grace); err != nil {
			s.Log.Error(err, "handing off flows", "ip", ip, "to", via, "node", prev)
			continue
		}
		h.entries[ip] = handoffEntry{via: via, node: prev, until: time.Now().Add(h.grace)}
		go func() { // a read of the whole table: not before the node answers
			if err := h.side.ForgetClosed(ip); err != nil {
				s.Log.Error(err, "deleting this node's entries of closed connections to an address taken over", "ip", ip)
			}
		}()
		s.Metrics.handoffs.Inc()
		s.Log.Info("handing off the flows this node has no state for", "ip", ip, "to", via, "node", prev, "for", h.grace)
	}
	s.Metrics.handoffEntries.Set(float64(len(h.entries)))
	h.wake.at(lingerEnds, func() { s.replanAll("handoff-linger") })
}

// newHandoffs adopts the entries an earlier run left; the first plan keeps those still true.
func newHandoffs(side Handoff, grace, linger time.Duration) *handoffs {
	if side == nil {
		return nil
	}
	h := &handoffs{side: side, grace: grace, linger: linger, entries: map[netip.Addr]handoffEntry{}}
	for _, e := range side.Adopted() {
		h.entries[e.Addr] = handoffEntry{via: e.Via, until: e.Expires}
	}
	return h
}

// status lists the entries for the Speaker status, sorted by address (nil: none, or no
// hand-off).
func (h *handoffs) status() []v1alpha1.Handoff {
	if h == nil || len(h.entries) == 0 {
		return nil
	}
	out := make([]v1alpha1.Handoff, 0, len(h.entries))
	for _, ip := range slices.SortedFunc(maps.Keys(h.entries), netip.Addr.Compare) {
		e := h.entries[ip]
		st := v1alpha1.Handoff{IP: ip.String(), Node: e.node, Via: e.via.String()}
		if !e.until.IsZero() {
			st.PickupUntil = &metav1.Time{Time: e.until.Truncate(time.Second)}
		}
		out = append(out, st)
	}
	return out[:min(len(out), maxHandoffsListed)]
}

// maxHandoffsListed is the API's bound on status.handoffs.
const maxHandoffsListed = 1024

// endHandoff leaves the hand-off's kernel state to the next speaker on this node (a restart:
// it adopts it, and the flows handed off keep their way meanwhile), or removes it all when no
// speaker follows (stop.last: an uninstall, the node going away) or the next one runs no
// hand-off (stop.handoffEnds: it could not adopt it, nor, without NET_ADMIN, remove it).
func (s *Speaker) endHandoff(stop bgpStop) {
	if s.Handoff == nil {
		return
	}
	if stop.handoffEnds {
		stop.reason = "next-speaker-without-handoff"
	}
	if !stop.last && !stop.handoffEnds {
		if err := s.Handoff.Release(); err != nil {
			s.Log.Error(err, "releasing the hand-off")
		}
		return
	}
	if err := s.Handoff.Clear(); err != nil {
		s.Log.Error(err, "removing the hand-off's table, rules, routes and marked entries", "reason", stop.reason)
		return
	}
	s.Log.Info("removed the hand-off's table, rules, routes and marked entries: no speaker follows on this node", "reason", stop.reason)
}
