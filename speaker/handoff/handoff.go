// Package handoff keeps the open TCP connections of an address that moved to this node over L2
// alive: it passes the packets of flows this node has no connection-tracking state for to the
// node that answered for the address before, whose state translates them as it did.
//
// When an address moves (a speaker's rolling update, a drain, a killed speaker on a live node),
// the clients' next packets of their open connections reach the new owner, whose connection
// tracking has never seen them. With nf_conntrack_tcp_loose (the default) it picks a mid-stream
// segment up as a new flow, the service proxy translates it afresh (another source address,
// maybe another backend) and the backend answers with a reset. The old owner's node still holds
// each flow's entry: the speaker's exit does not touch the kernel.
//
// So, for a grace period after taking an address over, the new owner marks every flow to it
// that starts with anything but a SYN (a connection it never saw open), gives it a null NAT
// binding before the service proxy's DNAT chain (netfilter's NAT takes the first chain that
// binds a flow, so the proxy's rules never see it), and routes it by the mark to the previous
// owner: the packet arrives there unchanged, where the flow's entry translates it as before. The
// backend's answers go back through the old owner (the proxy masqueraded the flow to that node's
// address) straight to the client. A FIN or a reset that finds no state here (conntrack opens
// none for either) goes the same way, so that a connection closed after the move closes where it
// lives. New connections (a SYN) are the new owner's as usual.
//
// Kernel state: one nftables table (inet portico-handoff) whose maps hold the addresses taken
// over and their previous owners, each element expiring after the grace period by itself; while
// a family has an address handed off, one policy-routing rule (fwmark → table) and in that table
// one route per address, via the previous owner (routing.go). A flow once marked keeps its mark
// (conntrack) and so its way for as long as it lives and the route is there; the element's
// timeout only ends the picking up of flows. The state outlives the speaker (Release) and is
// bounded: at most one element and one route per address.
//
// The node's marks are shared (kube-proxy, the CNI, a mesh), so the hand-off acts on its own
// state alone: a flow is picked up only to an address or as a flow in its maps, and every later
// rule (the packet mark, the null binding) looks for Mark in the connection mark, which only
// the pick-up sets; the routing rules look for Mark in the packet mark, which the speaker checks
// no other rule of the node sets or reads (marks.go). Nothing matches a packet while nothing is
// handed off.
package handoff

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TableName is the inet table the hand-off owns.
const TableName = "portico-handoff"

// Config is where the hand-off's marks and routes live; the defaults suit a node whose other
// networking does not use the same mark bit, routing table or rule priority.
type Config struct {
	// Mark is the one bit of the packet and connection mark that says "handed off by this
	// node"; it must not be one kube-proxy (0x4000, 0x8000), the CNI or a mesh uses.
	Mark uint32
	// SlotMask holds the slot of a flow handed off by flow (flows.go): contiguous bits, none
	// of them Mark's; its values are also the number of node addresses flows can go to. Zero:
	// no hand-off by flow (SetFlows and HoldBack fail with ErrNoFlows).
	SlotMask uint32
	// RouteTable holds the routes to the previous owners, RouteTable + slot each slot's route;
	// RulePriority is the policy-routing rules', ahead of the main table's (32766).
	RouteTable, RulePriority int
}

// Defaults: bit 13 of the mark, bits 0-7 for the slots (255 node addresses), table and rule
// 3580, slots' tables 3581-3835. Calico claims 0xffff0000 of the mark, Cilium 0xffff0f00
// (and 0x00ff with cluster mesh), Istio's ambient mode 0x0fff, kube-proxy 0x4000 and 0x8000.
var Defaults = Config{Mark: 0x2000, SlotMask: 0x000000ff, RouteTable: 3580, RulePriority: 3580}

// ErrNoFlows says that the hand-off has no slot bits (Config.SlotMask zero): it hands flows off
// by address only.
var ErrNoFlows = errors.New("the hand-off has no slot bits: it hands off no flows by flow")

// Entry is one address taken over and the node address its flows are handed to.
type Entry struct {
	Addr, Via netip.Addr
	// Expires is when the kernel stops picking up flows for Addr (zero: it already has).
	Expires time.Time
}

// Handoff holds the table, the rules and the routes. Its methods may be called from any
// goroutine.
type Handoff struct {
	mu      sync.Mutex
	cfg     Config
	conn    *nftables.Conn
	table   *nftables.Table
	pickup  *nftables.Chain
	maps    map[bool]*nftables.Set // by "is IPv4"
	adopted []Entry                // what an earlier run left, read by Open

	flowMaps map[bool]*nftables.Set // flows4, flows6 (flows.go)
	held     map[bool]*nftables.Set // held4, held6 (flows.go: HoldBack)
	slotMap  *nftables.Set          // slot mark → its chain
	slots    []slot
	ruled    map[RoutingRule]bool // the rules by address Set made (or Open kept)
}

// Open creates the table and the rules, keeping the elements an earlier run left (with what is
// left of their timeouts) and its routes, which Adopted lists: the caller keeps those still
// true and removes the others. It needs CAP_NET_ADMIN in the node's network namespace.
func Open(cfg Config) (*Handoff, error) {
	if cfg.Mark == 0 || cfg.Mark&(cfg.Mark-1) != 0 {
		return nil, fmt.Errorf("hand-off mark %#x is not a single bit", cfg.Mark)
	}
	if err := cfg.checkSlotMask(); err != nil {
		return nil, err
	}
	conn, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, err
	}
	h := newHandoff(cfg, conn)
	left := h.leftElements()
	if h.slots, err = h.leftSlots(); err != nil {
		conn.CloseLasting()
		return nil, err
	}
	if err := h.create(left); err != nil {
		conn.CloseLasting()
		return nil, err
	}
	if err := h.adopt(left); err != nil {
		conn.CloseLasting()
		return nil, err
	}
	return h, nil
}

// newHandoff is the hand-off's table and sets as cfg names them, on conn.
func newHandoff(cfg Config, conn *nftables.Conn) *Handoff {
	h := &Handoff{cfg: cfg, conn: conn, table: &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet},
		ruled: map[RoutingRule]bool{}}
	h.maps = map[bool]*nftables.Set{
		true:  {Table: h.table, Name: "previous4", KeyType: nftables.TypeIPAddr, DataType: nftables.TypeIPAddr, IsMap: true, HasTimeout: true},
		false: {Table: h.table, Name: "previous6", KeyType: nftables.TypeIP6Addr, DataType: nftables.TypeIP6Addr, IsMap: true, HasTimeout: true},
	}
	h.flowMaps = map[bool]*nftables.Set{true: flowMapOf(h.table, true), false: flowMapOf(h.table, false)}
	h.held = map[bool]*nftables.Set{
		true:  {Table: h.table, Name: "held4", KeyType: nftables.TypeIPAddr, HasTimeout: true},
		false: {Table: h.table, Name: "held6", KeyType: nftables.TypeIP6Addr, HasTimeout: true},
	}
	h.slotMap = &nftables.Set{Table: h.table, Name: "slots", KeyType: nftables.TypeMark, DataType: nftables.TypeVerdict, IsMap: true}
	return h
}

// adopt keeps what an earlier run left: its routes (the entries, with the expiry of their
// elements in left), rules and slots.
func (h *Handoff) adopt(left map[netip.Addr]nftables.SetElement) error {
	routes, err := h.routes()
	if err != nil {
		return err
	}
	now := time.Now()
	for _, r := range routes {
		e := Entry{Addr: r.Addr, Via: r.Via}
		if el, ok := left[r.Addr]; ok && el.Expires > 0 {
			e.Expires = now.Add(el.Expires)
		}
		h.adopted = append(h.adopted, e)
	}
	// An earlier run's routes and slots are kept (the flows it hands off keep their way), their
	// rules made as this run's config says, and every other rule and slot route pruned.
	want := h.wantedRules(routes)
	if err := errors.Join(h.pruneSlotRoutes(), h.syncRules(want)); err != nil {
		return err
	}
	for _, r := range want {
		h.ruled[r] = r.Table == h.cfg.RouteTable
	}
	for _, s := range h.slots {
		if err := h.routeSlot(s); err != nil {
			return err
		}
	}
	return nil
}

// Adopted lists the routes an earlier run left, with their elements' expiry.
func (h *Handoff) Adopted() []Entry { return h.adopted }

// leftElements reads the elements of an earlier run's maps, by address.
func (h *Handoff) leftElements() map[netip.Addr]nftables.SetElement {
	out := map[netip.Addr]nftables.SetElement{}
	for _, set := range h.maps {
		elems, err := h.conn.GetSetElements(set)
		if err != nil {
			continue // no table yet
		}
		for _, el := range elems {
			if ip, ok := netip.AddrFromSlice(el.Key); ok {
				out[ip] = el
			}
		}
	}
	return out
}

// create replaces the table with a fresh one holding elements left (their timeouts what was
// left of them).
func (h *Handoff) create(left map[netip.Addr]nftables.SetElement) error {
	c := h.conn
	c.AddTable(h.table)
	c.DelTable(h.table)
	c.AddTable(h.table)
	h.pickup = c.AddChain(&nftables.Chain{Name: "pickup", Table: h.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle})
	bind := c.AddChain(&nftables.Chain{Name: "bind", Table: h.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityNATDest - 10)})
	for _, v4 := range []bool{true, false} {
		c.AddObj(pickedUpTimeouts(h.table, v4))
	}
	for v4, set := range h.maps {
		var elems []nftables.SetElement
		for ip, el := range left {
			if ip.Is4() == v4 && el.Expires > 0 {
				elems = append(elems, nftables.SetElement{Key: el.Key, Val: el.Val, Timeout: el.Expires})
			}
		}
		if err := c.AddSet(set, elems); err != nil {
			return err
		}
		c.AddRule(&nftables.Rule{Table: h.table, Chain: h.pickup, Exprs: markMidStream(set, v4, h.cfg.Mark, h.cfg.SlotMask), UserData: tagL2Flows})
		c.AddRule(&nftables.Rule{Table: h.table, Chain: h.pickup, Exprs: passClosing(set, v4, h.cfg.Mark, h.cfg.SlotMask)})
		c.AddRule(&nftables.Rule{Table: h.table, Chain: bind, Exprs: nullBinding(v4, h.cfg.Mark)})
	}
	c.AddRule(&nftables.Rule{Table: h.table, Chain: h.pickup, Exprs: markPacket(h.cfg.Mark, h.cfg.SlotMask), UserData: tagL2Packets})
	if h.cfg.SlotMask != 0 {
		if err := h.createFlows(); err != nil {
			return err
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("creating nftables table inet %s: %w", TableName, err)
	}
	return nil
}

// createFlows queues the maps, sets and rules of the hand-off by flow (flows.go).
func (h *Handoff) createFlows() error {
	c := h.conn
	// The flows handed off by slot (flows.go): their maps start empty (the flows are shared
	// again at the next change), their slots' chains are those of the slots left.
	if err := c.AddSet(h.slotMap, nil); err != nil {
		return err
	}
	for _, s := range h.slots {
		h.addSlotChain(s)
	}
	for v4, set := range h.flowMaps {
		if err := c.AddSet(set, nil); err != nil {
			return err
		}
		c.AddRule(&nftables.Rule{Table: h.table, Chain: h.pickup, Exprs: pickUpFlow(set, v4, h.cfg.Mark), UserData: tagFlows})
		c.AddRule(&nftables.Rule{Table: h.table, Chain: h.pickup, Exprs: passClosingFlow(set, v4)})
		if err := c.AddSet(h.held[v4], nil); err != nil {
			return err
		}
		c.AddRule(&nftables.Rule{Table: h.table, Chain: h.pickup, Exprs: holdBack(h.held[v4], v4, h.cfg.Mark), UserData: tagHeldBack})
	}
	c.AddRule(&nftables.Rule{Table: h.table, Chain: h.pickup, Exprs: markSlotPacket(h.slotMap, h.cfg.Mark, h.cfg.SlotMask), UserData: tagPackets})
	return nil
}

// Set hands the flows of addr that this node has no state for to via for grace (a new
// element), and routes the marked flows of addr to via.
func (h *Handoff) Set(addr, via netip.Addr, grace time.Duration) error {
	addr, via = addr.Unmap(), via.Unmap()
	if addr.Is4() != via.Is4() {
		return fmt.Errorf("handing %s off to %s: not the same family", addr, via)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := netlink.RouteReplace(h.route(addr, via)); err != nil {
		return fmt.Errorf("routing the flows of %s handed off to %s: %w", addr, via, err)
	}
	if r := h.cfg.addressRule(addr.Is4()); !h.ruled[r] {
		if err := netlink.RuleAdd(toNetlink(r)); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("adding the hand-off's routing rule %s: %w", r, err)
		}
		h.ruled[r] = true
	}
	if err := h.replaceElements(h.maps[addr.Is4()], []nftables.SetElement{{Key: addr.AsSlice(), Val: via.AsSlice(), Timeout: grace}}); err != nil {
		return fmt.Errorf("handing %s off to %s: %w", addr, via, err)
	}
	return nil
}

// replaceElements adds elems to set, in batches (one netlink message holds a few thousand),
// each in one transaction with the deletion of those of their keys set has already: an element
// added again keeps its value and timeout, or, with another value, fails the whole batch
// (EEXIST); deleted in a transaction of its own first, the key would have no element for a
// moment, and a packet then would go unhanded. A batch that fails is tried once more with the
// keys read again: one may have expired since.
func (h *Handoff) replaceElements(set *nftables.Set, elems []nftables.SetElement) error {
	present := h.keys(set)
	for batch := range slices.Chunk(elems, 1024) {
		for try := 0; ; try++ {
			var again []nftables.SetElement
			for _, el := range batch {
				if present[string(el.Key)] {
					again = append(again, nftables.SetElement{Key: el.Key})
				}
			}
			if len(again) > 0 {
				if err := h.conn.SetDeleteElements(set, again); err != nil {
					return err
				}
			}
			if err := h.conn.SetAddElements(set, batch); err != nil {
				return err
			}
			err := h.conn.Flush()
			if err == nil {
				break
			}
			if len(again) == 0 || try > 0 {
				return err
			}
			present = h.keys(set)
		}
	}
	return nil
}

// keys is the keys set holds now (none if it cannot be read).
func (h *Handoff) keys(set *nftables.Set) map[string]bool {
	keys := map[string]bool{}
	if elems, err := h.conn.GetSetElements(set); err == nil {
		for _, el := range elems {
			keys[string(el.Key)] = true
		}
	}
	return keys
}

// deleteElement deletes addr's element from set if it has one (or set cannot be read). Only
// then: deleting an absent element fails the whole batch, and the kernel's abort of it took
// 12 ms (median) against 50 µs for the read.
func (h *Handoff) deleteElement(set *nftables.Set, addr netip.Addr) {
	elems, err := h.conn.GetSetElements(set)
	if err == nil && !slices.ContainsFunc(elems, func(el nftables.SetElement) bool { return bytes.Equal(el.Key, addr.AsSlice()) }) {
		return
	}
	_ = h.conn.SetDeleteElements(set, []nftables.SetElement{{Key: addr.AsSlice()}})
	_ = h.conn.Flush()
}

// Remove stops handing addr's flows off: no new ones are picked up, and those marked lose their
// route (they are the previous owner's no longer: it answers again, or is gone).
func (h *Handoff) Remove(addr netip.Addr) error {
	addr = addr.Unmap()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deleteElement(h.maps[addr.Is4()], addr) // one already expired is no error
	err := netlink.RouteDel(h.route(addr, netip.Addr{}))
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("removing the hand-off route of %s: %w", addr, err)
	}
	if err := h.unruleIfIdle(addr.Is4()); err != nil {
		return err
	}
	mask := h.cfg.Mark | h.cfg.SlotMask
	return forget(func(f *netlink.ConntrackFlow) bool {
		return f.Mark&mask == h.cfg.Mark && f.Forward.DstIP.Equal(addr.AsSlice())
	})
}

// unruleIfIdle removes the rule by address of a family whose routing table holds no route
// any more.
func (h *Handoff) unruleIfIdle(v4 bool) error {
	routes, err := h.routes()
	if err != nil {
		return err
	}
	if slices.ContainsFunc(routes, func(e Entry) bool { return e.Addr.Is4() == v4 }) {
		return nil
	}
	r := h.cfg.addressRule(v4)
	delete(h.ruled, r)
	if err := netlink.RuleDel(toNetlink(r)); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing the routing rule %s: %w", r, err)
	}
	return nil
}

// Counts reads the table's counters: the flows picked up and the packets handed off since the
// table was made.
func (h *Handoff) Counts() (flows, packets uint64, err error) {
	n, err := h.counts(tagL2Flows, tagL2Packets)
	return n[0], n[1], err
}

// Rule tags (UserData), which counts reads the counters by.
var (
	tagL2Flows   = []byte("l2-flows")
	tagL2Packets = []byte("l2-packets")
	tagFlows     = []byte("flows")
	tagPackets   = []byte("flow-packets")
	tagHeldBack  = []byte("held-back")
)

// counts sums the packet counters of the pick-up chain's rules by tag, one sum per tag.
func (h *Handoff) counts(tags ...[]byte) ([]uint64, error) {
	sums := make([]uint64, len(tags))
	h.mu.Lock()
	defer h.mu.Unlock()
	rules, err := h.conn.GetRules(h.table, h.pickup)
	if err != nil {
		return sums, err
	}
	for _, r := range rules {
		i := slices.IndexFunc(tags, func(tag []byte) bool { return slices.Equal(r.UserData, tag) })
		for _, e := range r.Exprs {
			if n, ok := e.(*expr.Counter); ok && i >= 0 {
				sums[i] += n.Packets
			}
		}
	}
	return sums, nil
}

// Release lets the kernel state be: it is the node's, as the connection-tracking entries it
// works with are, and must outlive the speaker for the same reason (a speaker restarted by a
// rolling update would otherwise cut the flows it handed off, and they would loop between it
// and the address's next owner). Its elements expire by themselves; its routes are the next
// run's to adopt or remove (Adopted).
func (h *Handoff) Release() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conn.CloseLasting()
}

// Clear removes the table, the rules and the routes, and the connection-tracking entries
// marked by the hand-off, and releases the socket: the hand-off is switched off.
func (h *Handoff) Clear() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clear(true)
}

// Cleanup removes what a hand-off of cfg's table and routing tables left on the node, without
// opening one: the table, the rules and the routes, and, with entries, the connection-tracking
// entries whose mark has cfg.Mark (false when that bit is not the hand-off's alone on this node:
// the entries may be another's). It is what a speaker whose hand-off is off does at its start;
// nothing left is no error. It needs CAP_NET_ADMIN in the node's network namespace.
func Cleanup(cfg Config, entries bool) error {
	conn, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return err
	}
	h := &Handoff{cfg: cfg, conn: conn, table: &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet},
		ruled: map[RoutingRule]bool{}}
	return h.clear(entries)
}

// clear is Clear's and Cleanup's (under h.mu when h is open).
func (h *Handoff) clear(entries bool) error {
	var errs []error
	h.conn.AddTable(h.table) // added first: a table already gone is no error
	h.conn.DelTable(h.table)
	errs = append(errs, h.conn.Flush())
	routes, err := h.routes()
	errs = append(errs, err)
	for _, r := range routes {
		if err := netlink.RouteDel(h.route(r.Addr, netip.Addr{})); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, err)
		}
	}
	h.slots = nil
	clear(h.ruled)
	errs = append(errs, h.pruneSlotRoutes(), h.syncRules(nil), h.conn.CloseLasting())
	if entries {
		errs = append(errs, forget(func(f *netlink.ConntrackFlow) bool { return f.Mark&h.cfg.Mark != 0 }))
	}
	return errors.Join(errs...)
}

func (h *Handoff) route(addr, via netip.Addr) *netlink.Route {
	r := &netlink.Route{Dst: netlinkPrefix(netip.PrefixFrom(addr, addr.BitLen())), Table: h.cfg.RouteTable}
	if via.IsValid() {
		r.Gw = via.AsSlice()
	}
	return r
}

// routes lists the routes in the hand-off's routing table.
func (h *Handoff) routes() ([]Entry, error) {
	var out []Entry
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RouteListFiltered(family, &netlink.Route{Table: h.cfg.RouteTable}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("listing routing table %d: %w", h.cfg.RouteTable, err)
		}
		for _, r := range rs {
			if r.Dst == nil {
				continue
			}
			addr, _ := netip.AddrFromSlice(r.Dst.IP)
			via, _ := netip.AddrFromSlice(r.Gw)
			out = append(out, Entry{Addr: addr.Unmap(), Via: via.Unmap()})
		}
	}
	return out, nil
}

func netlinkPrefix(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
