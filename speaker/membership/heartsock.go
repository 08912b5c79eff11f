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
// datagram here when its first byte is heartbeatMagic and to memberlist otherwise. It stays
// out of Go's network poller: the watch loop reads what arrived once a heartbeat, so a
// heartbeat wakes no thread when it arrives (each wake cost the idle speaker a thread switch
// or more, and the runtime's monitor thread another). The kernel stamps each datagram with the
// time it arrived, so reading late judges no member's silence longer than it was.
type heartbeatSocket struct {
	fd       int
	buf, oob []byte
	read     time.Time // the last read: nothing waiting arrived before it
}

// maxHeartbeat bounds a direct heartbeat: a node's name (at most 253 bytes), its life, a
// sequence number and the seal's nonce and tag. A longer datagram is cut short and opens for no
// key.
const maxHeartbeat = 512

// steerHeartbeats is the filter (classic BPF, run on the UDP payload) that picks the socket
// of the group, in the order they were bound: memberlist's (0) or the heartbeats' (1).
var steerHeartbeats = []unix.SockFilter{
	{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 0}, // the first byte (none: return 0)
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: uint32(heartbeatMagic), Jt: 0, Jf: 1},
	{Code: unix.BPF_RET | unix.BPF_K, K: 1},
	{Code: unix.BPF_RET | unix.BPF_K, K: 0},
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
	s := &heartbeatSocket{fd: fd, buf: make([]byte, maxHeartbeat), oob: make([]byte, 128), read: time.Now()}
	steer := unix.SockFprog{Len: uint16(len(steerHeartbeats)), Filter: &steerHeartbeats[0]}
	for _, step := range []func() error{
		func() error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) },
		func() error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) },
		func() error { return unix.Bind(fd, sa) },
		func() error {
			return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &steer)
		},
	} {
		if err := step(); err != nil {
			s.close()
			return nil, fmt.Errorf("membership: the heartbeats' socket on %s: %w", at, err)
		}
	}
	return s, nil
}

// readAll calls take with each heartbeat waiting and the time it arrived; take must not keep
// the packet.
func (s *heartbeatSocket) readAll(take func(packet []byte, at time.Time)) {
	now := time.Now()
	for {
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
