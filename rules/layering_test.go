package rules_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/portico-lb/portico/"

// packages lists, with go list, each package matching pattern and what field (Imports or Deps)
// says it uses.
func packages(t *testing.T, pattern, field string) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range ."+field+"}} {{.}}{{end}}", module+pattern).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pattern, err, out)
	}
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkgs[f[0]] = f[1:]
	}
	return pkgs
}

// TestLayering: controller/ and speaker/ are siblings that never link each other's code, the
// speaker does not link controller-runtime's client, the rules they share and the speaker's plan
// do no I/O, and internal/ helpers do not import testing outside tests.
func TestLayering(t *testing.T) {
	forbid := func(pattern, field string, bad func(string) bool) {
		for pkg, uses := range packages(t, pattern, field) {
			for _, u := range uses {
				if bad(u) {
					t.Errorf("%s uses %s", pkg, u)
				}
			}
		}
	}
	forbid("controller/...", "Deps", func(p string) bool { return strings.HasPrefix(p, module+"speaker") })
	forbid("speaker/...", "Deps", func(p string) bool { return strings.HasPrefix(p, module+"controller") })
	// The speaker runs on every node: it reads its few kinds through speaker/kubeapi, not through
	// controller-runtime's client, which registers every Kubernetes API group at start-up (about
	// 17 MiB of an idle speaker's memory).
	heavy := func(p string) bool {
		return p == "k8s.io/client-go/kubernetes/scheme" || p == "sigs.k8s.io/controller-runtime/pkg/client"
	}
	forbid("speaker/...", "Deps", heavy)
	forbid("cmd/portico-speaker", "Deps", heavy)
	// Test helpers take small interfaces (netlab.T, ci.T, controlplane.TB), so a program such as
	// the demo that uses them does not link the testing package and its flags.
	forbid("internal/...", "Imports", func(p string) bool { return p == "testing" })
	ioFree := map[string]bool{"os": true, "os/exec": true, "net": true, "net/http": true, "io/fs": true, "syscall": true}
	forbid("rules/...", "Imports", func(p string) bool {
		return ioFree[p] || strings.HasPrefix(p, "k8s.io/client-go") || strings.HasPrefix(p, "sigs.k8s.io/controller-runtime") ||
			strings.HasPrefix(p, module) && !strings.HasPrefix(p, module+"api/") && !strings.HasPrefix(p, module+"rules")
	})
	// The speaker's plan is pure: its inputs are the cluster's objects and the live members, its
	// output what the node announces. It opens no socket, calls no apiserver and links neither
	// GoBGP nor mdlayher's packet code (speaker/bgp and speaker/l2 apply the plan); it may use
	// speaker/bfd's Config, the settings a BFD session is asked for.
	forbid("speaker/plan/...", "Imports", func(p string) bool {
		return ioFree[p] || strings.HasPrefix(p, "k8s.io/client-go") || strings.HasPrefix(p, "sigs.k8s.io/controller-runtime") ||
			strings.HasPrefix(p, module) && !strings.HasPrefix(p, module+"api/") && !strings.HasPrefix(p, module+"rules") &&
				!strings.HasPrefix(p, module+"speaker/plan") && p != module+"speaker/bfd"
	})
	forbid("speaker/plan", "Deps", func(p string) bool {
		return strings.HasPrefix(p, "github.com/osrg/gobgp") || strings.HasPrefix(p, "github.com/mdlayher/") ||
			strings.HasPrefix(p, "k8s.io/client-go") || strings.HasPrefix(p, module+"controller") ||
			strings.HasPrefix(p, "sigs.k8s.io/controller-runtime") && p != "sigs.k8s.io/controller-runtime/pkg/scheme" // the API types' registration
	})
	// Nor does it read the wall clock: the time, where a decision needs it, is passed in.
	for _, file := range sources(t, "speaker/plan") {
		if strings.Contains(file.text, "time.Now(") {
			t.Errorf("%s calls time.Now", file.name)
		}
	}
}

type source struct{ name, text string }

// sources are the non-test Go files of the package at dir (relative to the module root).
func sources(t *testing.T, dir string) []source {
	t.Helper()
	names, err := filepath.Glob(filepath.Join("..", dir, "*.go"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	var out []source
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, source{name, string(b)})
	}
	return out
}
