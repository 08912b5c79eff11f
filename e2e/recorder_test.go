package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/portico-lb/portico/internal/netlab"
)

// packetRecorder records the IPv4 packets a namespace's eth0 receives that match, as a host on
// the path that keeps them for later would: what match keeps of each, and when it arrived.
type packetRecorder struct {
	conn  *packet.Conn
	match func(ip []byte) ([]byte, bool)
	done  chan struct{}

	mu  sync.Mutex
	got []recorded
}

type recorded struct {
	at      time.Time
	payload []byte
}

func recordPackets(t testing.TB, ns string, match func(ip []byte) ([]byte, bool)) *packetRecorder {
	r := &packetRecorder{match: match, done: make(chan struct{})}
	must(t, netlab.In(ns, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		r.conn, err = packet.Listen(ifi, packet.Datagram, unix.ETH_P_IP, nil)
		return err
	}))
	go r.read()
	t.Cleanup(r.stop)
	return r
}

func (r *packetRecorder) read() {
	defer close(r.done)
	buf := make([]byte, 1500)
	for {
		n, _, err := r.conn.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		if kept, ok := r.match(buf[:n]); ok {
			r.mu.Lock()
			r.got = append(r.got, recorded{at: time.Now(), payload: kept})
			r.mu.Unlock()
		}
	}
}

func (r *packetRecorder) stop() {
	_ = r.conn.Close()
	<-r.done
}

// packets returns what was recorded so far.
func (r *packetRecorder) packets() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.got...)
}

// ipv4Header returns an IPv4 packet's protocol, source and its payload (the transport header on).
func ipv4Header(ip []byte) (proto byte, src netip.Addr, payload []byte, ok bool) {
	if len(ip) < 20 || ip[0]>>4 != 4 {
		return 0, netip.Addr{}, nil, false
	}
	hl := int(ip[0]&0x0f) * 4
	if len(ip) < hl+8 {
		return 0, netip.Addr{}, nil, false
	}
	src, _ = netip.AddrFromSlice(ip[12:16])
	return ip[9], src, ip[hl:], true
}

// udpTo keeps the UDP payloads from src to port.
func udpTo(src netip.Addr, port uint16) func(ip []byte) ([]byte, bool) {
	return func(ip []byte) ([]byte, bool) {
		proto, from, l4, ok := ipv4Header(ip)
		if !ok || proto != unix.IPPROTO_UDP || from != src || binary.BigEndian.Uint16(l4[2:]) != port {
			return nil, false
		}
		return append([]byte(nil), l4[8:]...), true
	}
}

// sendSpoofedUDP sends each packet from namespace ns to to with from as the source (an address
// ns does not have: IP_TRANSPARENT) and TTL 255, as a host on the LAN that impersonates another
// can.
func sendSpoofedUDP(ns string, from, to netip.AddrPort, packets ...[]byte) error {
	return netlab.In(ns, func() error {
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1) })
			return errors.Join(err, serr)
		}}
		pc, err := lc.ListenPacket(context.Background(), "udp4", from.String())
		if err != nil {
			return err
		}
		defer pc.Close()
		if err := ipv4.NewPacketConn(pc).SetTTL(255); err != nil {
			return err
		}
		for _, p := range packets {
			if _, err := pc.WriteTo(p, net.UDPAddrFromAddrPort(to)); err != nil {
				return err
			}
		}
		return nil
	})
}
