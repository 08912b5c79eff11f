package bgpproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one run of the BGP process, seen from the speaker: the process, its end of the
// channel and the calls waiting for an answer.
type proc struct {
	// process is the BGP process: the speaker's child, or one that connected to its socket
	// (another container of the pod) seen in its PID namespace; nil when it is out of sight.
	process *os.Process
	s       *stream
	done    chan struct{} // closed once the process has exited (or closed its channel); exit holds why, reason in a word
	read    chan struct{} // closed once every message it sent has been read (readAll)
	exit    error
	reason  string // exited (on its own), stuck, memory, start

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan answer // nil once the channel is gone
	killed  string                 // why the speaker killed it; "" if it did not
	kind    string                 // and the reason in a word
}

// startProc starts cmd with its end of a new socket pair as file descriptor 3. Run it from a
// goroutine locked to its thread: the process is killed when the thread that started it ends.
func startProc(cmd *exec.Cmd) (*proc, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket pair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "bgp-process"), os.NewFile(uintptr(fds[1]), "speaker")
	defer mine.Close()
	defer theirs.Close()
	cmd.ExtraFiles = []*os.File{theirs}
	// A speaker that dies (SIGKILL) takes its BGP process along: its sessions end as the
	// speaker's own did when they ran inside it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if cmd.Stdout == nil {
		cmd.Stdout = os.Stderr
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	conn, err := net.FileConn(mine)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	p := newProc(cmd.Process, conn)
	go func() { p.ended(cmd.Wait()) }()
	return p, nil
}

func newProc(process *os.Process, conn net.Conn) *proc {
	return &proc{process: process, s: newStream(conn), done: make(chan struct{}), read: make(chan struct{}), pending: map[uint64]chan answer{}}
}

// ended records why the process ended (the kill's reason when the speaker killed it).
func (p *proc) ended(err error) {
	reason := "exited"
	p.mu.Lock()
	if p.killed != "" {
		err, reason = errors.New(p.killed), p.kind
	}
	p.mu.Unlock()
	p.exit, p.reason = err, reason
	close(p.done)
}

// pid is the process's PID as the speaker sees it, 0 when out of sight.
func (p *proc) pid() int {
	if p.process == nil {
		return 0
	}
	return p.process.Pid
}

// readAll hands each answer to its call and every answer's states to states, until the channel
// closes; then it fails the calls still waiting.
func (p *proc) readAll(states func(answer)) {
	defer close(p.read)
	for {
		var a answer
		if err := p.s.dec.Decode(&a); err != nil {
			break
		}
		states(a)
		p.mu.Lock()
		if ch, ok := p.pending[a.ID]; ok {
			ch <- a
			delete(p.pending, a.ID)
		}
		p.mu.Unlock()
	}
	_ = p.s.conn.Close()
	p.mu.Lock()
	for _, ch := range p.pending {
		close(ch)
	}
	p.pending = nil
	p.mu.Unlock()
}

// call sends r and waits up to wait for its answer. A request that cannot be written in that
// time (a frozen process, its socket full) breaks the stream, so the process is killed.
func (p *proc) call(r request, wait time.Duration) (answer, error) {
	ch := make(chan answer, 1)
	p.mu.Lock()
	if p.pending == nil {
		p.mu.Unlock()
		return answer{}, errGone
	}
	p.next++
	r.ID = p.next
	p.pending[r.ID] = ch
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.pending, r.ID)
		p.mu.Unlock()
	}()
	deadline := time.Now().Add(wait)
	err := p.s.send(func() any {
		_ = p.s.conn.SetWriteDeadline(deadline)
		return r
	})
	if err != nil {
		p.kill("stuck", fmt.Sprintf("killed: a request could not be written: %v", err))
		return answer{}, errGone
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case a, ok := <-ch:
		if !ok {
			return answer{}, errGone
		}
		return a, nil
	case <-t.C:
		return answer{}, fmt.Errorf("the BGP process did not answer within %v", wait)
	}
}

// kill ends the process (SIGKILL), recording why (and the reason in a word) for the exit, and
// closes its channel: a process out of sight (another PID namespace) exits once it reads the
// end of it (cmd/portico-speaker's bgp-process), unless it is frozen whole.
func (p *proc) kill(reason, why string) {
	p.mu.Lock()
	if p.killed == "" {
		p.killed, p.kind = why, reason
	}
	p.mu.Unlock()
	if p.process != nil {
		_ = p.process.Kill()
	}
	_ = p.s.conn.Close()
}

// anonymous is the process's anonymous resident memory in bytes (RssAnon: the Go heap, stacks
// and runtime; the binary's pages, which the speaker maps too, left out), 0 when unreadable.
func (p *proc) anonymous() int64 {
	if p.pid() == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if kB, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(kB, "kB")), 10, 64)
			return n << 10
		}
	}
	return 0
}
