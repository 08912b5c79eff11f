package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portico-lb/portico/demo"
	"github.com/portico-lb/portico/internal/controlplane"
)

// buildDemo builds cmd/portico-demo, the program behind `make demo`.
func buildDemo(t *testing.T) (bin, root string) {
	t.Helper()
	root, err := controlplane.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return buildBinary(t, "./cmd/portico-demo"), root
}

// TestDemoOnce runs the demo non-interactively and checks what a person would see.
func TestDemoOnce(t *testing.T) {
	bin, root := buildDemo(t)
	cmd := exec.Command(bin, "--once")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("portico-demo --once: %v\n%s", err, out)
	}
	t.Logf("demo output:\n%s", out)
	wants := []*regexp.Regexp{
		regexp.MustCompile(`ipaddresspool.portico.dev/home-lab created`),
		regexp.MustCompile(`(?m)^gitea\s+LoadBalancer\s+10\.\S+\s+10\.0\.0\.200\s+80:`),
		regexp.MustCompile(`(?m)^argocd\s+LoadBalancer\s+10\.\S+\s+10\.0\.0\.201\s+443:`),
		regexp.MustCompile(`(?m)^harbor\s+LoadBalancer\s+10\.\S+\s+10\.0\.0\.202\s+443:`),
		regexp.MustCompile(`(?m)^grafana\s+LoadBalancer\s+10\.\S+\s+10\.0\.0\.203\s+80:`),
		regexp.MustCompile(`(?m)^NAME\s+ADDRESSES\s+ASSIGNED\s+AVAILABLE\s+WAITING\s+AGE$`),
		regexp.MustCompile(`(?m)^home-lab\s+\["10\.0\.0\.200-10\.0\.0\.215"\]\s+4\s+12\s+0\s`),
		regexp.MustCompile(`(?m)^\$ kubectl portico status\nPOOLS\n`),
		regexp.MustCompile(`(?m)^home-lab\s+10\.0\.0\.200-10\.0\.0\.215\s+4\s+12\s+0\s`),
		regexp.MustCompile(`export KUBECONFIG=\S+`),
		regexp.MustCompile(`==> stopping the control plane`),
	}
	// As root the demo ends by fetching each EXTERNAL-IP from a client namespace through the
	// speakers and kube-proxy; the answer names the pod. CI is root and must show it.
	if why := demo.DataPlaneUsable(assetsDir(t, root)); why == "" {
		for _, answer := range []struct{ url, pod string }{
			{`10\.0\.0\.200/`, "gitea-10"}, {`10\.0\.0\.201:443/`, "argocd-10"},
			{`10\.0\.0\.202:443/`, "harbor-10"}, {`10\.0\.0\.203/`, "grafana-11"},
		} {
			wants = append(wants, regexp.MustCompile(`(?m)^\$ curl http://`+answer.url+`.*\n`+answer.pod+` 10\.\S+$`))
		}
	} else if os.Getenv("CI") == "true" {
		t.Fatalf("CI must run the demo's data plane: %s", why)
	} else {
		wants = append(wants, regexp.MustCompile(`\(no data plane: `))
	}
	for _, want := range wants {
		if !want.Match(out) {
			t.Errorf("demo output lacks %s", want)
		}
	}
}

// TestDemoStopsCleanlyOnInterrupt runs the demo as `make demo` does, waits until it is up,
// presses Ctrl-C and checks that it exits cleanly and removes what it made.
func TestDemoStopsCleanlyOnInterrupt(t *testing.T) {
	bin, root := buildDemo(t)
	cmd := exec.Command(bin)
	cmd.Dir = root
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	kubeconfig := ""
	var seen strings.Builder // what the demo printed, for a failure message
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		line := lines.Text()
		seen.WriteString(line + "\n")
		if k, ok := strings.CutPrefix(strings.TrimSpace(line), "export KUBECONFIG="); ok {
			kubeconfig = k
		}
		if strings.HasPrefix(line, "Press Ctrl-C") {
			break
		}
	}
	if kubeconfig == "" {
		t.Fatalf("the demo never printed its kubeconfig and the Ctrl-C prompt; it printed:\n%s", seen.String())
	}
	if _, err := os.Stat(kubeconfig); err != nil {
		t.Fatalf("kubeconfig printed but missing while the demo runs: %v", err)
	}
	// The printed kubeconfig works with the printed kubectl while the demo runs.
	kubectl := filepath.Join(root, "bin", "k8s", controlplane.Version, "kubectl")
	if out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "ipaddresspool", "home-lab").CombinedOutput(); err != nil {
		t.Fatalf("kubectl against the running demo: %v\n%s", err, out)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() { // drain, so the demo never blocks on a full pipe
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("demo exit after Ctrl-C: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("demo did not exit within 2 minutes of Ctrl-C")
	}
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Errorf("kubeconfig %s left behind after Ctrl-C (stat: %v)", kubeconfig, err)
	}
	// The data plane's namespaces (netlab names them pt<pid>-…) are gone too.
	list, _ := exec.Command("ip", "netns", "list").Output()
	if prefix := fmt.Sprintf("pt%d-", cmd.Process.Pid%100000); strings.Contains(string(list), prefix) {
		t.Errorf("namespaces %s* left behind after Ctrl-C:\n%s", prefix, list)
	}
}

// assetsDir is where `make controlplane` put its binaries.
func assetsDir(t *testing.T, root string) string {
	t.Helper()
	dir, err := controlplane.AssetsDir(root)
	must(t, err)
	return dir
}
