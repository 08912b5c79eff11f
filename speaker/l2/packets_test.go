package l2

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

var (
	ourMAC    = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0a}
	otherMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0b}
	clientMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	vip4      = netip.MustParseAddr("198.51.100.200")
	vip6      = netip.MustParseAddr("2001:db8:1::200")
	clientIP  = netip.MustParseAddr("198.51.100.1")
)

func ownsVIPs(ip netip.Addr) bool { return ip == vip4 || ip == vip6 }

func arpFrame(t testing.TB, op arp.Operation, dst, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) []byte {
	t.Helper()
	p, err := arp.NewPacket(op, sha, spa, tha, tpa)
	if err != nil {
		t.Fatal(err)
	}
	return ethernetFrame(dst, sha, p)
}

// readARP parses frame as an Ethernet frame carrying ARP, with the libraries a peer would use.
func readARP(frame []byte) (ethernet.Frame, arp.Packet, bool) {
	var f ethernet.Frame
	var p arp.Packet
	if f.UnmarshalBinary(frame) != nil || f.EtherType != ethernet.EtherTypeARP || p.UnmarshalBinary(f.Payload) != nil {
		return f, p, false
	}
	return f, p, true
}

// withByte is frame with byte i set to v.
func withByte(frame []byte, i int, v byte) []byte {
	out := bytes.Clone(frame)
	out[i] = v
	return out
}

// vlanTagged inserts an 802.1Q tag (VLAN 10) after frame's addresses.
func vlanTagged(frame []byte) []byte {
	return append(append(bytes.Clone(frame[:12]), 0x81, 0x00, 0x00, 0x0a), frame[12:]...)
}

type arpReplyCase struct {
	name   string
	frame  []byte
	answer bool
}

// arpReplyCases are the frames TestARPReply judges by hand; FuzzARPReply starts from them.
func arpReplyCases(t testing.TB) []arpReplyCase {
	zero := net.HardwareAddr{0, 0, 0, 0, 0, 0}
	multicast := net.HardwareAddr{0x01, 0x00, 0x5e, 0, 0, 0x01}
	return []arpReplyCase{
		{"broadcast request for an owned address", arpFrame(t, arp.OperationRequest, ethernet.Broadcast, clientMAC, clientIP, zero, vip4), true},
		{"unicast request to our MAC (a kernel's reachability probe)", arpFrame(t, arp.OperationRequest, ourMAC, clientMAC, clientIP, zero, vip4), true},
		{"unicast request to another MAC, flooded by the bridge", arpFrame(t, arp.OperationRequest, otherMAC, clientMAC, clientIP, zero, vip4), false},
		{"request to a multicast MAC", arpFrame(t, arp.OperationRequest, multicast, clientMAC, clientIP, zero, vip4), false},
		{"request for an address we do not own", arpFrame(t, arp.OperationRequest, ethernet.Broadcast, clientMAC, clientIP, zero, netip.MustParseAddr("198.51.100.201")), false},
		{"a reply", arpFrame(t, arp.OperationReply, ethernet.Broadcast, clientMAC, clientIP, zero, vip4), false},
		{"another node's gratuitous request", arpFrame(t, arp.OperationRequest, ethernet.Broadcast, otherMAC, vip4, zero, vip4), false},
		{"our own gratuitous request seen on the way out", arpFrame(t, arp.OperationRequest, ethernet.Broadcast, ourMAC, vip4, zero, vip4), false},
		{"truncated", arpFrame(t, arp.OperationRequest, ethernet.Broadcast, clientMAC, clientIP, zero, vip4)[:30], false},
		{"hardware type other than Ethernet", withByte(arpFrame(t, arp.OperationRequest, ethernet.Broadcast, clientMAC, clientIP, zero, vip4), 15, 6), false},
		{"protocol type other than IPv4", withByte(arpFrame(t, arp.OperationRequest, ethernet.Broadcast, clientMAC, clientIP, zero, vip4), 16, 0x30), false},
		{"VLAN-tagged (the answer would leave untagged)", vlanTagged(arpFrame(t, arp.OperationRequest, ethernet.Broadcast, clientMAC, clientIP, zero, vip4)), false},
		{"empty", nil, false},
	}
}

func TestARPReply(t *testing.T) {
	for _, tc := range arpReplyCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			reply := arpReply(tc.frame, ourMAC, ownsVIPs)
			if (reply != nil) != tc.answer {
				t.Fatalf("answered=%v, want %v", reply != nil, tc.answer)
			}
			if reply == nil {
				return
			}
			f, p, ok := readARP(reply)
			if !ok || !bytes.Equal(f.Destination, clientMAC) || p.Operation != arp.OperationReply ||
				!bytes.Equal(p.SenderHardwareAddr, ourMAC) || p.SenderIP != vip4 ||
				!bytes.Equal(p.TargetHardwareAddr, clientMAC) || p.TargetIP != clientIP {
				t.Fatalf("bad reply: eth %v, arp %+v", f.Destination, p)
			}
		})
	}
}

// TestGratuitousARPForms pins the two forms Linux honours at once (a stock client, arp_accept=0).
func TestGratuitousARPForms(t *testing.T) {
	frames := gratuitousARP(ourMAC, vip4)
	if len(frames) != 2 {
		t.Fatalf("%d frames, want 2", len(frames))
	}
	for i, want := range []struct {
		op  arp.Operation
		tha net.HardwareAddr
	}{{arp.OperationRequest, ethernet.Broadcast}, {arp.OperationReply, ourMAC}} {
		f, p, ok := readARP(frames[i])
		if !ok || !bytes.Equal(f.Destination, ethernet.Broadcast) || p.Operation != want.op || p.SenderIP != vip4 ||
			p.TargetIP != vip4 || !bytes.Equal(p.TargetHardwareAddr, want.tha) || !bytes.Equal(p.SenderHardwareAddr, ourMAC) {
			t.Fatalf("frame %d: %+v", i, p)
		}
	}
}

func nsBytes(t testing.TB, target netip.Addr) []byte {
	t.Helper()
	return marshalNS(t, &ndp.NeighborSolicitation{TargetAddress: target,
		Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: clientMAC}}})
}

// dadBytes is a duplicate address detection probe: no source link-layer address option.
func dadBytes(t testing.TB, target netip.Addr) []byte {
	t.Helper()
	return marshalNS(t, &ndp.NeighborSolicitation{TargetAddress: target})
}

func marshalNS(t testing.TB, ns *ndp.NeighborSolicitation) []byte {
	t.Helper()
	b, err := ndp.MarshalMessage(ns)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNAFor(t *testing.T) {
	client := netip.MustParseAddr("2001:db8:1::1")
	for _, tc := range []struct {
		name      string
		msg       []byte
		src       netip.Addr
		hop       int
		answer    bool
		dst       netip.Addr
		solicited bool
	}{
		{"solicitation for an owned address", nsBytes(t, vip6), client, 255, true, client, true},
		{"duplicate address detection probe", dadBytes(t, vip6), netip.IPv6Unspecified(), 255, true, allNodes, false},
		{"from :: with a source link-layer address (RFC 4861 7.1.1: discard)", nsBytes(t, vip6), netip.IPv6Unspecified(), 255, false, netip.Addr{}, false},
		{"code other than 0", append([]byte{135, 1}, nsBytes(t, vip6)[2:]...), client, 255, false, netip.Addr{}, false},
		{"hop limit below 255 (routed from off-link)", nsBytes(t, vip6), client, 64, false, netip.Addr{}, false},
		{"address we do not own", nsBytes(t, netip.MustParseAddr("2001:db8:1::201")), client, 255, false, netip.Addr{}, false},
		{"truncated", nsBytes(t, vip6)[:10], client, 255, false, netip.Addr{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			na, dst, ok := naFor(tc.msg, tc.src, tc.hop, ourMAC, ownsVIPs)
			if ok != tc.answer {
				t.Fatalf("answered=%v, want %v", ok, tc.answer)
			}
			if !ok {
				return
			}
			if dst != tc.dst || na.Solicited != tc.solicited || !na.Override || na.TargetAddress != vip6 {
				t.Fatalf("got %+v to %v", na, dst)
			}
			lla, isLLA := na.Options[0].(*ndp.LinkLayerAddress)
			if !isLLA || lla.Direction != ndp.Target || !bytes.Equal(lla.Addr, ourMAC) {
				t.Fatalf("target link-layer option %+v", na.Options[0])
			}
		})
	}
}

// FuzzARPReply: arpReply answers exactly the frames RFC 826 says a responder answers, and stays
// silent on every other frame. The oracle reads the frame byte by byte, apart from the
// libraries arpReply uses: an untagged Ethernet frame (EtherType 0x0806 at bytes 12-13) sent
// to the broadcast address or to our MAC by another station, carrying an ARP request for
// Ethernet (hardware type 1, length 6) and IPv4 (protocol type 0x0800, length 4) whose target
// is an owned address and whose sender is not that address (a gratuitous announcement). The
// answer must be, byte for byte, the reply RFC 826 describes: sent to the asker's hardware
// address from our MAC, sender and target swapped, our MAC as sender, padded to Ethernet's
// 60-byte minimum.
func FuzzARPReply(f *testing.F) {
	for _, tc := range arpReplyCases(f) {
		f.Add(tc.frame)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		reply := arpReply(frame, ourMAC, ownsVIPs)
		want := expectedARPReply(frame)
		if !bytes.Equal(reply, want) {
			t.Fatalf("frame %x\nanswered %x\nwant     %x", frame, reply, want)
		}
	})
}

// expectedARPReply is the oracle of FuzzARPReply: the reply frame RFC 826 prescribes, or nil.
func expectedARPReply(frame []byte) []byte {
	const eth, arpLen = 14, 28
	if len(frame) < eth+arpLen {
		return nil
	}
	dst, src, p := frame[0:6], frame[6:12], frame[eth:]
	broadcast := bytes.Equal(dst, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	if frame[12] != 0x08 || frame[13] != 0x06 || !(broadcast || bytes.Equal(dst, ourMAC)) || bytes.Equal(src, ourMAC) {
		return nil
	}
	if !bytes.Equal(p[0:8], []byte{0, 1, 0x08, 0x00, 6, 4, 0, 1}) { // Ethernet, IPv4, 6, 4, request
		return nil
	}
	sha, spa, tpa := p[8:14], p[14:18], p[24:28]
	if !bytes.Equal(tpa, vip4.AsSlice()) || bytes.Equal(spa, tpa) {
		return nil
	}
	out := make([]byte, 0, 60)
	out = append(out, sha...)
	out = append(out, ourMAC...)
	out = append(out, 0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 2)
	out = append(out, ourMAC...)
	out = append(out, tpa...)
	out = append(out, sha...)
	out = append(out, spa...)
	return append(out, make([]byte, 60-len(out))...)
}

// FuzzNAFor: naFor answers exactly the neighbour solicitations RFC 4861 7.1.1 calls valid, for
// an owned address, and stays silent on everything else. The oracle reads the ICMPv6 message
// byte by byte, apart from the ndp library naFor uses: hop limit 255, type 135, code 0, at least
// 24 bytes, every option at least 8 bytes long and inside the message, and no source
// link-layer address option when the source is the unspecified address (duplicate address
// detection). The answer, marshalled, must be byte for byte the advertisement RFC 4861 4.4
// describes: type 136, Override set, Solicited set unless the asker had no address (then it
// goes to all nodes, ff02::1), the target asked for, and one target link-layer address option
// with our MAC. RFC 4861 asks receivers to ignore options they do not know, while the ndp
// library refuses some known option types with a malformed body: for a solicitation carrying
// any option but one Ethernet source link-layer address the oracle allows silence (and still
// checks an answer given).
func FuzzNAFor(f *testing.F) {
	client := netip.MustParseAddr("2001:db8:1::1").As16()
	hi, lo := binary.BigEndian.Uint64(client[:8]), binary.BigEndian.Uint64(client[8:])
	f.Add(nsBytes(f, vip6), uint8(255), hi, lo)
	f.Add(nsBytes(f, vip6), uint8(255), uint64(0), uint64(0))
	f.Add(dadBytes(f, vip6), uint8(255), uint64(0), uint64(0))
	f.Add(nsBytes(f, vip6), uint8(64), hi, lo)
	f.Add(nsBytes(f, netip.MustParseAddr("2001:db8:1::201")), uint8(255), hi, lo)
	f.Add([]byte{135, 0, 0, 0, 0, 0, 0, 0}, uint8(255), hi, lo)
	f.Fuzz(func(t *testing.T, msg []byte, hop uint8, srcHigh, srcLow uint64) {
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], srcHigh)
		binary.BigEndian.PutUint64(b[8:], srcLow)
		src := netip.AddrFrom16(b)
		na, dst, ok := naFor(msg, src, int(hop), ourMAC, ownsVIPs)
		wantDst, want, mayStaySilent := expectedNA(msg, src, hop)
		switch {
		case !ok && want == nil, !ok && mayStaySilent:
			return
		case !ok:
			t.Fatalf("no answer to %x from %v", msg, src)
		case want == nil:
			t.Fatalf("answered %x (hop limit %d) from %v with %+v", msg, hop, src, na)
		}
		wire, err := ndp.MarshalMessage(na)
		if err != nil {
			t.Fatalf("answer %+v does not marshal: %v", na, err)
		}
		if dst != wantDst || !bytes.Equal(wire, want) {
			t.Fatalf("answer to %x from %v:\n%x to %v\nwant %x to %v", msg, src, wire, dst, want, wantDst)
		}
	})
}

// expectedNA is the oracle of FuzzNAFor: where the answer goes and its bytes (checksum zero:
// the kernel fills it), or a nil answer; mayStaySilent as FuzzNAFor says.
func expectedNA(msg []byte, src netip.Addr, hop uint8) (dst netip.Addr, na []byte, mayStaySilent bool) {
	if hop != 255 || len(msg) < 24 || msg[0] != 135 || msg[1] != 0 || !bytes.Equal(msg[8:24], vip6.AsSlice()) {
		return netip.Addr{}, nil, false
	}
	sourceLLAs, others := 0, 0
	for opts := msg[24:]; len(opts) > 0; opts = opts[int(opts[1])*8:] {
		if len(opts) < 2 || opts[1] == 0 || int(opts[1])*8 > len(opts) {
			return netip.Addr{}, nil, false
		}
		if opts[0] == 1 && opts[1] == 1 {
			sourceLLAs++
		} else {
			others++
		}
	}
	if src.IsUnspecified() && sourceLLAs > 0 {
		return netip.Addr{}, nil, false
	}
	flags := byte(0x60) // Solicited, Override
	dst = src
	if src.IsUnspecified() {
		flags, dst = 0x20, netip.MustParseAddr("ff02::1")
	}
	na = append([]byte{136, 0, 0, 0, flags, 0, 0, 0}, vip6.AsSlice()...)
	na = append(append(na, 2, 1), ourMAC...)
	return dst, na, others > 0 || sourceLLAs > 1
}
