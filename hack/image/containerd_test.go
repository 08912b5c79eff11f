package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/ci"
)

// TestContainerdImport: the archive imports into a real containerd as a user does it
// (`ctr -n k8s.io images import`), lists under its reference, and its controller binary runs
// in a container through runc as user 65532. The containerd is the test's own (root, state and
// socket in a temporary directory, no CRI plugin) and is stopped at the end.
func TestContainerdImport(t *testing.T) {
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root"
	}
	ci.Require(t, why, "containerd", "ctr", "runc")
	archive := builtArchive(t)
	sock := startContainerd(t)
	ctr := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ctr", append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ctr("images", "import", archive)
	if list := ctr("images", "list", "--quiet"); !strings.Contains(list, DefaultRef+"\n") {
		t.Fatalf("ctr images list after the import:\n%s\nwant %s", list, DefaultRef)
	}
	// The image's own user and entrypoint, on this machine's platform: --help prints the flags.
	out := ctr("run", "--rm", DefaultRef, fmt.Sprintf("portico-image-test-%d", os.Getpid()), "/portico-controller", "--help")
	if !strings.Contains(out, "-leader-elect") {
		t.Errorf("/portico-controller --help in the container printed:\n%s", out)
	}
}

// startContainerd runs a containerd of the test's own and returns its socket once it answers.
func startContainerd(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "containerd.sock")
	config := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"+
		"[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n[plugins.\"io.containerd.internal.v1.opt\"]\n  path = %q\n",
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc", filepath.Join(dir, "opt"))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("containerd log:\n%s", b)
		}
	})
	// Poll until it answers, and stop at once if it exits.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for exec.Command("ctr", "--address", sock, "version").Run() != nil {
		select {
		case <-done:
			t.Fatal("containerd exited at start")
		case <-deadline:
			t.Fatal("containerd did not answer within 60s")
		case <-tick.C:
		}
	}
	return sock
}
