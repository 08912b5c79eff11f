package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// bgpContainer runs a node's BGP side as the speaker pod's bgp container runs it
// (config/speaker/daemonset.yaml): its own process (bgp-process --speaker-socket) with that
// container's user and capabilities, in a memory cgroup of its own whose limit the kernel
// enforces, started again each time it ends, as the kubelet does (at once here: the kubelet
// waits 10 s and more after the second end in a row).
//
// The cgroup is what runc makes for a container: on cgroup v2 memory.max, with
// memory.oom.group=1 as the kubelet sets it, so an out-of-memory kill takes every process of
// the container; where the memory controller is on a v1 hierarchy (as on machines whose
// unified hierarchy lacks it) memory.limit_in_bytes, where the kernel kills the largest process
// in the cgroup.
type bgpContainer struct {
	node   string
	socket string
	cgroup memoryCgroup
	stop   chan struct{}
	done   chan struct{}

	mu     sync.Mutex
	pid    int
	starts int
	ends   []string // how each run ended
}

// startBGPContainer starts node's BGP container, its cgroup limited to limitMiB and its socket
// in the lab's log directory; it stops when the test ends.
func (e *l2Env) startBGPContainer(node string, limitMiB int64) *bgpContainer {
	cg, kind, err := newMemoryCgroup(e.t.TempDir(), fmt.Sprintf("portico-e2e-%d-%s", os.Getpid(), node), limitMiB<<20)
	must(e.t, err)
	e.t.Logf("%s's BGP container: memory limit %d MiB in %s", node, limitMiB, kind)
	c := &bgpContainer{node: node, socket: filepath.Join(e.logs, node+"-bgp.sock"), cgroup: cg,
		stop: make(chan struct{}), done: make(chan struct{})}
	sec := containerSecurity(e.t, "bgp")
	args := []string{bgpSubcommandName, "--speaker-socket", c.socket, "--node-name", node}
	// The shell joins the cgroup, then becomes the process, so all of it is charged there.
	inner := append([]string{"ip", "netns", "exec", e.node(node).NS}, sec.command(e.Speaker, args...)...)
	shell := append([]string{"-c", `echo $$ > "$0" && exec "$@"`, cg.procs()}, inner...)
	log, err := os.OpenFile(filepath.Join(e.logs, node+"-bgp.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	must(e.t, err)
	go func() {
		defer close(c.done)
		defer log.Close()
		for {
			cmd := exec.Command("sh", shell...)
			cmd.Stdout, cmd.Stderr = log, log
			cmd.Env = append(os.Environ(), sec.GoEnv...)
			if err := cmd.Start(); err != nil {
				e.t.Errorf("starting %s's BGP container: %v", node, err)
				return
			}
			c.mu.Lock()
			c.pid, c.starts = cmd.Process.Pid, c.starts+1
			c.mu.Unlock()
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			var err error
			select {
			case <-c.stop:
				_ = cmd.Process.Kill()
				<-exited
				return
			case err = <-exited:
			}
			c.mu.Lock()
			c.ends, c.pid = append(c.ends, fmt.Sprint(err)), 0
			c.mu.Unlock()
		}
	}()
	e.t.Cleanup(func() {
		close(c.stop)
		<-c.done
		cg.remove()
		if e.t.Failed() {
			b, _ := os.ReadFile(log.Name())
			if len(b) > 10000 {
				b = b[len(b)-10000:]
			}
			e.t.Logf("%s's BGP container log (tail):\n%s", node, b)
		}
	})
	return c
}

// runs is how many times the container was started, and how its runs ended.
func (c *bgpContainer) runs() (starts int, ends []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.starts, append([]string(nil), c.ends...)
}

// memoryCgroup is a memory cgroup made for a test: a v2 cgroup or one in the v1 memory
// hierarchy.
type memoryCgroup struct {
	dir   string
	v2    bool
	mount string // where its hierarchy is mounted
}

// newMemoryCgroup makes a memory cgroup named name limited to limit bytes, under a mount of
// the cgroup hierarchies made in dir (the lab's processes run under ip netns exec, whose /sys
// has no cgroup mounts; the mounts stay in its own mount namespace): in cgroup v2 when its
// hierarchy has the memory controller, with memory.oom.group=1, else in the v1 memory hierarchy.
func newMemoryCgroup(dir, name string, limit int64) (memoryCgroup, string, error) {
	v2, v1 := filepath.Join(dir, "v2"), filepath.Join(dir, "memory")
	for _, d := range []string{v2, v1} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return memoryCgroup{}, "", err
		}
	}
	if err := syscall.Mount("cgroup2", v2, "cgroup2", 0, ""); err != nil {
		return memoryCgroup{}, "", fmt.Errorf("mounting cgroup2: %w", err)
	}
	b, _ := os.ReadFile(filepath.Join(v2, "cgroup.controllers"))
	if strings.Contains(" "+string(b), " memory") {
		if err := enableMemory(v2); err != nil {
			return memoryCgroup{}, "", err
		}
		cg := memoryCgroup{dir: filepath.Join(v2, name), v2: true, mount: v2}
		return cg, "cgroup v2", cg.make(map[string]string{"memory.max": strconv.FormatInt(limit, 10), "memory.swap.max": "0", "memory.oom.group": "1"})
	}
	why := fmt.Sprintf("cgroup v2 without the memory controller (its cgroup.controllers: %q), which a v1 hierarchy holds", strings.TrimSpace(string(b)))
	_ = syscall.Unmount(v2, 0)
	if err := syscall.Mount("cgroup", v1, "cgroup", 0, "memory"); err != nil {
		return memoryCgroup{}, "", fmt.Errorf("%s; mounting the v1 memory hierarchy: %w", why, err)
	}
	cg := memoryCgroup{dir: filepath.Join(v1, name), mount: v1}
	return cg, "cgroup v1 (" + why + ")", cg.make(map[string]string{"memory.limit_in_bytes": strconv.FormatInt(limit, 10)})
}

// enableMemory has the v2 root's children get the memory controller (on a systemd machine
// they already do).
func enableMemory(root string) error {
	b, _ := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
	if strings.Contains(" "+string(b), " memory") {
		return nil
	}
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+memory"), 0o644); err != nil {
		return fmt.Errorf("enabling the memory controller in cgroup v2: %w", err)
	}
	return nil
}

func (cg memoryCgroup) make(settings map[string]string) error {
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		_ = syscall.Unmount(cg.mount, 0)
		return err
	}
	for _, f := range []string{"memory.limit_in_bytes", "memory.max", "memory.swap.max", "memory.oom.group"} {
		if v, ok := settings[f]; ok {
			if err := os.WriteFile(filepath.Join(cg.dir, f), []byte(v), 0o644); err != nil {
				cg.remove()
				return fmt.Errorf("%s: %w", f, err)
			}
		}
	}
	return nil
}

func (cg memoryCgroup) procs() string { return filepath.Join(cg.dir, "cgroup.procs") }

// peak is the most memory the cgroup has been charged, in bytes.
func (cg memoryCgroup) peak() int64 {
	if cg.v2 {
		return cg.read("memory.peak")
	}
	return cg.read("memory.max_usage_in_bytes")
}

// usage is the memory the cgroup is charged now, in bytes.
func (cg memoryCgroup) usage() int64 {
	if cg.v2 {
		return cg.read("memory.current")
	}
	return cg.read("memory.usage_in_bytes")
}

func (cg memoryCgroup) read(file string) int64 {
	b, _ := os.ReadFile(filepath.Join(cg.dir, file))
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// oomKills counts the processes the kernel killed in the cgroup for its limit.
func (cg memoryCgroup) oomKills() int {
	f := "memory.oom_control"
	if cg.v2 {
		f = "memory.events"
	}
	b, _ := os.ReadFile(filepath.Join(cg.dir, f))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// remove kills what is left in the cgroup and removes it once they have left.
func (cg memoryCgroup) remove() {
	_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		b, _ := os.ReadFile(cg.procs())
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		err := syscall.Rmdir(cg.dir)
		return err == nil || os.IsNotExist(err), nil
	})
	_ = syscall.Unmount(cg.mount, 0)
}

// useBGPContainers has startSpeaker give each node's speaker the socket of its BGP container
// (--bgp-socket), as the DaemonSet does.
func (e *l2Env) useBGPContainers(containers map[string]*bgpContainer) {
	e.bgpSockets = map[string]string{}
	for node, c := range containers {
		e.bgpSockets[node] = c.socket
	}
}
