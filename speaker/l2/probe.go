package l2

import (
	"bytes"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
)

// ARPProbe returns an RFC 5227 ARP probe for ip from mac: a broadcast request whose sender
// address is 0.0.0.0, so asking never changes anyone's neighbour entry for the address. The
// self-check sends it for addresses this node does not own; everyone who holds ip answers.
func ARPProbe(mac net.HardwareAddr, ip netip.Addr) []byte {
	p, err := arp.NewPacket(arp.OperationRequest, mac, netip.IPv4Unspecified(), ethernet.Broadcast, ip)
	if err != nil {
		return nil
	}
	return ethernetFrame(ethernet.Broadcast, mac, p)
}

// ARPAnswer reads frame as the answer to our probe for ip (ARPProbe from mac) and returns the
// MAC that answered, or nil when it is anything else (the packets are untrusted input: see
// FuzzARPAnswer). An answer is a reply whose sender address is ip and whose target is the
// probe's sender as RFC 826 swaps it: our MAC and 0.0.0.0. A gratuitous or unsolicited reply
// (target its own MAC, broadcast or zeros, or target address ip), a reply to someone else's
// request (another target MAC or a real target address) and our own frames do not answer our
// probe. When it came is ProbeFree's part (answerRound).
func ARPAnswer(frame []byte, mac net.HardwareAddr, ip netip.Addr) net.HardwareAddr {
	var f ethernet.Frame
	if err := f.UnmarshalBinary(frame); err != nil || f.EtherType != ethernet.EtherTypeARP || bytes.Equal(f.Source, mac) {
		return nil
	}
	var p arp.Packet
	if err := p.UnmarshalBinary(f.Payload); err != nil {
		return nil
	}
	if p.Operation != arp.OperationReply || p.SenderIP != ip || len(p.SenderHardwareAddr) != 6 ||
		!bytes.Equal(p.TargetHardwareAddr, mac) || p.TargetIP != netip.IPv4Unspecified() {
		return nil
	}
	return p.SenderHardwareAddr
}
