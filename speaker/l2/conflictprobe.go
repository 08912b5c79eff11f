package l2

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
)

// ProbeFree asks, count times and spacing apart (RFC 5227's PROBE_NUM probes), whether anyone
// holds each of targets on the interface: an ARP probe from 0.0.0.0 for IPv4, a DAD
// solicitation from :: for IPv6, so probing changes no neighbour cache and claims nothing. It
// returns the MACs that answered each address (sorted), the interface's own never among them.
// All targets of one family share one socket and one wait per probe, so a round costs count
// times spacing however many addresses it probes.
func ProbeFree(ifi *net.Interface, targets []netip.Addr, count int, spacing time.Duration) (map[netip.Addr][]string, error) {
	heard := map[netip.Addr][]string{}
	var errs []error
	for _, fam := range []struct {
		etherType ethernet.EtherType
		is        func(netip.Addr) bool
		probe     func(net.HardwareAddr, netip.Addr) []byte
		answer    func([]byte, net.HardwareAddr, netip.Addr) net.HardwareAddr
	}{
		{ethernet.EtherTypeARP, netip.Addr.Is4, ARPProbe, ARPAnswer},
		{etherTypeIPv6, func(a netip.Addr) bool { return a.Is6() && !a.Is4In6() }, NDPProbe, NDPAnswer},
	} {
		ips := slices.DeleteFunc(slices.Clone(targets), func(a netip.Addr) bool { return !fam.is(a) })
		if len(ips) == 0 {
			continue
		}
		errs = append(errs, probeFamily(ifi, ips, count, spacing, int(fam.etherType), fam.probe, fam.answer, heard))
	}
	for ip, macs := range heard {
		slices.Sort(macs)
		heard[ip] = slices.Compact(macs)
	}
	return heard, errors.Join(errs...)
}

func probeFamily(ifi *net.Interface, ips []netip.Addr, count int, spacing time.Duration, etherType int,
	probe func(net.HardwareAddr, netip.Addr) []byte, answer func([]byte, net.HardwareAddr, netip.Addr) net.HardwareAddr,
	heard map[netip.Addr][]string) error {
	conn, err := packet.Listen(ifi, packet.Raw, etherType, nil)
	if err != nil {
		return err
	}
	defer conn.Close()
	buf := make([]byte, max(ifi.MTU, 1500)+14)
	for range count {
		for _, ip := range ips {
			frame := probe(ifi.HardwareAddr, ip)
			if frame == nil {
				continue
			}
			if _, err := conn.WriteTo(frame, &packet.Addr{HardwareAddr: net.HardwareAddr(frame[:6])}); err != nil {
				return err
			}
		}
		if err := conn.SetReadDeadline(time.Now().Add(spacing)); err != nil {
			return err
		}
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					break
				}
				return err
			}
			for _, ip := range ips {
				if mac := answer(buf[:n], ifi.HardwareAddr, ip); mac != nil {
					heard[ip] = append(heard[ip], mac.String())
				}
			}
		}
	}
	return nil
}
