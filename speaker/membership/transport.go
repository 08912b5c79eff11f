package membership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// transport is memberlist's NetTransport on one address, but for the packets it reads: the
// NetTransport reads each one into a fresh 64 KiB buffer, and at 40 heartbeats a second those
// buffers were an idle speaker's garbage and most of its CPU (the collector's). This one reads
// into one buffer and hands memberlist a copy of the packet's own size; direct heartbeats
// (heartbeat.go) it hands to the fast path itself.
type transport struct {
	tcp     *net.TCPListener
	udp     *net.UDPConn
	packets chan *memberlist.Packet
	streams chan net.Conn
	closing atomic.Bool
	done    sync.WaitGroup
	log     *log.Logger
	direct  func(packet []byte, at time.Time) // takes each direct heartbeat; it must not keep the packet
	stray   func()                            // counts a direct heartbeat from no member's address
	steered atomic.Bool                       // the heartbeats' socket takes the members' heartbeats

	sent, received atomic.Int64 // UDP packets
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

// maxPacket is the largest UDP payload there is.
const maxPacket = 65536

// listen binds TCP and UDP on addr (a specific address) and port (0: one free for both);
// direct takes the direct heartbeats that reach it when the heartbeats' socket (heartsock.go)
// could not be bound beside it; with that socket, those that reach it are from no member's
// address, and stray counts each.
func listen(addr string, port int, logger *log.Logger, direct func(packet []byte, at time.Time), stray func()) (*transport, error) {
	ip := net.ParseIP(addr)
	if ip == nil || ip.IsUnspecified() {
		return nil, fmt.Errorf("membership: bind address %q is not one address", addr)
	}
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	udpAt := net.JoinHostPort(ip.String(), fmt.Sprint(tcp.Addr().(*net.TCPAddr).Port))
	conn, err := (&net.ListenConfig{Control: reusePort}).ListenPacket(context.Background(), "udp", udpAt)
	if err != nil {
		tcp.Close()
		return nil, fmt.Errorf("membership: %w", err)
	}
	udp := conn.(*net.UDPConn)
	// memberlist's receive window: bursts of gossip wait in the kernel, not dropped.
	for size := 2 << 20; size > 0; size /= 2 {
		if udp.SetReadBuffer(size) == nil {
			break
		}
	}
	t := &transport{tcp: tcp, udp: udp, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), log: logger,
		direct: direct, stray: stray}
	t.done.Add(2)
	go t.accept()
	go t.read()
	return t, nil
}

func (t *transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	a := t.tcp.Addr().(*net.TCPAddr)
	return a.IP, a.Port, nil
}

func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	to, err := net.ResolveUDPAddr("udp", a.Addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteTo(b, to)
	t.sent.Add(1)
	return time.Now(), err
}

// writeDirect sends a direct heartbeat.
func (t *transport) writeDirect(b []byte, to netip.AddrPort) error {
	_, err := t.udp.WriteToUDPAddrPort(b, to)
	t.sent.Add(1)
	return err
}

func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return (&net.Dialer{Timeout: timeout}).Dial("tcp", a.Addr)
}

func (t *transport) StreamCh() <-chan net.Conn { return t.streams }

func (t *transport) Shutdown() error {
	t.closing.Store(true)
	err := errors.Join(t.tcp.Close(), t.udp.Close())
	t.done.Wait()
	return err
}

func (t *transport) read() {
	defer t.done.Done()
	buf := make([]byte, maxPacket)
	for {
		n, from, err := t.udp.ReadFrom(buf)
		at := time.Now()
		if err != nil {
			if t.closing.Load() {
				return
			}
			t.log.Printf("[ERR] memberlist: Error reading UDP packet: %v", err)
			continue
		}
		t.received.Add(1)
		if n > 0 && buf[0] == heartbeatMagic && t.steered.Load() {
			t.stray()
		} else if n > 0 && buf[0] == heartbeatMagic {
			t.direct(buf[:n], at)
		} else if n > 0 {
			t.packets <- &memberlist.Packet{Buf: bytes.Clone(buf[:n]), From: from, Timestamp: at}
		}
	}
}

func (t *transport) accept() {
	defer t.done.Done()
	var delay time.Duration
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.closing.Load() {
				return
			}
			// As NetTransport: back off from 5 ms to 1 s while accepting fails.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.log.Printf("[ERR] memberlist: Error accepting TCP connection: %v", err)
			time.Sleep(delay)
			continue
		}
		delay = 0
		t.streams <- conn
	}
}
