package controlplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"

	"github.com/portico-lb/portico/speaker/l2"
)

// Announcer answers ARP/NDP for the addresses handed to it: an *l2.Announcer, the one Services
// are answered through.
type Announcer interface {
	Set(want l2.Want) (answered map[netip.Addr][]string, problems []error)
	Silence()
	Close() error
}

// vipSide carries the decision out on this node: the owner makes the VIP a local address (on
// lo, so that the apiserver, listening on every address, accepts connections to it) and
// answers ARP/NDP for it, a gratuitous announcement first; a node that is not the owner does
// neither.
type vipSide struct {
	vip      netip.Addr
	ifaces   []string // where it is answered; nil: the announcer's choice
	announce Announcer
}

// take makes this node answer for the VIP; the local address comes first, so the first
// packets drawn by the announcement find it.
func (v *vipSide) take() []error {
	var problems []error
	if err := v.local(true); err != nil {
		problems = append(problems, err)
	}
	_, errs := v.announce.Set(l2.Want{v.vip: v.ifaces})
	return append(problems, errs...)
}

// release stops answering; the local address is dropped apart (Mode.dropLocal), once the new
// owner holds the VIP.
func (v *vipSide) release() []error {
	_, problems := v.announce.Set(l2.Want{})
	return problems
}

// local adds the VIP to lo, or removes it (a run killed while holding it left it there).
func (v *vipSide) local(add bool) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("the VIP's local address: %w", err)
	}
	bits := v.vip.BitLen()
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: v.vip.AsSlice(), Mask: net.CIDRMask(bits, bits)}}
	if add {
		err = netlink.AddrReplace(lo, addr)
	} else if err = netlink.AddrDel(lo, addr); errors.Is(err, syscall.EADDRNOTAVAIL) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("the VIP's local address %s on lo: %w", v.vip, err)
	}
	return nil
}
