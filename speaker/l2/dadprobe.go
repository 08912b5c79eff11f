package l2

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"

	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

const (
	etherTypeIPv6 ethernet.EtherType = 0x86dd
	ipv6HeaderLen                    = 40
	protoICMPv6                      = 58
)

// NDPProbe returns a duplicate-address-detection neighbour solicitation for ip from mac (RFC
// 4862 5.4.2), the IPv6 counterpart of ARPProbe: from the unspecified address ::, to ip's
// solicited-node group, hop limit 255, with no source link-layer option (forbidden from ::).
// Whoever holds ip answers with an advertisement to all nodes, and nobody's neighbour cache
// learns anything from the probe. nil when ip is not an IPv6 address.
func NDPProbe(mac net.HardwareAddr, ip netip.Addr) []byte {
	return solicitation(mac, netip.IPv6Unspecified(), ip)
}

// solicitation returns a neighbour solicitation for ip from src on mac's link, to ip's
// solicited-node group, hop limit 255: from :: (a DAD probe) without options, from one of this
// node's addresses with its link-layer address, as the kernel asks. nil when ip is not IPv6.
func solicitation(mac net.HardwareAddr, src, ip netip.Addr) []byte {
	if !ip.Is6() || ip.Is4In6() || len(mac) != 6 {
		return nil
	}
	group, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return nil
	}
	ns := &ndp.NeighborSolicitation{TargetAddress: ip}
	if !src.IsUnspecified() {
		ns.Options = []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: mac}}
	}
	icmp, err := ndp.MarshalMessageChecksum(ns, src, group)
	if err != nil {
		return nil
	}
	g, from := group.As16(), src.As16()
	dst := net.HardwareAddr{0x33, 0x33, g[12], g[13], g[14], g[15]}
	hdr := make([]byte, ipv6HeaderLen, ipv6HeaderLen+len(icmp))
	hdr[0] = 6 << 4
	binary.BigEndian.PutUint16(hdr[4:6], uint16(len(icmp)))
	hdr[6], hdr[7] = protoICMPv6, 255
	copy(hdr[8:24], from[:])
	copy(hdr[24:40], g[:])
	f := ethernet.Frame{Destination: dst, Source: mac, EtherType: etherTypeIPv6, Payload: append(hdr, icmp...)}
	b, err := f.MarshalBinary()
	if err != nil {
		return nil
	}
	return b
}

// NDPAnswer reads frame as the answer to our DAD probe for ip (NDPProbe from mac) and returns
// the MAC it advertises (its target link-layer address option, else the frame's source), or
// nil when it is anything else: not IPv6 carrying ICMPv6 directly, a hop limit other than 255
// (RFC 4861 7.1.2: it did not come from the link), a truncated or malformed message, another
// target, our own frame (mac), or not the form RFC 4861 7.2.4 gives an answer to a solicitation
// from ::, sent to all nodes (ff02::1) with the Solicited flag clear: a solicited advertisement
// answers someone else's solicitation. An unsolicited advertisement has that same form, so for
// IPv6 only when it came tells it from an answer (answerRound). The frames are untrusted input:
// see FuzzNDPAnswer.
func NDPAnswer(frame []byte, mac net.HardwareAddr, ip netip.Addr) net.HardwareAddr {
	var f ethernet.Frame
	if err := f.UnmarshalBinary(frame); err != nil || f.EtherType != etherTypeIPv6 || bytes.Equal(f.Source, mac) {
		return nil
	}
	p := f.Payload
	if len(p) < ipv6HeaderLen || p[0]>>4 != 6 || p[6] != protoICMPv6 || p[7] != 255 ||
		netip.AddrFrom16([16]byte(p[24:40])) != allNodes {
		return nil
	}
	n := int(binary.BigEndian.Uint16(p[4:6]))
	if n > len(p)-ipv6HeaderLen {
		return nil
	}
	m, err := ndp.ParseMessage(p[ipv6HeaderLen : ipv6HeaderLen+n])
	if err != nil {
		return nil
	}
	na, ok := m.(*ndp.NeighborAdvertisement)
	if !ok || na.TargetAddress != ip || na.Solicited {
		return nil
	}
	for _, o := range na.Options {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target {
			if len(lla.Addr) != 6 {
				return nil
			}
			return lla.Addr
		}
	}
	if len(f.Source) != 6 {
		return nil
	}
	return f.Source
}
