package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is one of the cluster's long-running programs, its output in logs/<name>.log.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs bin in network namespace ns ("" for the host's) and stops it at cleanup: SIGTERM,
// then SIGKILL when it has not exited within ten seconds. nsenter enters the network namespace
// only (`ip netns exec` would also give it a mount namespace of its own, and a kubelet's
// volume mounts must be seen by its containerd).
func (c *Cluster) start(name, ns, bin string, args ...string) *process {
	// Appended to: a process restarted (StartRuntime) keeps its earlier log.
	logf, err := os.OpenFile(filepath.Join(c.Logs, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.owner.Fatalf("%v", err)
	}
	cmd := exec.Command(bin, args...)
	if ns != "" {
		cmd = exec.Command("nsenter", append([]string{"--net=/var/run/netns/" + ns, "--", bin}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.owner.Fatalf("starting %s: %v", name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	c.owner.Cleanup(p.stop)
	c.processes = append(c.processes, p)
	return p
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
