package handoff

import (
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The pickup chain's rules by address and the bind chain's, as nftables expressions (each
// function's comment gives its rule in nft's syntax); flows.go has those by flow.

// markMidStream is `meta nfproto ipv4 meta l4proto tcp ct state new ct mark & MARK == 0 tcp
// flags & (syn|ack) != syn ip daddr @previous4 ct mark set ct mark & ~SLOTS | MARK ct timeout
// set "picked-up4" counter` (ip6 for IPv6): a flow whose first packet this node sees is not a
// SYN, to an address taken over; its entry goes soon after the flow closes (ClosingTimeout).
// Its connection mark is MARK with no slot: handed off by address (the slots' bits cleared,
// whoever set them, so that the flow is told from one handed off by slot).
// (Every packet of a handed-off flow is ct state new here, since its replies never pass this
// node: the mark test makes the counter count flows.)
func markMidStream(set *nftables.Set, v4 bool, mark, slots uint32) []expr.Any {
	out := append(midStream(v4, mark), daddrIn(set, v4)...)
	return append(out,
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
		setBits(mark|slots, mark),
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK, SourceRegister: true},
		setPickedUpTimeouts(v4),
		&expr.Counter{},
	)
}

// setBits is the bitwise expression `register 1 & ~MASK | VALUE`: the bits of mask set to value.
func setBits(mask, value uint32) *expr.Bitwise {
	return &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
		Mask: binaryutil.NativeEndian.PutUint32(^mask), Xor: binaryutil.NativeEndian.PutUint32(value)}
}

// hasBits is `register 1 & MASK == VALUE`, loaded from load.
func hasBits(load expr.Any, mask, value uint32) []expr.Any {
	return []expr.Any{load,
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(value)},
	}
}

// ctMark and metaMark load the connection's and the packet's mark into register 1.
func ctMark() expr.Any   { return &expr.Ct{Register: 1, Key: expr.CtKeyMARK} }
func metaMark() expr.Any { return &expr.Meta{Key: expr.MetaKeyMARK, Register: 1} }

// midStream is `meta nfproto ipv4 meta l4proto tcp ct state new ct mark & MARK == 0 tcp flags
// & (syn|ack) != syn` (ipv6 for IPv6): a TCP flow whose first packet here is not a SYN, not
// picked up by a hand-off yet.
func midStream(v4 bool, mark uint32) []expr.Any {
	out := append(tcpInState(v4, expr.CtStateBitNEW), hasBits(ctMark(), mark, 0)...)
	return append(out,
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{tcpSYN | tcpACK}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{tcpSYN}},
	)
}

// closingStateless is `meta nfproto ipv4 meta l4proto tcp ct state invalid tcp flags & (fin|rst)
// != 0` (ipv6 for IPv6): a FIN or a reset this node tracks no flow for. Conntrack opens no entry
// for either (neither can be a flow's first packet), and a reset ends at once an entry that saw
// no answer, as a picked-up flow's never does: the packets that close a connection handed off
// come here without state when they are the first of it since the move (a client closing an
// idle kept-alive connection) or follow a reset. Passed on to the node that holds the flow, they
// close it there; dropped, the backend never learnt of the close and that node's entry stayed
// ESTABLISHED, translated to the backend, for days: a new connection from the same client port
// that reached that node later followed it (on the kubelet cluster, to pods long deleted, and
// never connected). Without an entry they are not translated here (NAT needs one) and arrive at
// the holder unchanged, as the picked-up flows' packets do.
func closingStateless(v4 bool) []expr.Any {
	return append(tcpInState(v4, expr.CtStateBitINVALID),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{tcpFIN | tcpRST}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0}},
	)
}

// daddrIn is `ip daddr @SET` (ip6 for IPv6).
func daddrIn(set *nftables.Set, v4 bool) []expr.Any {
	offset, length := uint32(24), uint32(16)
	if v4 {
		offset, length = 16, 4
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: length},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
	}
}

// tcpInState is `meta nfproto ipv4 meta l4proto tcp ct state STATE` (ipv6 for IPv6).
func tcpInState(v4 bool, state uint32) []expr.Any {
	proto := byte(unix.NFPROTO_IPV6)
	if v4 {
		proto = unix.NFPROTO_IPV4
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(state), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

// passClosing is `closingStateless ip daddr @previous4 meta mark set meta mark & ~SLOTS | MARK
// counter` (ip6 for IPv6): such a packet to an address taken over goes the way of its flow.
func passClosing(set *nftables.Set, v4 bool, mark, slots uint32) []expr.Any {
	out := append(closingStateless(v4), daddrIn(set, v4)...)
	return append(out,
		metaMark(),
		setBits(mark|slots, mark),
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1, SourceRegister: true},
		&expr.Counter{},
	)
}

// markPacket is `ct mark & (MARK|SLOTS) == MARK meta mark set meta mark & ~SLOTS | MARK counter`:
// every packet of a flow handed off by address carries the mark its routing rule looks at.
// Only a flow this node's own rule picked up has MARK in its connection mark.
func markPacket(mark, slots uint32) []expr.Any {
	out := hasBits(ctMark(), mark|slots, mark)
	return append(out,
		metaMark(),
		setBits(mark|slots, mark),
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1, SourceRegister: true},
		&expr.Counter{},
	)
}

// nullBinding is `meta nfproto ipv4 ct mark & MARK == MARK dnat ip to ip daddr` (ip6 for IPv6):
// a translation to the address the flow already has, which binds the flow so that no later NAT
// chain (the service proxy's DNAT) translates it. MARK in the connection mark is set by the
// pick-up rules alone (by address or by slot), so a flow is bound only when this node picked it
// up: never for a bit of the packet's mark, which the CNI, a mesh or kube-proxy may own.
func nullBinding(v4 bool, mark uint32) []expr.Any {
	proto, offset, length, family := byte(unix.NFPROTO_IPV6), uint32(24), uint32(16), uint32(unix.NFPROTO_IPV6)
	if v4 {
		proto, offset, length, family = unix.NFPROTO_IPV4, 16, 4, unix.NFPROTO_IPV4
	}
	out := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
	out = append(out, hasBits(ctMark(), mark, mark)...)
	return append(out,
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: length},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: family, RegAddrMin: 1, RegAddrMax: 1},
	)
}

const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)
