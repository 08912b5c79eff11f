package config_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// The image is built by hack/image (`make image`), whose own tests check the archive: both
// platforms, static binaries, user 65532, and an import into a real containerd. Here: the
// binaries the image holds, built the same way for this machine, are what the RBAC test runs,
// and they include every command the manifests run.

var (
	imageOnce sync.Once
	imageDir  string
	imageErr  error
)

// imageBinaries builds the image's binaries for this machine once per test run (hack/image
// -binaries: the same build as `make image`) and returns their directory.
func imageBinaries(t *testing.T) string {
	t.Helper()
	imageOnce.Do(func() {
		if imageDir, imageErr = os.MkdirTemp("", "portico-image-"); imageErr != nil {
			return
		}
		src, err := filepath.Abs("..") // go -C runs the builder in hack/image
		if err != nil {
			imageErr = err
			return
		}
		cmd := exec.Command("go", "-C", "../hack/image", "run", ".", "-src", src, "-binaries", imageDir)
		if out, err := cmd.CombinedOutput(); err != nil {
			imageErr = fmt.Errorf("hack/image -binaries: %v\n%s", err, out)
		}
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return imageDir
}

// TestImageRunsWhatManifestsRun: the Deployment and the DaemonSet run commands the image holds.
func TestImageRunsWhatManifestsRun(t *testing.T) {
	dir := imageBinaries(t)
	var d appsv1.Deployment
	renderedObject(t, "Deployment", "portico-controller", &d)
	var ds appsv1.DaemonSet
	renderedObject(t, "DaemonSet", "portico-speaker", &ds)
	for _, cmd := range [][]string{d.Spec.Template.Spec.Containers[0].Command, ds.Spec.Template.Spec.Containers[0].Command} {
		if len(cmd) != 1 || !strings.HasPrefix(cmd[0], "/") {
			t.Errorf("the manifests run %v: want one absolute path", cmd)
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, cmd[0])); err != nil {
			t.Errorf("the manifests run %v, which the image does not hold: %v", cmd, err)
		}
	}
}

// TestManifestsForImage: `make manifests IMAGE=...` renders the same manifests with every
// container running that image, by tag or by digest.
func TestManifestsForImage(t *testing.T) {
	want := string(readFile(t, rendered))
	for _, image := range []string{"registry.example:5000/portico:v0.2.0", "registry.example/lb/portico@sha256:" + strings.Repeat("ab", 32)} {
		out := filepath.Join(t.TempDir(), "portico.yaml")
		cmd := exec.Command("make", "-s", "-C", "..", "manifests", "IMAGE="+image, "MANIFESTS="+out)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make manifests IMAGE=%s: %v\n%s", image, err, b)
		}
		got := string(readFile(t, out))
		// The controller, the speaker and the speaker pod's bgp container.
		if n := strings.Count(got, "image: "+image+"\n"); n != 3 {
			t.Errorf("IMAGE=%s: %d containers run it, want 3", image, n)
		}
		if strings.ReplaceAll(got, "image: "+image+"\n", "image: ghcr.io/portico-lb/portico:v0.1.0\n") != want {
			t.Errorf("IMAGE=%s: the manifests differ in more than the image", image)
		}
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return b
}
