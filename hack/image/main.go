// Command image builds Portico's container image without Docker: the binaries are compiled
// static (CGO_ENABLED=0) for each platform, laid on an empty base with the files a distroless
// "static" image has (passwd, group, /tmp, the nonroot home), and written as an OCI image
// layout and an OCI archive holding one index for every platform. `make image` runs it; the
// archive imports with `ctr -n k8s.io images import` or `k3s ctr images import`, the layout
// pushes with `crane push --index` (docs/install.md).
//
// It is a module of its own so the main module does not carry go-containerregistry.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Commands are the programs the image holds, each at /<name>: the Deployment runs
// /portico-controller, the DaemonSet /portico-speaker; the plugin is there for `kubectl exec`.
var Commands = []string{"portico-controller", "portico-speaker", "kubectl-portico"}

// Spec is one image: the packages compiled into it (each binary at /<last path element>),
// the entrypoint, and the OCI archive's file name.
type Spec struct {
	Ref        string
	Packages   []string
	Entrypoint string
	Archive    string
}

// Portico is Portico's own image under ref.
func Portico(ref string) Spec {
	s := Spec{Ref: ref, Entrypoint: "/portico-controller", Archive: "portico.tar"}
	for _, c := range Commands {
		s.Packages = append(s.Packages, "./cmd/"+c)
	}
	return s
}

// LabImages are the images `make cluster` imports into its nodes besides Portico's (no
// registry exists there): the pod sandbox and the HTTP server the home-lab apps run.
var LabImages = []Spec{
	{Ref: "portico.local/pause:lab", Packages: []string{"./hack/cluster/pause"}, Entrypoint: "/pause", Archive: "pause.tar"},
	{Ref: "portico.local/echo:lab", Packages: []string{"./hack/cluster/echo"}, Entrypoint: "/echo", Archive: "echo.tar"},
}

// DefaultRef is the reference the manifests name (config/default).
const DefaultRef = "ghcr.io/portico-lb/portico:v0.1.0"

// ReleasePlatforms are the platforms `make image` builds by default: a Raspberry Pi 4 or 5 runs
// the arm64 one.
const ReleasePlatforms = "linux/amd64,linux/arm64"

func main() {
	src := flag.String("src", ".", "the root of Portico's source tree")
	out := flag.String("out", "bin/image", "directory for the OCI layout (oci/) and the OCI archive (portico.tar)")
	ref := flag.String("ref", DefaultRef, "the image reference recorded in the archive, the name containerd imports it under")
	platforms := flag.String("platforms", ReleasePlatforms, "comma-separated os/arch list")
	binaries := flag.String("binaries", "", "only build this machine's binaries, as the image holds them, into this directory")
	lab := flag.Bool("lab", false, "build the lab images (pause, echo) for this machine into out/<name>/ instead")
	flag.Parse()
	if *lab {
		*platforms = runtime.GOOS + "/" + runtime.GOARCH
	}
	if err := run(*src, *out, *ref, *platforms, *binaries, *lab); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(src, out, ref, platformList, binariesOnly string, lab bool) error {
	if binariesOnly != "" {
		return Build(src, Platform{OS: runtime.GOOS, Arch: runtime.GOARCH}, binariesOnly, Portico(ref).Packages)
	}
	platforms, err := ParsePlatforms(platformList)
	if err != nil {
		return err
	}
	specs, dirs := []Spec{Portico(ref)}, []string{out}
	if lab {
		specs, dirs = LabImages, nil
		for _, s := range LabImages {
			dirs = append(dirs, filepath.Join(out, strings.TrimSuffix(s.Archive, ".tar")))
		}
	}
	for i, s := range specs {
		start := time.Now()
		archive, err := Make(src, dirs[i], s, platforms)
		if err != nil {
			return err
		}
		fmt.Printf("image: %s (%s) in %s, %s\n", archive, s.Ref, time.Since(start).Round(100*time.Millisecond), platformList)
	}
	return nil
}

// Platform is one os/arch the image is built for.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// ParsePlatforms reads "linux/amd64,linux/arm64".
func ParsePlatforms(list string) ([]Platform, error) {
	var ps []Platform
	for _, s := range strings.Split(list, ",") {
		os, arch, ok := strings.Cut(strings.TrimSpace(s), "/")
		if !ok || os == "" || arch == "" {
			return nil, fmt.Errorf("platform %q: want os/arch such as linux/arm64", s)
		}
		ps = append(ps, Platform{OS: os, Arch: arch})
	}
	return ps, nil
}

// Build compiles packages for p into dir. No -trimpath, and cgo is off as in every
// other build of the project (the Makefile exports CGO_ENABLED=0), so this shares the compile
// cache of the tests; -s drops the symbol table the image does not need. The grpcnotrace tag
// leaves out gRPC's request tracing (GoBGP links gRPC), whose HTML templates made the linker keep
// every exported method of every type: 12 MB of code, most of it resident (docs/install.md).
func Build(src string, p Platform, dir string, packages []string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	args := []string{"build", "-tags", "grpcnotrace", "-ldflags=-s", "-o", dir + "/"}
	args = append(args, packages...)
	cmd := exec.Command("go", args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s for %s: %v\n%s", strings.Join(args, " "), p, err, out)
	}
	return nil
}
