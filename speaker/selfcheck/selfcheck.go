// Package selfcheck probes, from a node that does not own them, the addresses other nodes
// announce over L2, and reports which MACs answered: the data-plane check nobody else does
// (a split brain shows as two MACs, another host using the address as a MAC no speaker owns,
// an address nobody answers for as none). The controller turns the reports into each
// Service's portico.dev/Reachable condition.
//
// IPv4 addresses get an RFC 5227 ARP probe (sender 0.0.0.0, so probing never changes anyone's
// neighbour entry for the address); IPv6 addresses a neighbour solicitation from the node's
// link-local address to the address's solicited-node group, as any IPv6 host would send.
package selfcheck

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"golang.org/x/net/ipv6"

	"github.com/portico-lb/portico/speaker/l2"
)

// Target is an address to probe and the interfaces to probe it on.
type Target struct {
	IP         netip.Addr
	Interfaces []string
}

// Options pace the probing.
type Options struct {
	// Interval between the starts of two rounds over every target; 0 switches the self-check off.
	Interval time.Duration
	// Rate caps the probes sent per second (all interfaces together), so a node with many
	// addresses to check never floods its segment.
	Rate float64
	// Wait is how long answers to one probe are collected.
	Wait time.Duration
}

// DefaultOptions: a round every 10 s, at most 20 probes a second, answers collected for 200 ms.
var DefaultOptions = Options{Interval: 10 * time.Second, Rate: 20, Wait: 200 * time.Millisecond}

// Prober runs rounds of probes until its context ends.
type Prober struct {
	Options
	// Targets lists what to probe; called at the start of every round.
	Targets func() []Target
	// Report receives every round's results: address → MACs that answered (sorted, lower case).
	Report func(map[netip.Addr][]string)
	Log    logr.Logger
}

// Run probes in rounds until ctx ends.
func (p *Prober) Run(ctx context.Context) {
	if p.Interval <= 0 {
		return
	}
	pace := time.NewTicker(time.Duration(float64(time.Second) / max(p.Rate, 0.1)))
	defer pace.Stop()
	round := time.NewTicker(p.Interval)
	defer round.Stop()
	for {
		results := map[netip.Addr][]string{}
		for _, t := range p.Targets() {
			select {
			case <-ctx.Done():
				return
			case <-pace.C:
			}
			var macs []string
			for _, name := range t.Interfaces {
				heard, err := Probe(name, t.IP, p.Wait)
				if err != nil {
					p.Log.V(1).Info("self-check probe failed", "ip", t.IP, "interface", name, "error", err.Error())
					continue
				}
				macs = append(macs, heard...)
			}
			slices.Sort(macs)
			results[t.IP] = slices.Compact(macs)
		}
		p.Report(results)
		select {
		case <-ctx.Done():
			return
		case <-round.C:
		}
	}
}

// Probe asks who has ip on the interface (ARP for IPv4, NDP for IPv6) and returns the MACs
// that answered within wait.
func Probe(iface string, ip netip.Addr, wait time.Duration) ([]string, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	if ip.Is6() && !ip.Is4In6() {
		return probeNDP(ifi, ip, wait)
	}
	return probeARP(ifi, ip.Unmap(), wait)
}

func probeARP(ifi *net.Interface, ip netip.Addr, wait time.Duration) ([]string, error) {
	conn, err := packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeARP), nil)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	frame := l2.ARPProbe(ifi.HardwareAddr, ip)
	if frame == nil {
		return nil, errors.New("cannot build an ARP probe for " + ip.String())
	}
	if _, err := conn.WriteTo(frame, &packet.Addr{HardwareAddr: ethernet.Broadcast}); err != nil {
		return nil, err
	}
	if err := conn.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return nil, err
	}
	var macs []string
	buf := make([]byte, ifi.MTU+14)
	for {
		n, _, err := conn.ReadFrom(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return macs, nil
			}
			return macs, err
		}
		if mac := l2.ARPAnswer(buf[:n], ifi.HardwareAddr, ip); mac != nil && !slices.Contains(macs, mac.String()) {
			macs = append(macs, mac.String())
		}
	}
}

// probeNDP solicits ip from the interface's link-local address and collects the target
// link-layer addresses of the advertisements for ip that arrive with hop limit 255 (RFC 4861:
// anything else did not come from the link).
func probeNDP(ifi *net.Interface, ip netip.Addr, wait time.Duration) ([]string, error) {
	conn, _, err := ndp.Listen(ifi, ndp.LinkLocal)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var f ipv6.ICMPFilter
	f.SetAll(true)
	f.Accept(ipv6.ICMPTypeNeighborAdvertisement)
	if err := errors.Join(conn.SetICMPFilter(&f), conn.SetControlMessage(ipv6.FlagHopLimit, true)); err != nil {
		return nil, err
	}
	group, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return nil, err
	}
	ns := &ndp.NeighborSolicitation{TargetAddress: ip,
		Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: ifi.HardwareAddr}}}
	if err := conn.WriteTo(ns, nil, group); err != nil {
		return nil, err
	}
	if err := conn.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return nil, err
	}
	var macs []string
	for {
		m, cm, _, err := conn.ReadFrom()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return macs, nil
			}
			return macs, err
		}
		na, ok := m.(*ndp.NeighborAdvertisement)
		if !ok || na.TargetAddress.WithZone("") != ip || cm == nil || cm.HopLimit != ndp.HopLimit {
			continue
		}
		for _, o := range na.Options {
			if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target && !slices.Contains(macs, lla.Addr.String()) {
				macs = append(macs, lla.Addr.String())
			}
		}
	}
}
