package l2

import (
	"bytes"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
)

// arpReply returns the Ethernet frame that answers frame, or nil when this node must stay
// silent: frame is not an untagged ARP request for Ethernet and IPv4 (RFC 826: a responder
// drops a hardware or protocol type it does not speak; a tagged frame's answer would leave
// untagged, on another VLAN), it asks for an address owns rejects, it is our own frame seen
// on the way out, or it is a unicast sent to another MAC. The answer goes to the asker's
// hardware address (RFC 826, as Linux does). The last check matters
// because a bridge floods unicast frames whose destination it has forgotten and a veth does no
// MAC filtering: answering a client's unicast probe meant for a dead owner would flip the
// client's entry in the lab in a way real hardware never would.
func arpReply(frame []byte, mac net.HardwareAddr, owns func(netip.Addr) bool) []byte {
	var f ethernet.Frame
	if err := f.UnmarshalBinary(frame); err != nil || f.EtherType != ethernet.EtherTypeARP || f.VLAN != nil || f.ServiceVLAN != nil {
		return nil
	}
	if bytes.Equal(f.Source, mac) {
		return nil
	}
	if !bytes.Equal(f.Destination, ethernet.Broadcast) && !bytes.Equal(f.Destination, mac) {
		return nil
	}
	var p arp.Packet
	if err := p.UnmarshalBinary(f.Payload); err != nil {
		return nil
	}
	if p.HardwareType != 1 || p.ProtocolType != uint16(ethernet.EtherTypeIPv4) || p.HardwareAddrLength != 6 || p.IPLength != 4 {
		return nil
	}
	if p.Operation != arp.OperationRequest || !owns(p.TargetIP) {
		return nil
	}
	// A gratuitous request (sender == target) is someone else announcing, not asking.
	if p.SenderIP == p.TargetIP || len(mac) != 6 {
		return nil
	}
	reply, err := arp.NewPacket(arp.OperationReply, mac, p.TargetIP, p.SenderHardwareAddr, p.SenderIP)
	if err != nil {
		return nil
	}
	return ethernetFrame(p.SenderHardwareAddr, mac, reply)
}

// gratuitousARP returns the two frames Linux accepts at once as an update of an existing
// neighbour entry: a broadcast request with sender == target == ip, and a reply whose target
// hardware address is the sender's own (a reply to ff:ff:ff:ff:ff:ff is ignored for the
// entry's locktime, a second by default).
func gratuitousARP(mac net.HardwareAddr, ip netip.Addr) [][]byte {
	var out [][]byte
	for _, form := range []struct {
		op  arp.Operation
		tha net.HardwareAddr
	}{{arp.OperationRequest, ethernet.Broadcast}, {arp.OperationReply, mac}} {
		p, err := arp.NewPacket(form.op, mac, ip, form.tha, ip)
		if err != nil {
			continue
		}
		if b := ethernetFrame(ethernet.Broadcast, mac, p); b != nil {
			out = append(out, b)
		}
	}
	return out
}

func ethernetFrame(dst, src net.HardwareAddr, p *arp.Packet) []byte {
	payload, err := p.MarshalBinary()
	if err != nil {
		return nil
	}
	f := ethernet.Frame{Destination: dst, Source: src, EtherType: ethernet.EtherTypeARP, Payload: payload}
	b, err := f.MarshalBinary()
	if err != nil {
		return nil
	}
	return b
}
