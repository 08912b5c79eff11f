package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	archiveOnce sync.Once
	archivePath string
	archiveErr  error
	archiveDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if archiveDir != "" {
		os.RemoveAll(archiveDir)
	}
	os.Exit(code)
}

// testedPlatforms are what the tests build the image for: in CI (CI=true) every platform
// `make image` builds; elsewhere this machine's alone, so that `make test` stays within
// minutes: another architecture is a second compile of every dependency, the dominant cost of
// the image from a cold cache.
func testedPlatforms() string {
	if os.Getenv("CI") == "true" {
		return ReleasePlatforms
	}
	return "linux/" + runtime.GOARCH
}

// builtArchive runs what `make image` runs, for testedPlatforms, once per test binary.
func builtArchive(t *testing.T) string {
	t.Helper()
	archiveOnce.Do(func() {
		if archiveDir, archiveErr = os.MkdirTemp("", "portico-image-"); archiveErr != nil {
			return
		}
		platforms, _ := ParsePlatforms(testedPlatforms())
		start := time.Now()
		archivePath, archiveErr = Make("../..", archiveDir, Portico(DefaultRef), platforms)
		t.Logf("image for %s built in %s", testedPlatforms(), time.Since(start).Round(100*time.Millisecond))
	})
	if archiveErr != nil {
		t.Fatal(archiveErr)
	}
	return archivePath
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

type index struct {
	MediaType string       `json:"mediaType"`
	Manifests []descriptor `json:"manifests"`
}

type manifest struct {
	MediaType string       `json:"mediaType"`
	Config    descriptor   `json:"config"`
	Layers    []descriptor `json:"layers"`
}

type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		User       string   `json:"User"`
		Entrypoint []string `json:"Entrypoint"`
	} `json:"config"`
}

// TestArchive reads the archive as any OCI tool would, with nothing but the standard library:
// index.json names one image index under the reference, which holds an image for each tested
// platform (linux/amd64 and linux/arm64 in CI); each runs as 65532 and holds the commands as
// static ELF binaries for its architecture, with distroless's users.
func TestArchive(t *testing.T) {
	files := untar(t, openFile(t, builtArchive(t)))
	if !strings.Contains(string(files["oci-layout"]), `"imageLayoutVersion"`) {
		t.Errorf("oci-layout: %q", files["oci-layout"])
	}
	blob := func(d descriptor) []byte {
		b, ok := files["blobs/"+strings.Replace(d.Digest, ":", "/", 1)]
		if sum := sha256.Sum256(b); !ok || "sha256:"+hex.EncodeToString(sum[:]) != d.Digest {
			t.Fatalf("blob %s missing or corrupt", d.Digest)
		}
		return b
	}
	var top index
	decode(t, files["index.json"], &top)
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" {
		t.Fatalf("index.json: want one image index, got %+v", top.Manifests)
	}
	if got := top.Manifests[0].Annotations; got["io.containerd.image.name"] != DefaultRef || got["org.opencontainers.image.ref.name"] != "v0.1.0" {
		t.Errorf("names %v, want %s", got, DefaultRef)
	}
	var images index
	decode(t, blob(top.Manifests[0]), &images)
	elfMachines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	machines := map[string]elf.Machine{} // the platforms not seen yet
	platforms, err := ParsePlatforms(testedPlatforms())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range platforms {
		machines[p.Arch] = elfMachines[p.Arch]
	}
	for _, d := range images.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" || machines[d.Platform.Architecture] == 0 {
			t.Errorf("unexpected platform %+v", d.Platform)
			continue
		}
		arch := d.Platform.Architecture
		want := machines[arch]
		delete(machines, arch)
		var m manifest
		decode(t, blob(d), &m)
		var cfg imageConfig
		decode(t, blob(m.Config), &cfg)
		if cfg.OS != "linux" || cfg.Architecture != arch || cfg.Config.User != "65532:65532" ||
			strings.Join(cfg.Config.Entrypoint, " ") != "/portico-controller" {
			t.Errorf("%s config: %+v, want linux/%s, user 65532:65532, entrypoint /portico-controller", arch, cfg, arch)
		}
		root := map[string][]byte{}
		modes := map[string]int64{}
		for _, l := range m.Layers {
			if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
				t.Errorf("%s layer media type %s", arch, l.MediaType)
			}
			gz, err := gzip.NewReader(bytes.NewReader(blob(l)))
			if err != nil {
				t.Fatal(err)
			}
			for name, b := range untarModes(t, gz, modes) {
				root[name] = b
			}
		}
		for _, c := range Commands {
			checkStatic(t, arch+" /"+c, root[c], want)
			// gRPC's tracing (GoBGP links gRPC) executes HTML templates, which make the linker
			// keep every exported method; its function names stay in the stripped binary.
			if bytes.Contains(root[c], []byte("golang.org/x/net/trace.")) {
				t.Errorf("%s /%s links golang.org/x/net/trace: built without the grpcnotrace tag", arch, c)
			}
			if modes[c] != 0o755 {
				t.Errorf("%s /%s mode %o, want 755", arch, c, modes[c])
			}
		}
		if !strings.Contains(string(root["etc/passwd"]), "nonroot:x:65532:65532:") || modes["tmp/"] != 0o1777 {
			t.Errorf("%s: no nonroot user 65532 in /etc/passwd or no /tmp: %q", arch, root["etc/passwd"])
		}
	}
	if len(machines) > 0 {
		t.Errorf("no image for %v", machines)
	}
}

// checkStatic: an ELF executable for machine that needs no interpreter or shared library.
func checkStatic(t *testing.T, what string, b []byte, machine elf.Machine) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Errorf("%s: not ELF: %v", what, err)
		return
	}
	if f.Machine != machine {
		t.Errorf("%s is for %v, want %v", what, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s asks for an ELF interpreter: it is dynamically linked", what)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v", what, libs)
	}
}

func openFile(t *testing.T, path string) io.Reader {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b)
}

func untar(t *testing.T, r io.Reader) map[string][]byte { return untarModes(t, r, map[string]int64{}) }

// untarModes returns the regular files of a tar stream and records every entry's mode.
func untarModes(t *testing.T, r io.Reader, modes map[string]int64) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		modes[h.Name] = h.Mode
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}
