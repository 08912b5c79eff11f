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
// flags & (syn|ack) != syn ip daddr @previous4 ct mark set ct mark | MARK ct timeout set
// "picked-up4" counter` (ip6 for IPv6): a flow whose first packet this node sees is not a SYN,
// to an address taken over; its entry goes soon after the flow closes (ClosingTimeout).
// (Every packet of a handed-off flow is ct state new here, since its replies never pass this
// node: the mark test makes the counter count flows.)
func markMidStream(set *nftables.Set, v4 bool, mark uint32) []expr.Any {
	out := append(midStream(v4, mark), daddrIn(set, v4)...)
	return append(out,
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(^mark), Xor: binaryutil.NativeEndian.PutUint32(mark)},
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK, SourceRegister: true},
		setPickedUpTimeouts(v4),
		&expr.Counter{},
	)
}

// midStream is `meta nfproto ipv4 meta l4proto tcp ct state new ct mark & MARKS == 0 tcp flags
// & (syn|ack) != syn` (ipv6 for IPv6): a TCP flow whose first packet here is not a SYN, not
// marked by a hand-off yet.
func midStream(v4 bool, marks uint32) []expr.Any {
	return append(tcpInState(v4, expr.CtStateBitNEW),
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(marks), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
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

// passClosing is `closingStateless ip daddr @previous4 meta mark set meta mark | MARK counter`
// (ip6 for IPv6): such a packet to an address taken over goes the way of its flow.
func passClosing(set *nftables.Set, v4 bool, mark uint32) []expr.Any {
	out := append(closingStateless(v4), daddrIn(set, v4)...)
	return append(out,
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(^mark), Xor: binaryutil.NativeEndian.PutUint32(mark)},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1, SourceRegister: true},
		&expr.Counter{},
	)
}

// markPacket is `ct mark & MARK == MARK meta mark set meta mark | MARK counter`: every packet
// of a handed-off flow carries the mark the routing rule looks at.
func markPacket(mark uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(mark), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(mark)},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(^mark), Xor: binaryutil.NativeEndian.PutUint32(mark)},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1, SourceRegister: true},
		&expr.Counter{},
	}
}

// nullBinding is `meta nfproto ipv4 meta mark & MARKS != 0 dnat ip to ip daddr` (ip6 for
// IPv6): a translation to the address the flow already has, which binds the flow so that no
// later NAT chain (the service proxy's DNAT) translates it. MARKS are the hand-off bit and the
// slots' bits.
func nullBinding(v4 bool, marks uint32) []expr.Any {
	proto, offset, length, family := byte(unix.NFPROTO_IPV6), uint32(24), uint32(16), uint32(unix.NFPROTO_IPV6)
	if v4 {
		proto, offset, length, family = unix.NFPROTO_IPV4, 16, 4, unix.NFPROTO_IPV4
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(marks), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: length},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: family, RegAddrMin: 1, RegAddrMax: 1},
	}
}

const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)
