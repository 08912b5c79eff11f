package l2

import (
	"bytes"
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

func TestARPReply(t *testing.T) {
	zero := net.HardwareAddr{0, 0, 0, 0, 0, 0}
	for _, tc := range []struct {
		name   string
		frame  []byte
		answer bool
	}{
		{"broadcast request for an owned address", arpFrame(t, arp.OperationRequest, ethernet.Broadcast, clientMAC, clientIP, zero, vip4), true},
		{"unicast request to our MAC (a kernel's reachability probe)", arpFrame(t, arp.OperationRequest, ourMAC, clientMAC, clientIP, zero, vip4), true},
		{"unicast request to another MAC, flooded by the bridge", arpFrame(t, arp.OperationRequest, otherMAC, clientMAC, clientIP, zero, vip4), false},
		{"request for an address we do not own", arpFrame(t, arp.OperationRequest, ethernet.Broadcast, clientMAC, clientIP, zero, netip.MustParseAddr("198.51.100.201")), false},
		{"a reply", arpFrame(t, arp.OperationReply, ethernet.Broadcast, clientMAC, clientIP, zero, vip4), false},
		{"another node's gratuitous request", arpFrame(t, arp.OperationRequest, ethernet.Broadcast, otherMAC, vip4, zero, vip4), false},
		{"our own gratuitous request seen on the way out", arpFrame(t, arp.OperationRequest, ethernet.Broadcast, ourMAC, vip4, zero, vip4), false},
		{"truncated", arpFrame(t, arp.OperationRequest, ethernet.Broadcast, clientMAC, clientIP, zero, vip4)[:30], false},
		{"empty", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reply := arpReply(tc.frame, ourMAC, ownsVIPs)
			if (reply != nil) != tc.answer {
				t.Fatalf("answered=%v, want %v", reply != nil, tc.answer)
			}
			if reply == nil {
				return
			}
			var f ethernet.Frame
			var p arp.Packet
			if err := f.UnmarshalBinary(reply); err != nil {
				t.Fatal(err)
			}
			if err := p.UnmarshalBinary(f.Payload); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(f.Destination, clientMAC) || p.Operation != arp.OperationReply ||
				!bytes.Equal(p.SenderHardwareAddr, ourMAC) || p.SenderIP != vip4 ||
				!bytes.Equal(p.TargetHardwareAddr, clientMAC) || p.TargetIP != clientIP {
				t.Fatalf("bad reply: eth %v, arp %+v", f.Destination, p)
			}
		})
	}
}

// TestGratuitousARPForms pins the two forms Linux honours at once (netlab.md 2.4).
func TestGratuitousARPForms(t *testing.T) {
	frames := gratuitousARP(ourMAC, vip4)
	if len(frames) != 2 {
		t.Fatalf("%d frames, want 2", len(frames))
	}
	for i, want := range []struct {
		op  arp.Operation
		tha net.HardwareAddr
	}{{arp.OperationRequest, ethernet.Broadcast}, {arp.OperationReply, ourMAC}} {
		var f ethernet.Frame
		var p arp.Packet
		if err := f.UnmarshalBinary(frames[i]); err != nil {
			t.Fatal(err)
		}
		if err := p.UnmarshalBinary(f.Payload); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.Destination, ethernet.Broadcast) || p.Operation != want.op || p.SenderIP != vip4 ||
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

// FuzzARPReply: no frame makes arpReply panic, and any answer is a reply from our MAC for an
// owned address, sent back to the Ethernet source of the request.
func FuzzARPReply(f *testing.F) {
	zero := net.HardwareAddr{0, 0, 0, 0, 0, 0}
	f.Add(arpFrame(f, arp.OperationRequest, ethernet.Broadcast, clientMAC, clientIP, zero, vip4))
	f.Add(arpFrame(f, arp.OperationRequest, ourMAC, clientMAC, clientIP, zero, vip4))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06, 0, 1, 0x08, 0, 6, 4})
	f.Fuzz(func(t *testing.T, frame []byte) {
		reply := arpReply(frame, ourMAC, ownsVIPs)
		if reply == nil {
			return
		}
		var ef ethernet.Frame
		var p arp.Packet
		if err := ef.UnmarshalBinary(reply); err != nil {
			t.Fatalf("unparseable reply: %v", err)
		}
		if err := p.UnmarshalBinary(ef.Payload); err != nil {
			t.Fatalf("unparseable ARP: %v", err)
		}
		if p.Operation != arp.OperationReply || !bytes.Equal(p.SenderHardwareAddr, ourMAC) || !ownsVIPs(p.SenderIP) ||
			!bytes.Equal(ef.Destination, frame[6:12]) {
			t.Fatalf("bad reply %+v to %v", p, ef.Destination)
		}
	})
}

// FuzzNAFor: no ICMPv6 message makes naFor panic, and any answer is an overriding
// advertisement of an owned address carrying our MAC.
func FuzzNAFor(f *testing.F) {
	f.Add(nsBytes(f, vip6), uint8(255), false)
	f.Add(nsBytes(f, vip6), uint8(255), true)
	f.Add([]byte{135, 0, 0, 0, 0, 0, 0, 0}, uint8(255), false)
	f.Fuzz(func(t *testing.T, msg []byte, hop uint8, dad bool) {
		src := netip.MustParseAddr("fe80::1")
		if dad {
			src = netip.IPv6Unspecified()
		}
		na, dst, ok := naFor(msg, src, int(hop), ourMAC, ownsVIPs)
		if !ok {
			return
		}
		if hop != 255 || !ownsVIPs(na.TargetAddress) || !na.Override || !dst.IsValid() {
			t.Fatalf("bad answer %+v to %v (hop %d)", na, dst, hop)
		}
		if _, err := ndp.MarshalMessage(na); err != nil {
			t.Fatalf("answer does not marshal: %v", err)
		}
	})
}
