package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the user the image runs as, distroless's "nonroot" (the controller runs as it;
// the speaker's DaemonSet asks for root to open raw sockets).
const NonRoot = 65532

// epoch is every file's and the image's time: the same sources give the same digests.
var epoch = time.Unix(0, 0).UTC()

// baseFiles are what distroless "static" has besides CA certificates and tzdata, which
// Portico does not use: the users root, nobody and nonroot, their groups, /tmp, nonroot's home.
var baseFiles = []tarFile{
	{name: "etc/", mode: 0o755},
	{name: "etc/passwd", mode: 0o644, body: "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"},
	{name: "etc/group", mode: 0o644, body: "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n"},
	{name: "etc/nsswitch.conf", mode: 0o644, body: "hosts: files dns\n"},
	{name: "home/", mode: 0o755},
	{name: "home/nonroot/", mode: 0o700, uid: NonRoot},
	{name: "root/", mode: 0o700},
	{name: "tmp/", mode: 0o1777},
}

type tarFile struct {
	name string // a trailing slash makes a directory
	mode int64
	uid  int
	body string
}

// Make builds the image for every platform and writes out/oci (an OCI image layout whose
// index.json names one image index) and out/<spec.Archive> (the same as an OCI archive).
func Make(src, out string, spec Spec, platforms []Platform) (string, error) {
	tag, err := name.NewTag(spec.Ref, name.WeakValidation)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", spec.Ref, err)
	}
	base, err := layer(baseFiles)
	if err != nil {
		return "", err
	}
	var adds []mutate.IndexAddendum
	for _, p := range platforms {
		img, err := platformImage(src, out, spec, p, base)
		if err != nil {
			return "", err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch}}})
	}
	index := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	dir := filepath.Join(out, "oci")
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", err
	}
	// containerd names what it imports after io.containerd.image.name; skopeo and others read
	// the tag from org.opencontainers.image.ref.name.
	if err := lp.AppendIndex(index, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          tag.Name(),
		"org.opencontainers.image.ref.name": tag.TagStr(),
	})); err != nil {
		return "", err
	}
	archive := filepath.Join(out, spec.Archive)
	return archive, tarDir(dir, archive)
}

// platformImage builds the binaries for p and stacks them on base, with the image's config.
func platformImage(src, out string, spec Spec, p Platform, base v1.Layer) (v1.Image, error) {
	bin := filepath.Join(out, p.OS+"-"+p.Arch)
	if err := os.RemoveAll(bin); err != nil {
		return nil, err
	}
	if err := Build(src, p, bin, spec.Packages); err != nil {
		return nil, err
	}
	var files []tarFile
	for _, pkg := range spec.Packages {
		c := path.Base(pkg)
		b, err := os.ReadFile(filepath.Join(bin, c))
		if err != nil {
			return nil, err
		}
		files = append(files, tarFile{name: c, mode: 0o755, body: string(b)})
	}
	binaries, err := layer(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), base, binaries)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Created = p.OS, p.Arch, v1.Time{Time: epoch}
	cfg.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", NonRoot, NonRoot),
		Entrypoint: []string{spec.Entrypoint},
		Env:        []string{"PATH=/"},
		WorkingDir: "/",
		Labels:     map[string]string{"org.opencontainers.image.source": "https://github.com/portico-lb/portico"},
	}
	return mutate.ConfigFile(img, cfg)
}

// layer is a gzip-compressed OCI layer of files, owned by root unless said otherwise.
func layer(files []tarFile) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: epoch, Format: tar.FormatPAX}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := io.WriteString(tw, f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// tarDir writes dir as a tar archive at path, in a stable order with fixed times: an OCI
// layout in a tar is the OCI archive that `ctr images import` and skopeo's oci-archive read.
func tarDir(dir, path string) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir {
			names = append(names, p)
		}
		return err
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, p := range names {
		if err := addFile(tw, dir, p); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func addFile(tw *tar.Writer, dir, p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(dir, p)
	if err != nil {
		return err
	}
	h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: epoch, Typeflag: tar.TypeReg, Size: fi.Size()}
	if fi.IsDir() {
		h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if fi.IsDir() {
		return nil
	}
	r, err := os.Open(p)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(tw, r)
	return err
}
