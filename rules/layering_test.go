package rules_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
// speaker does not link controller-runtime's client (nor its loop GoBGP), the rules they share
// and the two pure cores (controller/decide, speaker/plan) do no I/O, and internal/ helpers do
// not import testing outside tests.
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
	noIO := func(p string) bool {
		return ioFree[p] || strings.HasPrefix(p, "k8s.io/client-go") || strings.HasPrefix(p, "sigs.k8s.io/controller-runtime")
	}
	forbid("rules/...", "Imports", func(p string) bool {
		return noIO(p) || strings.HasPrefix(p, module) && !strings.HasPrefix(p, module+"api/") && !strings.HasPrefix(p, module+"rules")
	})
	// The controller's decisions are pure: no I/O, no client, no speaker code, and of Portico
	// only the API, the rules, the allocator, itself and the switches of its seeded bugs.
	forbid("controller/decide/...", "Imports", func(p string) bool {
		return noIO(p) || strings.HasPrefix(p, module) && !strings.HasPrefix(p, module+"api/") &&
			!strings.HasPrefix(p, module+"rules") && !strings.HasPrefix(p, module+"controller/allocator") &&
			!strings.HasPrefix(p, module+"controller/decide") && p != module+"controller/internal/seeded"
	})
	// Nor through what it imports.
	forbid("controller/decide/...", "Deps", func(p string) bool {
		return strings.HasPrefix(p, "k8s.io/client-go") || strings.HasPrefix(p, "sigs.k8s.io/controller-runtime") ||
			strings.HasPrefix(p, module+"speaker")
	})
	// The speaker's plan is pure: its inputs are the cluster's objects and the live members, its
	// output what the node announces. It opens no socket, calls no apiserver and links neither
	// GoBGP nor mdlayher's packet code (speaker/bgp and speaker/l2 apply the plan), nor any other
	// speaker package, which all do I/O: the BFD settings it fills are rules/bfdprofile's.
	forbid("speaker/plan/...", "Imports", func(p string) bool {
		return noIO(p) || strings.HasPrefix(p, module) && !strings.HasPrefix(p, module+"api/") && !strings.HasPrefix(p, module+"rules") &&
			!strings.HasPrefix(p, module+"speaker/plan")
	})
	forbid("speaker/plan", "Deps", func(p string) bool {
		return strings.HasPrefix(p, "github.com/osrg/gobgp") || strings.HasPrefix(p, "github.com/mdlayher/") ||
			strings.HasPrefix(p, "k8s.io/client-go") || strings.HasPrefix(p, module+"controller") ||
			strings.HasPrefix(p, "sigs.k8s.io/controller-runtime") ||
			strings.HasPrefix(p, module+"speaker/") && !strings.HasPrefix(p, module+"speaker/plan")
	})
	// The speaker's loop knows no concrete router (speaker.Router carries its change callback)
	// and reads session states as plan.SessionState: it links no GoBGP, which only speaker/bgp
	// embeds (run in the BGP process, or in the speaker by tests).
	forbid("speaker", "Deps", func(p string) bool { return strings.HasPrefix(p, "github.com/osrg/gobgp") })
}

// TestNoWallClock: the two pure cores take the time they decide at as an argument, so a
// transcript or a simulation sets it; no non-test file of controller/decide or speaker/plan
// reads the clock.
func TestNoWallClock(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}{{range .GoFiles}} {{.}}{{end}}", module+"controller/decide/...", module+"speaker/plan/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	clock := regexp.MustCompile(`\btime\.(Now|Since|Until|Sleep|After|AfterFunc|NewTimer|NewTicker|Tick)\(`)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, name := range f[1:] {
			src, err := os.ReadFile(filepath.Join(f[0], name))
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range strings.Split(string(src), "\n") {
				if clock.MatchString(l) {
					t.Errorf("%s:%d reads the wall clock: %s", filepath.Join(f[0], name), i+1, strings.TrimSpace(l))
				}
			}
		}
	}
}
