package config_test

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// There is no container engine on the test machines, so the image itself is not built here.
// What can be checked is: the Dockerfile's build command produces static binaries (no ELF
// interpreter, no shared libraries: they run on distroless "static"), the final stage copies
// exactly the binaries the manifests run, and those same binaries pass the RBAC test.

var (
	imageOnce sync.Once
	imageDir  string
	imageErr  error
)

// dockerfileBuild returns the Dockerfile's `RUN CGO_ENABLED=0 ... go build ... -o /out/ ...`.
func dockerfileBuild(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if cmd, ok := strings.CutPrefix(line, "RUN "); ok && strings.Contains(cmd, "go build") {
			return cmd
		}
	}
	t.Fatal("the Dockerfile has no RUN ... go build line")
	return ""
}

// imageBinaries runs the Dockerfile's build command (for this machine's architecture) once per
// test run and returns the directory holding its output.
func imageBinaries(t *testing.T) string {
	t.Helper()
	cmdline := dockerfileBuild(t)
	imageOnce.Do(func() {
		if imageDir, imageErr = os.MkdirTemp("", "portico-image-"); imageErr != nil {
			return
		}
		cmdline = strings.ReplaceAll(cmdline, "/out/", imageDir+"/")
		cmd := exec.Command("sh", "-c", cmdline)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "TARGETOS="+runtime.GOOS, "TARGETARCH="+runtime.GOARCH)
		if out, err := cmd.CombinedOutput(); err != nil {
			imageErr = fmt.Errorf("%s: %v\n%s", cmdline, err, out)
		}
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return imageDir
}

// TestImageBinariesAreStatic: what the Dockerfile builds needs no libc at run time.
func TestImageBinariesAreStatic(t *testing.T) {
	if cmd := dockerfileBuild(t); !strings.HasPrefix(cmd, "CGO_ENABLED=0 ") {
		t.Errorf("the build command %q does not disable cgo", cmd)
	}
	dir := imageBinaries(t)
	for _, name := range []string{"portico-controller", "portico-speaker"} {
		f, err := elf.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s asks for an ELF interpreter: it is dynamically linked", name)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s needs shared libraries %v", name, libs)
		}
		f.Close()
	}
}

// TestImageRunsWhatManifestsRun: the final stage is distroless static as non-root and holds
// the commands the Deployment and the DaemonSet run.
func TestImageRunsWhatManifestsRun(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	last := df[strings.LastIndex(df, "\nFROM "):]
	if !strings.Contains(last, "FROM gcr.io/distroless/static-debian12:nonroot\n") {
		t.Errorf("final stage is not distroless static nonroot:\n%s", last)
	}
	var d appsv1.Deployment
	renderedObject(t, "Deployment", "portico-controller", &d)
	var ds appsv1.DaemonSet
	renderedObject(t, "DaemonSet", "portico-speaker", &ds)
	for _, cmd := range [][]string{d.Spec.Template.Spec.Containers[0].Command, ds.Spec.Template.Spec.Containers[0].Command} {
		if len(cmd) != 1 || !strings.Contains(last, "/out"+cmd[0]) {
			t.Errorf("the manifests run %v, which the final stage does not copy:\n%s", cmd, last)
		}
	}
}
