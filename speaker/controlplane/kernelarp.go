package controlplane

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// KernelARPTable is the arp table the mode owns on a control-plane node.
const KernelARPTable = "portico-control-plane"

// arpOut is NF_ARP_OUT (linux/netfilter_arp.h), the arp family's output hook.
const arpOut nftables.ChainHook = 1

// quietKernelARP keeps this node's kernel from answering ARP for the VIP: the owner puts the
// VIP on lo, and Linux answers ARP on every interface for every local address
// (net.ipv4.conf.*.arp_ignore 0), so a speaker killed while holding the VIP would leave its
// kernel answering for it beside the new owner's. One nftables table of family arp drops, on
// the way out, every ARP reply whose sender address is the VIP; the announcer's answers leave
// through a packet socket, which the hook does not see. The table outlives the speaker on
// purpose (the next start replaces it). IPv6 needs nothing: the kernel answers neighbour
// solicitations only for the addresses of the interface asked on, and lo's are not.
//
// No served library does this job; it is one nftables table, written with google/nftables.
func quietKernelARP(vip netip.Addr) error {
	if !vip.Is4() {
		return nil
	}
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("the kernel's ARP for the VIP: %w", err)
	}
	table := &nftables.Table{Name: KernelARPTable, Family: nftables.TableFamilyARP}
	// Added, deleted and added again in one batch: whatever an earlier run left is gone.
	conn.AddTable(table)
	conn.DelTable(table)
	conn.AddTable(table)
	chain := conn.AddChain(&nftables.Chain{Name: "output", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookRef(arpOut), Priority: nftables.ChainPriorityFilter})
	conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		// The operation (bytes 6-7 of the ARP header): 2, a reply.
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 6, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, 2}},
		// The sender's protocol address (bytes 14-17 over Ethernet): the VIP.
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 14, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: vip.AsSlice()},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}})
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("the kernel's ARP for the VIP: nftables table arp %s: %w", KernelARPTable, err)
	}
	return nil
}
