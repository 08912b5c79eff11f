package l2

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
)

// SolicitNeighbour asks once for the link-layer address of the next hop towards ip, the way
// the kernel itself asks (an ARP request from this node's address, or a neighbour solicitation
// carrying its link-layer address), when the kernel's own entry for it is unresolved
// (INCOMPLETE or FAILED). It does not wait: the answer goes to the kernel, whose entry it
// fills. asked says whether it sent the question.
//
// Why a speaker asks in the kernel's place: a node whose link was down keeps its entries for
// the other nodes INCOMPLETE, and the kernel asks again only every retrans_time (a second by
// default), holding every packet to them until then. When a partition heals, this node hears
// the others' heartbeats at once but its own stay queued, so the node that took its addresses
// over keeps answering beside it for up to that second. Asking at once makes it milliseconds.
// A resolved entry is left alone, so a member that was merely slow costs no broadcast.
func SolicitNeighbour(ip netip.Addr) (asked bool, err error) {
	routes, err := netlink.RouteGet(ip.AsSlice())
	if err != nil || len(routes) == 0 {
		return false, errors.Join(fmt.Errorf("no route to %s", ip), err)
	}
	r := routes[0]
	target := ip
	if gw, ok := netip.AddrFromSlice(r.Gw); ok {
		target = gw.Unmap() // not on the link: the gateway is the neighbour
	}
	src, ok := netip.AddrFromSlice(r.Src)
	if !ok {
		return false, fmt.Errorf("the route to %s names no source address", ip)
	}
	if resolved, err := kernelResolved(r.LinkIndex, target); err != nil || resolved {
		return false, err
	}
	ifi, err := net.InterfaceByIndex(r.LinkIndex)
	if err != nil {
		return false, err
	}
	frame, etherType := neighbourRequest(ifi.HardwareAddr, src.Unmap(), target)
	if frame == nil {
		return false, fmt.Errorf("%s is not an Ethernet link", ifi.Name)
	}
	conn, err := packet.Listen(ifi, packet.Raw, int(etherType), nil)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if _, err := conn.WriteTo(frame, &packet.Addr{HardwareAddr: net.HardwareAddr(frame[:6])}); err != nil {
		return false, err
	}
	return true, nil
}

// kernelResolved reports whether the kernel's neighbour entry for ip on the link holds an
// address it uses (anything but INCOMPLETE or FAILED); no entry at all counts as unresolved.
func kernelResolved(linkIndex int, ip netip.Addr) (bool, error) {
	family := netlink.FAMILY_V4
	if ip.Is6() && !ip.Is4In6() {
		family = netlink.FAMILY_V6
	}
	entries, err := netlink.NeighList(linkIndex, family)
	if err != nil {
		return false, err
	}
	for _, n := range entries {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip {
			return n.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) == 0, nil
		}
	}
	return false, nil
}

// neighbourRequest is the frame that asks for ip's link-layer address from src and mac: an ARP
// request for IPv4, a neighbour solicitation for IPv6; nil when the link is not Ethernet.
func neighbourRequest(mac net.HardwareAddr, src, ip netip.Addr) ([]byte, ethernet.EtherType) {
	if len(mac) != 6 {
		return nil, 0
	}
	if ip.Is6() && !ip.Is4In6() {
		return solicitation(mac, src, ip), etherTypeIPv6
	}
	p, err := arp.NewPacket(arp.OperationRequest, mac, src, net.HardwareAddr{0, 0, 0, 0, 0, 0}, ip)
	if err != nil {
		return nil, 0
	}
	return ethernetFrame(ethernet.Broadcast, mac, p), ethernet.EtherTypeARP
}
