package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is one of the cluster's long-running programs, its output in logs/<name>.log.
type process struct {
	name, ns, bin string
	args          []string
	logs          string
	cmd           *exec.Cmd
	done          chan struct{}
}

// start runs bin in network namespace ns ("" for the host's) and stops it at cleanup: SIGTERM,
// then SIGKILL when it has not exited within ten seconds. nsenter enters the network namespace
// only (`ip netns exec` would also give it a mount namespace of its own, and a kubelet's
// volume mounts must be seen by its containerd).
func (c *Cluster) start(name, ns, bin string, args ...string) *process {
	p := &process{name: name, ns: ns, bin: bin, args: args, logs: c.Logs}
	if err := p.spawn(); err != nil {
		c.owner.Fatalf("%v", err)
	}
	c.owner.Cleanup(p.stop)
	c.processes = append(c.processes, p)
	return p
}

// spawn runs the process (again, once it has stopped), appending to its log. A restarted
// process keeps its place in the cleanups: containerd must still outlive the removal of its
// containers.
func (p *process) spawn() error {
	logf, err := os.OpenFile(filepath.Join(p.logs, p.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	if p.ns != "" {
		cmd = exec.Command("nsenter", append([]string{"--net=/var/run/netns/" + p.ns, "--", p.bin}, p.args...)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
