package bfd

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Port is the single-hop control port (RFC 5881 §4).
const Port = 3784

// MultihopPort is the UDP port of multihop BFD control packets (RFC 5883 §5).
const MultihopPort = 4784

// portOf is the UDP port of h's control packets.
func portOf(h Hops) uint16 {
	if h.Multihop {
		return MultihopPort
	}
	return Port
}

// accepts reports whether a packet that arrived with ttl may belong to a session of kind h.
func accepts(h Hops, ttl int) bool {
	if h.Multihop {
		return ttl >= int(h.MinTTL)
	}
	return ttl == gtsmTTL
}

// gtsmTTL is the only TTL (hop limit) a single-hop packet may be sent or received with: a packet
// that crossed a router arrives with less (RFC 5881 §5, the Generalized TTL Security Mechanism).
const gtsmTTL = 255

// received is one datagram read from the control port.
type received struct {
	from netip.Addr
	ttl  int
	data []byte
}

// listener reads control packets of one address family from one port, with each packet's TTL.
type listener struct {
	conn *net.UDPConn
	read func(b []byte) (n, ttl int, from netip.Addr, err error)
}

func listen(v4 bool, port uint16) (*listener, error) {
	network, wildcard := "udp6", netip.IPv6Unspecified()
	if v4 {
		network, wildcard = "udp4", netip.IPv4Unspecified()
	}
	c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(wildcard, port)))
	if err != nil {
		return nil, fmt.Errorf("listening on BFD port %d/%s: %w", port, network, err)
	}
	l := &listener{conn: c}
	if v4 {
		pc := ipv4.NewPacketConn(c)
		err = pc.SetControlMessage(ipv4.FlagTTL, true)
		l.read = func(b []byte) (int, int, netip.Addr, error) {
			n, cm, src, err := pc.ReadFrom(b)
			ttl := -1
			if cm != nil {
				ttl = cm.TTL
			}
			return n, ttl, addrOf(src), err
		}
	} else {
		pc := ipv6.NewPacketConn(c)
		err = pc.SetControlMessage(ipv6.FlagHopLimit, true)
		l.read = func(b []byte) (int, int, netip.Addr, error) {
			n, cm, src, err := pc.ReadFrom(b)
			ttl := -1
			if cm != nil {
				ttl = cm.HopLimit
			}
			return n, ttl, addrOf(src), err
		}
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("asking for the TTL of received BFD packets: %w", err)
	}
	return l, nil
}

func addrOf(a net.Addr) netip.Addr {
	if u, ok := a.(*net.UDPAddr); ok {
		return u.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// serve hands every datagram to deliver until the socket is closed.
func (l *listener) serve(deliver func(received)) {
	buf := make([]byte, 1500)
	for {
		n, ttl, from, err := l.read(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue // a transient read error loses one packet, which BFD tolerates by design
		}
		deliver(received{from: from, ttl: ttl, data: append([]byte(nil), buf[:n]...)})
	}
}

// dialPeer opens the socket one session sends from: to the peer's port (3784, or 4784 for
// multihop), from a source port in 49152–65535 (RFC 5881 §4, RFC 5883 §5), with TTL 255. src
// may be zero (the kernel picks the address).
func dialPeer(peer, src netip.Addr, dport uint16) (*net.UDPConn, error) {
	network := "udp6"
	if peer.Is4() {
		network = "udp4"
	}
	if !src.IsValid() {
		src = netip.IPv6Unspecified()
		if peer.Is4() {
			src = netip.IPv4Unspecified()
		}
	}
	raddr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer, dport))
	var lastErr error
	for range 32 {
		port := uint16(49152 + rand.IntN(65536-49152))
		c, err := net.DialUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, port)), raddr)
		if errors.Is(err, syscall.EADDRINUSE) {
			lastErr = err
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("opening the BFD socket to %s: %w", peer, err)
		}
		if peer.Is4() {
			err = ipv4.NewConn(c).SetTTL(gtsmTTL)
		} else {
			err = ipv6.NewConn(c).SetHopLimit(gtsmTTL)
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("setting TTL 255 on the BFD socket to %s: %w", peer, err)
		}
		return c, nil
	}
	return nil, fmt.Errorf("no free BFD source port to %s: %w", peer, lastErr)
}
