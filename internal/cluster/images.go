package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Built is what BuildImages made: the OCI archives every node imports and Portico's
// manifests rendered for the image the archives hold.
type Built struct {
	Archives  []string
	Manifests string
}

// BuildImages builds into out, without Docker or a registry, Portico's image named ref for this
// machine's platform (hack/image, as `make image` does), the lab's pause and echo images
// (hack/image -lab), and config/default rendered for ref (hack/manifests.sh, as `make
// manifests IMAGE=ref` does) with kubectl.
func BuildImages(ctx context.Context, root, kubectl, out, ref string) (Built, error) {
	image := func(args ...string) error {
		return run(ctx, root, "go", append([]string{"-C", filepath.Join(root, "hack", "image"), "run", ".", "-src", root}, args...)...)
	}
	b := Built{Manifests: filepath.Join(out, "portico.yaml"), Archives: []string{
		filepath.Join(out, "portico", "portico.tar"), filepath.Join(out, "pause", "pause.tar"), filepath.Join(out, "echo", "echo.tar")}}
	if err := image("-out", filepath.Join(out, "portico"), "-ref", ref, "-platforms", "linux/"+runtime.GOARCH); err != nil {
		return b, err
	}
	if err := image("-out", out, "-lab"); err != nil {
		return b, err
	}
	return b, run(ctx, root, "bash", filepath.Join(root, "hack", "manifests.sh"), kubectl, ref, b.Manifests)
}

func run(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}
