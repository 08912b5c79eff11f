package l2

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"reflect"
	"testing"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
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
	b, err := ndp.MarshalMessage(&ndp.NeighborSolicitation{TargetAddress: target,
		Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: clientMAC}}})
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
		{"duplicate address detection probe", nsBytes(t, vip6), netip.IPv6Unspecified(), 255, true, allNodes, false},
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

// FuzzARPReply: arpReply answers exactly the frames a responder must answer (another station's
// ARP request, broadcast or to our MAC, for an owned IPv4 address, not announcing it) and stays
// silent on every other frame. The answer, read back, is a reply from our MAC for the address
// asked, sent back to whoever asked.
func FuzzARPReply(f *testing.F) {
	for _, tc := range arpReplyCases(f) {
		f.Add(tc.frame)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		reply := arpReply(frame, ourMAC, ownsVIPs)
		req, ask, ok := readARP(frame)
		mustAnswer := ok && ask.Operation == arp.OperationRequest && ask.TargetIP == vip4 && ask.SenderIP != ask.TargetIP &&
			len(ask.SenderHardwareAddr) == len(ourMAC) && !bytes.Equal(req.Source, ourMAC) &&
			(bytes.Equal(req.Destination, ethernet.Broadcast) || bytes.Equal(req.Destination, ourMAC))
		if !mustAnswer {
			if reply != nil {
				t.Fatalf("answered %x, which must stay unanswered", frame)
			}
			return
		}
		eth, ans, ok := readARP(reply)
		if !ok {
			t.Fatalf("no answer (or an unreadable one: %x) to %+v", reply, ask)
		}
		want := arp.Packet{HardwareType: 1, ProtocolType: uint16(ethernet.EtherTypeIPv4), HardwareAddrLength: 6, IPLength: 4,
			Operation: arp.OperationReply, SenderHardwareAddr: ourMAC, SenderIP: ask.TargetIP,
			TargetHardwareAddr: ask.SenderHardwareAddr, TargetIP: ask.SenderIP}
		if !bytes.Equal(eth.Destination, req.Source) || !bytes.Equal(eth.Source, ourMAC) || !reflect.DeepEqual(ans, want) {
			t.Fatalf("answer %v -> %v %+v to %v -> %v %+v, want %+v back to %v",
				eth.Source, eth.Destination, ans, req.Source, req.Destination, ask, want, req.Source)
		}
	})
}

// FuzzNAFor: naFor answers exactly the well-formed neighbour solicitations for an owned address
// that arrive with hop limit 255, and stays silent on everything else. The answer, decoded from
// its wire form by golang.org/x/net/icmp rather than the ndp library that wrote it, is an
// overriding advertisement (not from a router) of the address asked for carrying our MAC:
// solicited and sent back to the asker, or unsolicited to all nodes when the asker has no
// address yet (duplicate address detection).
func FuzzNAFor(f *testing.F) {
	client := netip.MustParseAddr("2001:db8:1::1").As16()
	hi, lo := binary.BigEndian.Uint64(client[:8]), binary.BigEndian.Uint64(client[8:])
	f.Add(nsBytes(f, vip6), uint8(255), hi, lo)
	f.Add(nsBytes(f, vip6), uint8(255), uint64(0), uint64(0))
	f.Add(nsBytes(f, vip6), uint8(64), hi, lo)
	f.Add(nsBytes(f, netip.MustParseAddr("2001:db8:1::201")), uint8(255), hi, lo)
	f.Add([]byte{135, 0, 0, 0, 0, 0, 0, 0}, uint8(255), hi, lo)
	f.Fuzz(func(t *testing.T, msg []byte, hop uint8, srcHigh, srcLow uint64) {
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], srcHigh)
		binary.BigEndian.PutUint64(b[8:], srcLow)
		src := netip.AddrFrom16(b)
		na, dst, ok := naFor(msg, src, int(hop), ourMAC, ownsVIPs)
		m, err := ndp.ParseMessage(msg)
		ns, isNS := m.(*ndp.NeighborSolicitation)
		if hop != 255 || err != nil || !isNS || ns.TargetAddress != vip6 {
			if ok {
				t.Fatalf("answered %x (hop limit %d) with %+v", msg, hop, na)
			}
			return
		}
		if !ok {
			t.Fatalf("no answer to %+v from %v", ns, src)
		}
		want := wireNA{Override: true, Solicited: true, Target: vip6, TargetMACs: []string{ourMAC.String()}}
		wantDst := src
		if src.IsUnspecified() {
			want.Solicited, wantDst = false, netip.MustParseAddr("ff02::1")
		}
		wire, err := ndp.MarshalMessage(na)
		if err != nil {
			t.Fatalf("answer %+v does not marshal: %v", na, err)
		}
		if got := readNA(t, wire); dst != wantDst || !reflect.DeepEqual(got, want) {
			t.Fatalf("answer %+v to %v, want %+v to %v", got, dst, want, wantDst)
		}
	})
}

// wireNA is what a neighbour advertisement says on the wire (RFC 4861 4.4).
type wireNA struct {
	Router, Solicited, Override bool
	Target                      netip.Addr
	TargetMACs                  []string // target link-layer address options
}

func readNA(t *testing.T, b []byte) wireNA {
	t.Helper()
	m, err := icmp.ParseMessage(ipv6.ICMPTypeNeighborAdvertisement.Protocol(), b)
	if err != nil || m.Type != ipv6.ICMPTypeNeighborAdvertisement || m.Code != 0 {
		t.Fatalf("not a neighbour advertisement: %x (%v)", b, err)
	}
	body := m.Body.(*icmp.RawBody).Data
	if len(body) < 20 {
		t.Fatalf("advertisement body of %d bytes", len(body))
	}
	na := wireNA{Router: body[0]&0x80 != 0, Solicited: body[0]&0x40 != 0, Override: body[0]&0x20 != 0,
		Target: netip.AddrFrom16([16]byte(body[4:20]))}
	for opts := body[20:]; len(opts) > 0; opts = opts[int(opts[1])*8:] {
		if len(opts) < 8 || opts[1] == 0 || len(opts) < int(opts[1])*8 {
			t.Fatalf("malformed options %x", opts)
		}
		if opts[0] == 2 && opts[1] == 1 {
			na.TargetMACs = append(na.TargetMACs, net.HardwareAddr(opts[2:8]).String())
		}
	}
	return na
}
