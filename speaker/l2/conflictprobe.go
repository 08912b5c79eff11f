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
	round := newAnswerRound(ifi.HardwareAddr, spacing, answer)
	buf := make([]byte, max(ifi.MTU, 1500)+14)
	for range count {
		// What came before this probe answers nothing: drop it unread.
		if err := drain(conn, buf); err != nil {
			return err
		}
		for _, ip := range ips {
			frame := probe(ifi.HardwareAddr, ip)
			if frame == nil {
				continue
			}
			round.probed(ip, time.Now())
			if _, err := conn.WriteTo(frame, &packet.Addr{HardwareAddr: net.HardwareAddr(frame[:6])}); err != nil {
				return err
			}
		}
		if err := conn.SetReadDeadline(time.Now().Add(spacing)); err != nil {
			return err
		}
		for {
			n, _, err := conn.ReadFrom(buf)
			if timeout(err) {
				break
			}
			if err != nil {
				return err
			}
			round.hear(buf[:n], time.Now())
		}
	}
	for ip, macs := range round.heard {
		heard[ip] = append(heard[ip], macs...)
	}
	return nil
}

// drain reads and drops every frame already queued on conn.
func drain(conn *packet.Conn, buf []byte) error {
	if err := conn.SetReadDeadline(time.Now()); err != nil {
		return err
	}
	for {
		if _, _, err := conn.ReadFrom(buf); timeout(err) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

func timeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// answerRound judges the frames heard during one round of probes: a frame counts for an
// address only when it answers our probe for it (answer: ARPAnswer or NDPAnswer) and arrives
// within spacing after that address's latest probe. Unsolicited and gratuitous frames fail
// the first test for ARP; for NDP, whose answers to a DAD probe look like unsolicited
// advertisements, the second is what is left: a host repeating them keeps hitting the
// windows, and the controller's proxy-answerer rule is what stops such a host from claiming
// a pool (docs/speaker-l2.md).
type answerRound struct {
	mac     net.HardwareAddr
	spacing time.Duration
	answer  func([]byte, net.HardwareAddr, netip.Addr) net.HardwareAddr
	sent    map[netip.Addr]time.Time
	heard   map[netip.Addr][]string
}

func newAnswerRound(mac net.HardwareAddr, spacing time.Duration, answer func([]byte, net.HardwareAddr, netip.Addr) net.HardwareAddr) *answerRound {
	return &answerRound{mac: mac, spacing: spacing, answer: answer, sent: map[netip.Addr]time.Time{}, heard: map[netip.Addr][]string{}}
}

// probed records that a probe for ip went out at.
func (r *answerRound) probed(ip netip.Addr, at time.Time) { r.sent[ip] = at }

// hear judges a frame that arrived at, and returns the addresses it counts for.
func (r *answerRound) hear(frame []byte, at time.Time) []netip.Addr {
	var out []netip.Addr
	for ip, sent := range r.sent {
		if at.Before(sent) || at.Sub(sent) > r.spacing {
			continue
		}
		if mac := r.answer(frame, r.mac, ip); mac != nil {
			r.heard[ip] = append(r.heard[ip], mac.String())
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
