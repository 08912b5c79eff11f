package handoff

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Over BGP every node advertises every address, and a router with plain per-flow ECMP
// remaps flows between nodes whenever its set of next hops changes (a node drained, or back):
// a flow's packets then reach a node that has no connection-tracking state for it. The nodes
// share, before such a change, which flows each one holds (the speaker's flow sharing); a node
// hands the packets of a flow listed for another node, that it has no state for, to that node,
// the same way as over L2: a null NAT binding before the service proxy's, and a route by mark.
//
// Since the flows of one address go to different nodes, the route is chosen per flow: each
// node address handed flows to gets a slot, a value in Config.SlotMask, with its own chain
// (the mark set: Mark and the slot), routing rule (fwmark Mark|slot/Mark|SlotMask) and routing
// table (RouteTable + slot, one default route via the node). The maps flows4 and flows6 hold (client address, client
// port, address, port) → jump to the slot's chain, each element expiring after the grace; a
// flow picked up keeps its slot in its connection mark for as long as it lives, as over L2.
// Bounded: at most a slot per node address (SlotMask's values), the caller caps the flows.

// Flow is one TCP connection to a load-balanced address, as the client opened it.
type Flow struct {
	Client, Service netip.AddrPort
}

func (f Flow) String() string { return f.Client.String() + "->" + f.Service.String() }

// slot is one node address flows are handed to.
type slot struct {
	n   int // 1 .. the number of values SlotMask holds
	via netip.Addr
}

// slotValue is slot n's value in the mark: n shifted into SlotMask.
func (c Config) slotValue(n int) uint32 { return uint32(n) << bits.TrailingZeros32(c.SlotMask) }

// maxSlots is how many node addresses the mask has room for (the table numbers too: 255 at
// most).
func (c Config) maxSlots() int {
	if c.SlotMask == 0 {
		return 0
	}
	return min(int(c.SlotMask>>bits.TrailingZeros32(c.SlotMask)), 255)
}

func (c Config) slotTable(n int) int { return c.RouteTable + n }

// checkSlotMask: contiguous bits, apart from the hand-off bit, or none (no hand-off by flow).
func (c Config) checkSlotMask() error {
	m := c.SlotMask >> bits.TrailingZeros32(c.SlotMask)
	if c.SlotMask == 0 {
		return nil
	}
	if m&(m+1) != 0 || c.SlotMask&c.Mark != 0 {
		return fmt.Errorf("flow hand-off mark mask %#x is not contiguous bits apart from the hand-off bit %#x", c.SlotMask, c.Mark)
	}
	return nil
}

// SetFlows hands the flows of via's family to via for grace: a packet of one of them that this
// node has no state for goes to via. It returns how many flows it listed, and deletes this
// node's closed entries of their ports (closedEarlier).
func (h *Handoff) SetFlows(via netip.Addr, flows []Flow, grace time.Duration) (int, error) {
	via = via.Unmap()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cfg.SlotMask == 0 {
		return 0, ErrNoFlows
	}
	s, err := h.slotFor(via)
	if err != nil {
		return 0, err
	}
	set := h.flowMaps[via.Is4()]
	verdict := &expr.Verdict{Kind: expr.VerdictJump, Chain: slotChain(s.n)}
	var elems []nftables.SetElement
	for _, f := range flows {
		if f.Client.Addr().Unmap().Is4() == via.Is4() && f.Service.Addr().Unmap().Is4() == via.Is4() {
			elems = append(elems, nftables.SetElement{Key: flowKey(f), VerdictData: verdict, Timeout: grace})
		}
	}
	// A flow listed already takes its new node and grace (replaceElements). Another verdict
	// added over it failed the whole batch (EEXIST): on the kubelet cluster that lost every flow
	// of a drain's listing and reset the connections the router remapped.
	if err := h.replaceElements(set, elems); err != nil {
		return 0, fmt.Errorf("handing %d flows off to %s: %w", len(elems), via, err)
	}
	if len(elems) == 0 {
		return 0, nil
	}
	listed := map[Flow]bool{}
	for _, f := range flows {
		listed[Flow{Client: unmapPort(f.Client), Service: unmapPort(f.Service)}] = true
	}
	return len(elems), forget(func(e *netlink.ConntrackFlow) bool { return closedEarlier(e, listed) })
}

// closedEarlier reports whether e is a TCP entry of a listed flow's ports that is closed
// (TIME_WAIT, CLOSE): an earlier connection's, since the client reused the ports for the one
// listed, which is open and held by another node. Left there, that entry would catch the
// listed flow's packets when a remap brings them here (they are not `ct state new`, so not
// picked up): they would follow its old translation or, out of its window, be invalid and
// untranslated, and go nowhere; the connection would stall until the entry expired (two
// minutes in TIME_WAIT). Deleted, the next packet is picked up. An open entry of the same
// ports is left: it may be this node's own connection (the list outlives the flows in it).
func closedEarlier(e *netlink.ConntrackFlow, listed map[Flow]bool) bool {
	if !closed(e) {
		return false
	}
	f, ok := flowOf(e)
	return ok && listed[f]
}

// closed reports whether e is a TCP entry of a connection that is over (TIME_WAIT, CLOSE).
func closed(e *netlink.ConntrackFlow) bool {
	tcp, ok := e.ProtoInfo.(*netlink.ProtoInfoTCP)
	return e.Forward.Protocol == unix.IPPROTO_TCP && ok && tcp.State >= tcpTimeWait && tcp.State <= tcpClose
}

// flowOf is the flow of a connection-tracking entry, as the client sent it.
func flowOf(e *netlink.ConntrackFlow) (Flow, bool) {
	src, ok1 := netip.AddrFromSlice(e.Forward.SrcIP)
	dst, ok2 := netip.AddrFromSlice(e.Forward.DstIP)
	return Flow{Client: netip.AddrPortFrom(src.Unmap(), e.Forward.SrcPort), Service: netip.AddrPortFrom(dst.Unmap(), e.Forward.DstPort)}, ok1 && ok2
}

func unmapPort(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// Slots lists the node addresses flows are handed to, by slot.
func (h *Handoff) Slots() map[int]netip.Addr {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[int]netip.Addr{}
	for _, s := range h.slots {
		out[s.n] = s.via
	}
	return out
}

// slotFor is via's slot, made (its chain, map element, rule and route) if it has none.
func (h *Handoff) slotFor(via netip.Addr) (slot, error) {
	for _, s := range h.slots {
		if s.via == via {
			return s, nil
		}
	}
	used := map[int]bool{}
	for _, s := range h.slots {
		used[s.n] = true
	}
	n := 1
	for used[n] {
		n++
	}
	if n > h.cfg.maxSlots() {
		return slot{}, fmt.Errorf("no slot left for handing flows off to %s: %d node addresses have one", via, len(h.slots))
	}
	s := slot{n: n, via: via}
	if err := h.routeSlot(s); err != nil {
		return slot{}, err
	}
	h.addSlotChain(s)
	if err := h.conn.Flush(); err != nil {
		return slot{}, fmt.Errorf("adding the chain of the flows handed off to %s: %w", via, err)
	}
	h.slots = append(h.slots, s)
	return s, nil
}

// routeSlot adds slot s's route (default via its node) and routing rule.
func (h *Handoff) routeSlot(s slot) error {
	r := &netlink.Route{Dst: netlinkPrefix(defaultRoute(s.via)), Gw: s.via.AsSlice(), Table: h.cfg.slotTable(s.n)}
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("routing the flows handed off to %s: %w", s.via, err)
	}
	rule := h.slotRule(s.n, s.via.Is4())
	if err := netlink.RuleAdd(rule); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("adding the routing rule of the flows handed off to %s: %w", s.via, err)
	}
	return nil
}

func (h *Handoff) slotRule(n int, v4 bool) *netlink.Rule { return toNetlink(h.cfg.slotRule(n, v4)) }

// addSlotChain queues slot s's chain, `meta mark set meta mark & ~(MARK|SLOTS) | MARK|SLOT; ct
// mark set ct mark & ~(MARK|SLOTS) | MARK|SLOT` (two rules: a packet without an entry,
// passClosingFlow's, stops at the read of its connection mark), and its element in the slots
// map (not flushed).
func (h *Handoff) addSlotChain(s slot) {
	c := h.conn.AddChain(&nftables.Chain{Name: slotChain(s.n), Table: h.table})
	v := h.cfg.slotMark(s.n)
	set := func(meta bool) []expr.Any {
		load, store := ctMark(), expr.Any(&expr.Ct{Register: 1, Key: expr.CtKeyMARK, SourceRegister: true})
		if meta {
			load, store = metaMark(), &expr.Meta{Key: expr.MetaKeyMARK, Register: 1, SourceRegister: true}
		}
		return []expr.Any{load, setBits(h.cfg.Mark|h.cfg.SlotMask, v), store}
	}
	h.conn.AddRule(&nftables.Rule{Table: h.table, Chain: c, Exprs: set(true)})
	h.conn.AddRule(&nftables.Rule{Table: h.table, Chain: c, Exprs: set(false)})
	_ = h.conn.SetAddElements(h.slotMap, []nftables.SetElement{{Key: binaryutil.NativeEndian.PutUint32(v),
		VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: slotChain(s.n)}}})
}

// slotMark is the mark of a flow handed off by slot n: the hand-off bit and the slot.
func (c Config) slotMark(n int) uint32 { return c.Mark | c.slotValue(n) }

func slotChain(n int) string { return fmt.Sprintf("slot%d", n) }

// RemoveSlot gives via's slot back (its chain, map element, rule and route), when the node is
// gone. It fails, changing nothing, while a listed flow still refers to the slot: the flows
// listed expire after their grace, and a later call succeeds. Flows passed on by the slot
// lose their way, as they would with their node gone.
func (h *Handoff) RemoveSlot(via netip.Addr) error {
	via = via.Unmap()
	h.mu.Lock()
	defer h.mu.Unlock()
	i := slices.IndexFunc(h.slots, func(s slot) bool { return s.via == via })
	if i < 0 {
		return nil
	}
	s := h.slots[i]
	if err := h.conn.SetDeleteElements(h.slotMap, []nftables.SetElement{{Key: binaryutil.NativeEndian.PutUint32(h.cfg.slotMark(s.n))}}); err != nil {
		return err
	}
	h.conn.DelChain(&nftables.Chain{Name: slotChain(s.n), Table: h.table})
	if err := h.conn.Flush(); err != nil { // one batch: the element stays if the chain does
		return fmt.Errorf("removing the chain of the flows handed off to %s (listed flows still refer to it): %w", via, err)
	}
	h.slots = slices.Delete(h.slots, i, i+1)
	v, mask := h.cfg.slotMark(s.n), h.cfg.Mark|h.cfg.SlotMask
	return errors.Join(h.unrouteSlot(s), forget(func(f *netlink.ConntrackFlow) bool { return f.Mark&mask == v }))
}

// leftSlots reads the slots an earlier run left from the routing tables: those whose rule has
// this config's marks. A slot whose rule has other marks (an earlier version's, or another
// --handoff-slot-mask) routes flows marked with bits this run neither sets nor reads: it is
// not adopted, and pruned (pruneSlotRoutes, syncRules).
func (h *Handoff) leftSlots() ([]slot, error) {
	rules, err := listRules()
	if err != nil {
		return nil, err
	}
	var out []slot
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("listing the routes: %w", err)
		}
		for _, r := range rs {
			n := r.Table - h.cfg.RouteTable
			via, ok := netip.AddrFromSlice(r.Gw)
			if n < 1 || n > h.cfg.maxSlots() || !ok || !slices.Contains(rules, h.cfg.slotRule(n, family == netlink.FAMILY_V4)) {
				continue
			}
			out = append(out, slot{n: n, via: via.Unmap()})
		}
	}
	return out, nil
}

// pruneSlotRoutes removes the routes of the slots' tables (RouteTable + 1 to + 255) that are no
// slot's now: an earlier run's slots this config has no room for, or all of them once cleared.
func (h *Handoff) pruneSlotRoutes() error {
	var errs []error
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return fmt.Errorf("listing the routes: %w", err)
		}
		for _, r := range rs {
			n := r.Table - h.cfg.RouteTable
			if n < 1 || n > 255 || slices.ContainsFunc(h.slots, func(s slot) bool { return s.n == n }) {
				continue
			}
			if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("removing a route of routing table %d: %w", r.Table, err))
			}
		}
	}
	return errors.Join(errs...)
}

// unrouteSlot removes slot s's rule and route.
func (h *Handoff) unrouteSlot(s slot) error {
	_ = netlink.RuleDel(h.slotRule(s.n, s.via.Is4()))
	if err := netlink.RouteDel(&netlink.Route{Dst: netlinkPrefix(defaultRoute(s.via)), Table: h.cfg.slotTable(s.n)}); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("removing the route of the flows handed off to %s: %w", s.via, err)
	}
	return nil
}

// defaultRoute is the default route of via's family.
func defaultRoute(via netip.Addr) netip.Prefix {
	if via.Is4() {
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
}

// flowKey is f as the flows map's key: client address . client port . address . port, each
// field padded to the 4-byte registers.
func flowKey(f Flow) []byte {
	var k []byte
	for _, ap := range []netip.AddrPort{f.Client, f.Service} {
		k = append(k, ap.Addr().Unmap().AsSlice()...)
		k = binary.BigEndian.AppendUint16(k, ap.Port())
		k = append(k, 0, 0)
	}
	return k
}

// flowMapOf is the flows map of a family.
func flowMapOf(table *nftables.Table, v4 bool) *nftables.Set {
	if v4 {
		return &nftables.Set{Table: table, Name: "flows4", IsMap: true, HasTimeout: true, Concatenation: true, DataType: nftables.TypeVerdict,
			KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService, nftables.TypeIPAddr, nftables.TypeInetService)}
	}
	return &nftables.Set{Table: table, Name: "flows6", IsMap: true, HasTimeout: true, Concatenation: true, DataType: nftables.TypeVerdict,
		KeyType: nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetService, nftables.TypeIP6Addr, nftables.TypeInetService)}
}

// pickUpFlow is `meta nfproto ipv4 meta l4proto tcp ct state new ct mark & MARK == 0
// tcp flags & (syn|ack) != syn ip saddr . tcp sport . ip daddr . tcp dport @flows4 ct timeout
// set "picked-up4" counter ip saddr . tcp sport . ip daddr . tcp dport vmap @flows4` (ip6 for
// IPv6): a flow whose first packet here is not a SYN, listed for another node: its slot's
// chain marks it, and its entry goes soon after it closes (ClosingTimeout).
func pickUpFlow(set *nftables.Set, v4 bool, mark uint32) []expr.Any {
	out := append(midStream(v4, mark), loadFlowKey(v4)...)
	out = append(out, &expr.Lookup{SourceRegister: 8, SetName: set.Name, SetID: set.ID}, setPickedUpTimeouts(v4), &expr.Counter{})
	return append(out, &expr.Lookup{SourceRegister: 8, SetName: set.Name, SetID: set.ID, IsDestRegSet: true, DestRegister: 0})
}

// HoldBack drops, for d, the packets to addrs of flows that this node has no state for and that
// are not listed, where the service proxy would take them up afresh and their backend reset
// them. Flow sharing holds its addresses back while a round is on: a connection opened after
// the first round's listing reaches another node when the router rehashes, before the second
// round, after the change, lists it there (on the kubelet cluster, new connections opened
// within a second of an uncordon were reset so); held back, its client retransmits, and once
// listed it goes to its node. A packet of a flow nobody lists goes to the proxy after d.
func (h *Handoff) HoldBack(addrs []netip.Addr, d time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cfg.SlotMask == 0 {
		return ErrNoFlows
	}
	byFamily := map[bool][]nftables.SetElement{}
	for _, a := range addrs {
		a = a.Unmap()
		byFamily[a.Is4()] = append(byFamily[a.Is4()], nftables.SetElement{Key: a.AsSlice(), Timeout: d})
	}
	for v4, elems := range byFamily {
		if err := h.replaceElements(h.held[v4], elems); err != nil {
			return fmt.Errorf("holding back the unlisted flows of %d addresses: %w", len(elems), err)
		}
	}
	return nil
}

// holdBack is `midStream ip daddr @held4 counter drop` (ip6 for IPv6): HoldBack's; it follows
// the flows picked up by listing, which are marked by then.
func holdBack(set *nftables.Set, v4 bool, mark uint32) []expr.Any {
	out := append(midStream(v4, mark), daddrIn(set, v4)...)
	return append(out, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
}

// passClosingFlow is `closingStateless ip saddr . tcp sport . ip daddr . tcp dport vmap @flows4`
// (ip6 for IPv6): such a packet of a listed flow goes the way of its flow (its slot's chain
// sets no connection mark without an entry, and the packet mark all the same).
func passClosingFlow(set *nftables.Set, v4 bool) []expr.Any {
	out := append(closingStateless(v4), loadFlowKey(v4)...)
	return append(out, &expr.Lookup{SourceRegister: 8, SetName: set.Name, SetID: set.ID, IsDestRegSet: true, DestRegister: 0})
}

// loadFlowKey loads a packet's flow key (flowKey) into registers 8 and up: the 32-bit ones a
// concatenation is read from.
func loadFlowKey(v4 bool) []expr.Any {
	saddr, daddr, length := uint32(8), uint32(24), uint32(16)
	if v4 {
		saddr, daddr, length = 12, 16, 4
	}
	regs := length / 4
	return []expr.Any{
		&expr.Payload{DestRegister: 8, Base: expr.PayloadBaseNetworkHeader, Offset: saddr, Len: length},
		&expr.Payload{DestRegister: 8 + regs, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
		&expr.Payload{DestRegister: 9 + regs, Base: expr.PayloadBaseNetworkHeader, Offset: daddr, Len: length},
		&expr.Payload{DestRegister: 9 + 2*regs, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
	}
}

// markSlotPacket is `ct mark & MARK == MARK ct mark & SLOTS != 0 counter ct mark & (MARK|SLOTS)
// vmap @slots`: every packet of a flow handed off by slot gets the slot's mark, which its
// routing rule looks at.
func markSlotPacket(slots *nftables.Set, mark, mask uint32) []expr.Any {
	out := hasBits(ctMark(), mark, mark)
	out = append(out, ctMark(),
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Counter{},
		ctMark(),
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(mark | mask), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Lookup{SourceRegister: 1, SetName: slots.Name, SetID: slots.ID, IsDestRegSet: true, DestRegister: 0},
	)
	return out
}

// FlowCounts reads the counters of the flows handed off by slot: the flows picked up and their
// packets since the table was made.
func (h *Handoff) FlowCounts() (flows, packets uint64, err error) {
	n, err := h.counts(tagFlows, tagPackets)
	return n[0], n[1], err
}

// HeldBackCount reads the counter of the packets HoldBack dropped since the table was made.
func (h *Handoff) HeldBackCount() (uint64, error) {
	n, err := h.counts(tagHeldBack)
	return n[0], err
}

// Conntrack states of a TCP flow that still carries data (netfilter's tcp_conntrack: SYN_SENT
// 1 to LAST_ACK 6) and of one that is over (TIME_WAIT 7, CLOSE 8).
const (
	tcpSynSent  = 1
	tcpLastAck  = 6
	tcpTimeWait = 7
	tcpClose    = 8
)

// PickFlows chooses, from the connection-tracking entries, the TCP flows to addrs that this
// node holds itself (not those it hands off: their mark has the hand-off bit handedOff) and that
// still carry data, at most max per address.
func PickFlows(entries []*netlink.ConntrackFlow, addrs []netip.Addr, handedOff uint32, max int) map[netip.Addr][]Flow {
	out := map[netip.Addr][]Flow{}
	for _, e := range entries {
		if e.Forward.Protocol != unix.IPPROTO_TCP || e.Mark&handedOff != 0 {
			continue
		}
		if tcp, ok := e.ProtoInfo.(*netlink.ProtoInfoTCP); ok && (tcp.State < tcpSynSent || tcp.State > tcpLastAck) {
			continue
		}
		f, ok := flowOf(e)
		dst := f.Service.Addr()
		if !ok || !slices.Contains(addrs, dst) || len(out[dst]) >= max {
			continue
		}
		out[dst] = append(out[dst], f)
	}
	return out
}

// HeldFlows lists the TCP flows to addrs this node holds (PickFlows over its conntrack table).
func (h *Handoff) HeldFlows(addrs []netip.Addr, max int) (map[netip.Addr][]Flow, error) {
	var entries []*netlink.ConntrackFlow
	for _, family := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		if !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return a.Is4() == (family == unix.AF_INET) }) {
			continue
		}
		es, err := netlink.ConntrackTableList(netlink.ConntrackTable, family)
		if err != nil {
			return nil, fmt.Errorf("listing the connection-tracking table: %w", err)
		}
		entries = append(entries, es...)
	}
	return PickFlows(entries, addrs, h.cfg.Mark, max), nil
}
