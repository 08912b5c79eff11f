package membership

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// errNoAnswer is a connection attempt the other kernel never answered.
var errNoAnswer = errors.New("no answer")

// askKernel opens a TCP connection to addr and returns nil when the other kernel accepted it,
// unix.ECONNREFUSED when it refused it, or why there was no answer within wait. The socket's
// state is read after the wait, not inferred from whether this process woke in time: a
// process starved of CPU past the wait still reads the answer that came during it, so its own
// slowness never makes a live member look dead.
func askKernel(addr netip.AddrPort, wait time.Duration) error {
	family, sa, err := sockaddr(addr)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	switch err := unix.Connect(fd, sa); {
	case err == nil:
		return nil
	case !errors.Is(err, unix.EINPROGRESS):
		return err
	}
	for end := time.Now().Add(wait); ; {
		left := time.Until(end)
		if left <= 0 {
			break
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}, int(left.Milliseconds())+1)
		if n > 0 || (err != nil && !errors.Is(err, unix.EINTR)) {
			break
		}
	}
	ready := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	if n, _ := unix.Poll(ready, 0); n == 0 {
		return errNoAnswer
	}
	soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return err
	}
	if soErr != 0 {
		return unix.Errno(soErr)
	}
	return nil
}

func sockaddr(addr netip.AddrPort) (int, unix.Sockaddr, error) {
	ip := addr.Addr()
	if ip.Is4() {
		return unix.AF_INET, &unix.SockaddrInet4{Port: int(addr.Port()), Addr: ip.As4()}, nil
	}
	sa := &unix.SockaddrInet6{Port: int(addr.Port()), Addr: ip.As16()}
	if zone := ip.Zone(); zone != "" {
		ifi, err := net.InterfaceByName(zone)
		if err != nil {
			return 0, nil, err
		}
		sa.ZoneId = uint32(ifi.Index)
	}
	return unix.AF_INET6, sa, nil
}
