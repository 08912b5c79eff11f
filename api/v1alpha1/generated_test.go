package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/portico-lb/portico/internal/controlplane"
)

// TestGeneratedFilesAreFresh regenerates deepcopy code and CRDs into a temporary directory with
// the pinned controller-gen and compares them with the committed files.
func TestGeneratedFilesAreFresh(t *testing.T) {
	root, err := controlplane.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command("go", "tool", "controller-gen",
		"object:headerFile=hack/boilerplate.go.txt", "paths=./api/...", "output:object:dir="+out,
		"crd", "output:crd:dir="+filepath.Join(out, "crd"))
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, b)
	}
	compare(t, filepath.Join(out, "zz_generated.deepcopy.go"), filepath.Join(root, "api", "v1alpha1", "zz_generated.deepcopy.go"))

	fresh, _ := filepath.Glob(filepath.Join(out, "crd", "*.yaml"))
	committed, _ := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	names := func(paths []string) []string {
		var n []string
		for _, p := range paths {
			n = append(n, filepath.Base(p))
		}
		return n
	}
	if !slices.Equal(names(fresh), names(committed)) {
		t.Errorf("config/crd/bases holds %v, controller-gen makes %v: run `make generate`", names(committed), names(fresh))
	}
	for _, f := range fresh {
		compare(t, f, filepath.Join(root, "config", "crd", "bases", filepath.Base(f)))
	}
}

func compare(t *testing.T, fresh, committed string) {
	t.Helper()
	want, err := os.ReadFile(fresh)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(committed)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s is stale (or missing): run `make generate`", committed)
	}
}
