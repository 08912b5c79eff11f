package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

// cgroupHierarchies are the host's cgroup v1 hierarchies (and the hybrid unified one): the
// directories under /sys/fs/cgroup, not the symlinks that alias combined ones.
func cgroupHierarchies() []string {
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return dirs
}

// makeCgroups creates the kubelet's cgroup root in every hierarchy; a new cpuset starts with
// no CPUs and no memory nodes, so it gets its parent's.
func makeCgroups(root string) error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// removeCgroups removes the cgroup root and everything the kubelet and runc made below it,
// deepest first, killing any process still inside (none should be, by now).
func removeCgroups(root string) {
	for _, h := range cgroupHierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true,
				func(context.Context) (bool, error) {
					killAll(filepath.Join(d, "cgroup.procs"))
					err := unix.Rmdir(d)
					return err == nil || os.IsNotExist(err), nil
				})
		}
	}
}

func killAll(procs string) {
	b, _ := os.ReadFile(procs)
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountUnder detaches every mount at or below dir (the kubelet's volumes and its root's
// bind mount, containers' root file systems and shm, pod network namespaces), deepest first.
func unmountUnder(dir string) {
	for range 5 { // mounts stacked on one point come off one per pass
		points := mountsUnder(dir)
		if len(points) == 0 {
			return
		}
		sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
		for _, p := range points {
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	}
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) []string {
	var points []string
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := unescapeMount(f[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	return points
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// kubeletSysctls are the host-wide kernel settings a kubelet sets when it starts
// (KubeletConfiguration protectKernelDefaults: false); they are the host's, not a node's.
var kubeletSysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

// restoreSysctls reads the settings kubelets will change and returns what writes them back.
func restoreSysctls() func() {
	saved := map[string][]byte{}
	for _, k := range kubeletSysctls {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			saved[k] = b
		}
	}
	return func() {
		for k, b := range saved {
			_ = os.WriteFile("/proc/sys/"+k, b, 0o644)
		}
	}
}

// processesNaming lists the processes whose command line names dir: a containerd shim names
// its containerd's socket, and outlives a containerd stopped before its containers.
func processesNaming(dir string) []string {
	var found []string
	for pid, cmdline := range commandLinesNaming(dir + "/") {
		found = append(found, fmt.Sprintf("process %d: %s", pid, cmdline))
	}
	return found
}

// commandLinesNaming are the command lines, by process, that contain s.
func commandLinesNaming(s string) map[int]string {
	found := map[int]string{}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil && strings.Contains(cmdline, s) {
			found[pid] = cmdline
		}
	}
	return found
}
