package membership

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// heartbeatSocket is where direct heartbeats arrive: a second socket on the gossip address
// and port, beside memberlist's (both SO_REUSEPORT), and a filter on the two that sends a
// datagram here when its first byte is heartbeatMagic and it comes from the address of a
// member, and to memberlist otherwise. It stays out of Go's network poller: the watch loop
// reads what arrived once a heartbeat, so a heartbeat wakes no thread when it arrives (each
// wake cost the idle speaker a thread switch or more, and the runtime's monitor thread
// another). The kernel stamps each datagram with the time it arrived, so reading late judges
// no member's silence longer than it was.
//
// The members' addresses in the filter keep a flood from elsewhere (garbage, or heartbeats
// recorded and sent again from another host) out of this socket's queue: it goes to
// memberlist's reader, which drops it, and the members' heartbeats wait behind none of it. A
// flood that forges a member's source address still reaches this queue; the watch loop then
// reads at most maxReadsPerTick datagrams a tick, so it goes on sending and judging.
type heartbeatSocket struct {
	fd       int
	v6       bool // bound to an IPv6 address: the members' addresses are IPv6 too
	buf, oob []byte
	read     time.Time // the last read: nothing waiting arrived before it
}

// maxHeartbeat bounds a direct heartbeat: a node's name (at most 253 bytes), two lives, a
// sequence number and the seal's nonce and tag. A longer datagram is cut short and opens for
// no key.
const maxHeartbeat = 512

// maxReadsPerTick bounds what the watch loop reads in one tick: far more heartbeats than a
// member is sent in one, however many members there are.
const maxReadsPerTick = 4096

// skfNetOff is SKF_NET_OFF (-0x100000) as a classic BPF load's offset: what follows it counts
// from the start of the IP header, where the filter's own offsets count from the UDP payload.
const skfNetOff = 0xfff00000

// steerFilter is the filter (classic BPF) that picks the socket of the group, in the order
// they were bound: the heartbeats' (1) for a datagram whose first byte is heartbeatMagic and
// whose source is one of sources, memberlist's (0) for every other. Each address is tested in
// a block of its own, so no jump is longer than a block (classic BPF jumps 255 at most).
func steerFilter(sources []netip.Addr, v6 bool) ([]unix.SockFilter, error) {
	ld := func(k uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: k}
	}
	jeq := func(k uint32, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jf: jf}
	}
	ret := func(k uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k} }
	f := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 0}, // the first byte (none: return 0)
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: uint32(heartbeatMagic), Jt: 1},
		ret(0),
	}
	for _, a := range sources {
		switch a = a.Unmap(); {
		case !v6 && a.Is4():
			b := a.As4()
			f = append(f, ld(skfNetOff+12), jeq(binary.BigEndian.Uint32(b[:]), 1), ret(1))
		case v6 && a.Is6():
			b := a.As16()
			for i := range 4 { // the source's four words, from the header's 8th byte
				f = append(f, ld(skfNetOff+8+uint32(4*i)), jeq(binary.BigEndian.Uint32(b[4*i:]), uint8(7-2*i)))
			}
			f = append(f, ret(1))
		}
	}
	f = append(f, ret(0))
	if len(f) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("%d members' addresses make a filter of %d instructions, past the kernel's %d", len(sources), len(f), unix.BPF_MAXINSNS)
	}
	return f, nil
}

// fromAnywhere is the filter that steers by the first byte alone, for a group whose members'
// addresses do not fit in one.
var fromAnywhere = []unix.SockFilter{
	{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 0},
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: uint32(heartbeatMagic), Jt: 0, Jf: 1},
	{Code: unix.BPF_RET | unix.BPF_K, K: 1},
	{Code: unix.BPF_RET | unix.BPF_K, K: 0},
}

// steer has the kernel send this socket the heartbeats from sources, and from nowhere else;
// when they do not fit in a filter, the heartbeats from anywhere, and the error says so.
func (s *heartbeatSocket) steer(sources []netip.Addr) error {
	f, tooMany := steerFilter(sources, s.v6)
	if tooMany != nil {
		f = fromAnywhere
	}
	if err := s.attach(f); err != nil {
		return err
	}
	return tooMany
}

func (s *heartbeatSocket) attach(f []unix.SockFilter) error {
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	return unix.SetsockoptSockFprog(s.fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &prog)
}

// reusePort is a net.ListenConfig Control that lets the heartbeats' socket share the port.
func reusePort(_, _ string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); cerr != nil {
		return cerr
	}
	return err
}

// listenHeartbeats binds the heartbeats' socket beside gossip, memberlist's UDP socket (bound
// with reusePort, before it), and steers the heartbeats to it.
func listenHeartbeats(gossip *net.UDPConn) (*heartbeatSocket, error) {
	at := gossip.LocalAddr().(*net.UDPAddr).AddrPort()
	family, sa, err := sockaddr(netip.AddrPortFrom(at.Addr().Unmap(), at.Port()))
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	s := &heartbeatSocket{fd: fd, v6: family == unix.AF_INET6, buf: make([]byte, maxHeartbeat), oob: make([]byte, 128), read: time.Now()}
	for _, step := range []func() error{
		func() error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) },
		func() error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) },
		func() error { return unix.Bind(fd, sa) },
		func() error { return s.steer(nil) }, // no member known yet
	} {
		if err := step(); err != nil {
			s.close()
			return nil, fmt.Errorf("membership: the heartbeats' socket on %s: %w", at, err)
		}
	}
	return s, nil
}

// readAll calls take with each heartbeat waiting (up to maxReadsPerTick) and the time it
// arrived; take must not keep the packet.
func (s *heartbeatSocket) readAll(take func(packet []byte, at time.Time)) {
	now := time.Now()
	for range maxReadsPerTick {
		// syscall's, not unix's: that one asks the socket's protocol for every datagram.
		n, oobn, _, _, err := syscall.Recvmsg(s.fd, s.buf, s.oob, unix.MSG_DONTWAIT)
		if err != nil {
			break // EAGAIN: nothing more
		}
		take(s.buf[:n], arrival(s.oob[:oobn], now, s.read))
	}
	s.read = now
}

// arrival is when a datagram arrived, from its kernel stamp (wall-clock time) taken back to
// now's monotonic clock, and never before the last read (the wall clock may have been set).
func arrival(oob []byte, now, lastRead time.Time) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return now
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_TIMESTAMPNS {
			continue
		}
		var sec, nsec int64
		switch d := m.Data; len(d) { // a struct timespec of the platform's word size
		case 16:
			sec, nsec = int64(binary.NativeEndian.Uint64(d)), int64(binary.NativeEndian.Uint64(d[8:]))
		case 8:
			sec, nsec = int64(int32(binary.NativeEndian.Uint32(d))), int64(int32(binary.NativeEndian.Uint32(d[4:])))
		default:
			return now
		}
		age := time.Duration(now.UnixNano() - (sec*1e9 + nsec))
		return now.Add(-min(max(age, 0), now.Sub(lastRead)))
	}
	return now
}

// send sends a packet to addr, best effort.
func (s *heartbeatSocket) send(packet []byte, addr netip.AddrPort) error {
	_, sa, err := sockaddr(addr)
	if err != nil {
		return err
	}
	return unix.Sendto(s.fd, packet, unix.MSG_DONTWAIT, sa)
}

func (s *heartbeatSocket) close() { _ = unix.Close(s.fd) }
