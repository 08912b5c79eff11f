package l2

import (
	"net"
	"net/netip"
	"slices"

	"github.com/mdlayher/ndp"
)

var allNodes = netip.MustParseAddr("ff02::1")

// naFor returns the neighbour advertisement that answers the ICMPv6 message b received from
// src with the given hop limit, and where to send it; ok is false when this node must stay
// silent. RFC 4861 7.1.1: a solicitation must arrive with hop limit 255 (so it cannot come from
// off-link) and code 0, and one from the unspecified address (duplicate address detection)
// must carry no source link-layer address option. The kernel already dropped frames sent to other MACs before they reached the
// ICMPv6 socket, so unlike ARP no MAC check is needed here.
func naFor(b []byte, src netip.Addr, hopLimit int, mac net.HardwareAddr, owns func(netip.Addr) bool) (na *ndp.NeighborAdvertisement, dst netip.Addr, ok bool) {
	if hopLimit != 255 || len(b) < 2 || b[1] != 0 {
		return nil, netip.Addr{}, false
	}
	m, err := ndp.ParseMessage(b)
	if err != nil {
		return nil, netip.Addr{}, false
	}
	ns, isNS := m.(*ndp.NeighborSolicitation)
	if !isNS || !ns.TargetAddress.Is6() || ns.TargetAddress.Is4In6() || !owns(ns.TargetAddress.WithZone("")) {
		return nil, netip.Addr{}, false
	}
	dst, solicited := src, true
	if src.WithZone("").IsUnspecified() {
		if slices.ContainsFunc(ns.Options, isSourceLLA) {
			return nil, netip.Addr{}, false
		}
		// Duplicate address detection: the asker has no address yet, answer everyone.
		dst, solicited = allNodes, false
	}
	return advertisement(ns.TargetAddress.WithZone(""), mac, solicited), dst, true
}

func isSourceLLA(o ndp.Option) bool {
	lla, ok := o.(*ndp.LinkLayerAddress)
	return ok && lla.Direction == ndp.Source
}

// unsolicitedNA is the IPv6 counterpart of gratuitous ARP. Override must be set, or Linux keeps
// the link-layer address it already has.
func unsolicitedNA(mac net.HardwareAddr, ip netip.Addr) *ndp.NeighborAdvertisement {
	return advertisement(ip, mac, false)
}

func advertisement(ip netip.Addr, mac net.HardwareAddr, solicited bool) *ndp.NeighborAdvertisement {
	return &ndp.NeighborAdvertisement{
		Solicited:     solicited,
		Override:      true,
		TargetAddress: ip,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}},
	}
}
