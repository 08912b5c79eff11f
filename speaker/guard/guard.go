// Package guard keeps a node from routing the traffic of the addresses it announces back out
// untranslated.
//
// A node that answers for a Service's address (over ARP/NDP or BGP) receives its traffic, and
// the node's service proxy (kube-proxy in iptables or nftables mode) translates it to a
// backend. Until the proxy has a rule for the address (a Service that just got it, a node whose
// proxy is still starting) the kernel routes the packets on as they came: out of the link,
// towards the address the node itself claims, where nobody else answers. Worse than the packet,
// connection tracking confirms that flow untranslated, and every retransmission of the same
// connection (a TCP SYN is retried for about two minutes; UDP clients often keep their port)
// matches that entry and is routed the same way, long after the proxy's rule exists.
//
// The guard drops those packets in the forward hook, before connection tracking confirms the
// flow, so the client's next retransmission is translated once the proxy's rule is there: the
// client loses one retransmission timeout (a second for a TCP SYN), not its connection.
// Translated packets (conntrack status DNAT) pass untouched, and so does whatever a datapath
// handles before the forward hook (IPVS's local addresses, eBPF load balancers).
//
// No served library does this job; it is one nftables table, written with google/nftables.
package guard

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// TableName is the inet table the guard owns; a speaker's start replaces any it left behind.
const TableName = "portico"

// dstNAT is IPS_DST_NAT, conntrack's status bit for a destination-translated flow.
const dstNAT = 1 << 5

// Guard holds the table and the addresses in its sets. Its methods may be called from any
// goroutine (the speaker's loop changes the sets, a metrics scrape reads the counters).
type Guard struct {
	mu     sync.Mutex // one netlink exchange at a time on the one socket
	conn   *nftables.Conn
	table  *nftables.Table
	chain  *nftables.Chain
	sets   map[bool]*nftables.Set // by "is IPv4"
	guards map[netip.Addr]bool
}

// Open replaces the table with an empty one: a forward chain that drops untranslated packets
// to the addresses in its two sets, except those of flows whose connection mark has the bit
// exempt (0: none), which the node hands on untranslated on purpose (package handoff). It needs
// CAP_NET_ADMIN in the node's network namespace.
func Open(exempt uint32) (*Guard, error) {
	conn, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, err
	}
	g := &Guard{conn: conn, guards: map[netip.Addr]bool{}}
	g.table = &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	// Added, deleted and added again in one batch: whatever an earlier run left is gone, and a
	// missing table is no error.
	conn.AddTable(g.table)
	conn.DelTable(g.table)
	conn.AddTable(g.table)
	g.chain = conn.AddChain(&nftables.Chain{Name: "forward", Table: g.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
	g.sets = map[bool]*nftables.Set{
		true:  {Table: g.table, Name: "announced4", KeyType: nftables.TypeIPAddr},
		false: {Table: g.table, Name: "announced6", KeyType: nftables.TypeIP6Addr},
	}
	for v4, set := range g.sets {
		if err := conn.AddSet(set, nil); err != nil {
			conn.CloseLasting()
			return nil, err
		}
		conn.AddRule(&nftables.Rule{Table: g.table, Chain: g.chain, Exprs: dropUntranslated(set, v4, exempt)})
	}
	if err := conn.Flush(); err != nil {
		conn.CloseLasting()
		return nil, fmt.Errorf("creating nftables table inet %s: %w", TableName, err)
	}
	return g, nil
}

// dropUntranslated is `meta nfproto ipv4 ip daddr @set ct status & dnat == 0 [ct mark & exempt
// == 0] counter drop` (ip6 for an IPv6 set).
func dropUntranslated(set *nftables.Set, v4 bool, exempt uint32) []expr.Any {
	proto, offset, length := byte(unix.NFPROTO_IPV6), uint32(24), uint32(16)
	if v4 {
		proto, offset, length = unix.NFPROTO_IPV4, 16, 4
	}
	exprs := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: length},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(dstNAT), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
	if exempt != 0 {
		exprs = append(exprs,
			&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(exempt), Xor: binaryutil.NativeEndian.PutUint32(0)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)})
	}
	return append(exprs, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
}

// Add guards the addresses (before the node announces them); those already guarded cost nothing.
func (g *Guard) Add(addrs []netip.Addr) error {
	return g.update(addrs, true)
}

// Remove stops guarding the addresses (once the node no longer announces them).
func (g *Guard) Remove(addrs []netip.Addr) error {
	return g.update(addrs, false)
}

func (g *Guard) update(addrs []netip.Addr, add bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	byFamily := map[bool][]nftables.SetElement{}
	for _, ip := range addrs {
		ip = ip.Unmap()
		if g.guards[ip] == add {
			continue
		}
		byFamily[ip.Is4()] = append(byFamily[ip.Is4()], nftables.SetElement{Key: ip.AsSlice()})
	}
	if len(byFamily) == 0 {
		return nil
	}
	for v4, elems := range byFamily {
		var err error
		if add {
			err = g.conn.SetAddElements(g.sets[v4], elems)
		} else {
			err = g.conn.SetDeleteElements(g.sets[v4], elems)
		}
		if err != nil {
			return err
		}
	}
	if err := g.conn.Flush(); err != nil {
		return fmt.Errorf("updating the addresses of nftables table inet %s: %w", TableName, err)
	}
	for _, elems := range byFamily {
		for _, e := range elems {
			ip, _ := netip.AddrFromSlice(e.Key)
			if add {
				g.guards[ip] = true
			} else {
				delete(g.guards, ip)
			}
		}
	}
	return nil
}

// Dropped counts the packets the guard dropped since Open.
func (g *Guard) Dropped() (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	rules, err := g.conn.GetRules(g.table, g.chain)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, r := range rules {
		for _, e := range r.Exprs {
			if c, ok := e.(*expr.Counter); ok {
				n += c.Packets
			}
		}
	}
	return n, nil
}

// Close deletes the table: a node that stopped announcing has nothing to guard.
func (g *Guard) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.conn.DelTable(g.table)
	err := g.conn.Flush()
	return errors.Join(err, g.conn.CloseLasting())
}
