package bgpproc

import (
	"context"
	"errors"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The BGP process in a container of its own: it connects to the speaker's socket (Dial), the
// speaker accepts it (Supervisor.Socket) and talks to it as to its child.

// dialEvery paces Dial's attempts: a BGP process waiting for its speaker costs nothing more.
const dialEvery = 250 * time.Millisecond

// Dial connects a BGP process that runs on its own (its own container in the speaker's pod) to
// the speaker's socket (Supervisor.Socket), trying again while the socket is missing or refuses:
// the speaker's container may start later than this one, or be restarting.
func Dial(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return conn, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(dialEvery):
		}
	}
}

// start starts the next process (Command), or waits for it to connect (Socket).
func (s *Supervisor) start() (*proc, error) {
	if s.Socket == "" {
		return startProc(s.Command())
	}
	l, err := s.listen()
	if err != nil {
		return nil, err
	}
	return acceptProc(l)
}

// listen makes the listener on Socket the first time, replacing a file an earlier speaker left,
// readable and writable by this user alone (the BGP container runs as the same user).
func (s *Supervisor) listen() (*net.UnixListener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("closed")
	}
	if s.listener == nil {
		_ = os.Remove(s.Socket)
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.Socket, Net: "unix"})
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(s.Socket, 0o600); err != nil {
			_ = l.Close()
			return nil, err
		}
		s.listener = l
	}
	return s.listener, nil
}

// acceptProc waits on l for a BGP process started by someone else (the kubelet, in its own
// container) to connect. It counts as exited once its channel closes: the speaker cannot wait
// for a process that is not its child.
func acceptProc(l *net.UnixListener) (*proc, error) {
	conn, err := l.AcceptUnix()
	if err != nil {
		return nil, err
	}
	var process *os.Process
	if pid := peerPID(conn); pid > 0 && pid != os.Getpid() {
		process, _ = os.FindProcess(pid) // a pidfd: a kill never reaches a process that reused the PID
	}
	p := newProc(process, conn)
	go func() {
		<-p.read
		p.ended(errors.New("it closed its channel to the speaker"))
	}()
	return p, nil
}

// peerPID is the PID of the process at the other end of conn in this process's PID namespace
// (SO_PEERCRED): 0 when it runs in another one (a container of the pod without
// shareProcessNamespace).
func peerPID(conn *net.UnixConn) int {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}
