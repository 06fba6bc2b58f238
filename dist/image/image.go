// Package image builds weft's Linux container image without a container engine: it
// compiles weftd, weftctl and the weft CNI plugin as static binaries (CGO off, -trimpath,
// the version stamped in), puts them in one layer and writes an OCI image layout with
// go-containerregistry. The image holds those three files and nothing else, no shell and
// no libc: the DaemonSet's init container installs the plugin with `weft install`.
//
// The build is reproducible: the same source, Go release and Options give the same bytes,
// hence the same digest. Every timestamp is Options.Created, the layer's entries are in a
// fixed order with owner root and fixed modes, and the binaries hold no path of the build
// machine.
//
// The layout holds one image index (one image per architecture), tagged in index.json with
// the version; crane, skopeo and regctl push it as it is. The Windows HostProcess image is
// still built by dist/Dockerfile.
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/weftnet/weft/internal/buildinfo"
)

// Where the image holds its binaries. The plugin is where the runtime looks for plugins,
// as in flannel's image, so that the path the init container runs is the one it installs.
const (
	WeftdPath   = "/usr/local/bin/weftd"
	WeftctlPath = "/usr/local/bin/weftctl"
	PluginPath  = "/opt/cni/bin/weft"
)

// Binary is one command of the image: its package in weft's module and its path in the
// image.
type Binary struct {
	Package string
	Path    string
}

// Binaries are the image's files, in the order of its layer.
func Binaries() []Binary {
	return []Binary{
		{Package: "./cmd/weft", Path: PluginPath},
		{Package: "./cmd/weftctl", Path: WeftctlPath},
		{Package: "./cmd/weftd", Path: WeftdPath},
	}
}

// Annotation and label keys of the OCI image spec (annotations.md).
const (
	keyRefName     = "org.opencontainers.image.ref.name"
	keyVersion     = "org.opencontainers.image.version"
	keyCreated     = "org.opencontainers.image.created"
	keySource      = "org.opencontainers.image.source"
	keyRevision    = "org.opencontainers.image.revision"
	keyTitle       = "org.opencontainers.image.title"
	keyDescription = "org.opencontainers.image.description"
)

// DefaultSource is the image's org.opencontainers.image.source.
const DefaultSource = "https://github.com/weftnet/weft"

// pathEnv is the containers' PATH: `kubectl exec ... -- weftctl status` finds weftctl.
const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// tagPattern is a registry tag's grammar (distribution's reference grammar): the version
// tags the layout, and becomes the image's tag when pushed.
var tagPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// Options say what to build.
type Options struct {
	// Version is stamped into the binaries (their --version), labels the image and tags
	// it in the layout. A registry tag: v0.1.0, or git describe's v0.1.0-3-gabcdef0.
	Version string
	// Revision is the source's commit, for the org.opencontainers.image.revision label;
	// optional.
	Revision string
	// Source is the org.opencontainers.image.source label; DefaultSource if empty.
	Source string
	// Created is the image's creation time and every file's modification time: fixed, so
	// that the build is reproducible (SOURCE_DATE_EPOCH, or the commit's time). The zero
	// time means the Unix epoch.
	Created time.Time
	// Arches are the GOARCH values to build for, one image each; amd64 if empty.
	Arches []string
	// ModuleDir is weft's module root, where go build runs.
	ModuleDir string
	// Go is the go command; "go" from PATH if empty.
	Go string
	// Log receives go build's output; nil discards it.
	Log io.Writer
}

func (o *Options) defaults() error {
	if !tagPattern.MatchString(o.Version) {
		return fmt.Errorf("version %q: not a registry tag ([A-Za-z0-9_][A-Za-z0-9_.-]*, at most 128)", o.Version)
	}
	if o.Source == "" {
		o.Source = DefaultSource
	}
	if o.Created.IsZero() {
		o.Created = time.Unix(0, 0)
	}
	o.Created = o.Created.UTC().Truncate(time.Second) // a tar header holds seconds
	if len(o.Arches) == 0 {
		o.Arches = []string{"amd64"}
	}
	for _, a := range o.Arches {
		if a == "" || strings.ContainsAny(a, "/ ") {
			return fmt.Errorf("architecture %q: want a GOARCH value such as amd64", a)
		}
	}
	if o.ModuleDir == "" {
		return errors.New("no module directory to build in")
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return nil
}

// Result is what Build wrote.
type Result struct {
	// Digest is the image index's, as a registry will serve it once pushed.
	Digest string
	// Images are each architecture's image manifest digest.
	Images map[string]string
}

// Build compiles the binaries for every architecture and writes the image, as an OCI image
// layout, to dir, replacing whatever dir held: the new layout is made beside it and renamed
// into place, so that no blob of an earlier build lingers.
func Build(ctx context.Context, o Options, dir string) (Result, error) {
	if err := o.defaults(); err != nil {
		return Result{}, err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return Result{}, fmt.Errorf("image directory %s: %w", parent, err)
	}
	work, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-*")
	if err != nil {
		return Result{}, fmt.Errorf("image directory %s: %w", parent, err)
	}
	defer os.RemoveAll(work)

	res := Result{Images: map[string]string{}}
	var adds []mutate.IndexAddendum
	for _, arch := range o.Arches {
		bins := filepath.Join(work, "bin-"+arch)
		if err := compile(ctx, o, arch, bins); err != nil {
			return Result{}, err
		}
		img, err := assemble(o, arch, bins)
		if err != nil {
			return Result{}, fmt.Errorf("image for linux/%s: %w", arch, err)
		}
		d, err := img.Digest()
		if err != nil {
			return Result{}, fmt.Errorf("image for linux/%s: %w", arch, err)
		}
		res.Images[arch] = d.String()
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: arch},
		}})
	}
	idx := mutate.AppendManifests(empty.Index, adds...)
	idx = mutate.Annotations(idx, labels(o)).(v1.ImageIndex)
	d, err := idx.Digest()
	if err != nil {
		return Result{}, fmt.Errorf("image index: %w", err)
	}
	res.Digest = d.String()

	lay := filepath.Join(work, "layout")
	p, err := layout.Write(lay, empty.Index)
	if err != nil {
		return Result{}, fmt.Errorf("writing the image layout: %w", err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{keyRefName: o.Version})); err != nil {
		return Result{}, fmt.Errorf("writing the image layout: %w", err)
	}
	if err := readable(lay); err != nil {
		return Result{}, fmt.Errorf("writing the image layout: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return Result{}, fmt.Errorf("replacing %s: %w", dir, err)
	}
	if err := os.Rename(lay, dir); err != nil {
		return Result{}, fmt.Errorf("replacing %s: %w", dir, err)
	}
	return res, nil
}

// readable gives the layout's files mode 0644 and its directories 0755: the layer's blob is
// made 0600 and the rest after the umask, and whoever pushes the image may not be whoever
// built it.
func readable(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return os.Chmod(p, mode)
	})
}

// compile builds the binaries for linux/arch into dir, static and stamped.
func compile(ctx context.Context, o Options, arch, dir string) error {
	args := []string{"build", "-trimpath", "-buildvcs=false", "-tags=" + buildinfo.Tags,
		"-ldflags=-s -w -X " + buildinfo.VersionVar + "=" + o.Version,
		"-o", dir + string(filepath.Separator)}
	for _, b := range Binaries() {
		args = append(args, b.Package)
	}
	cmd := exec.CommandContext(ctx, o.Go, args...)
	cmd.Dir = o.ModuleDir
	// No cgo: nothing to link against in the image. GOFLAGS is cleared so that the
	// caller's (say -race) cannot change the binaries.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
	cmd.Stdout, cmd.Stderr = o.Log, o.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s (GOARCH=%s): %w", strings.Join(args, " "), arch, err)
	}
	return nil
}

// assemble makes the image of one architecture from its compiled binaries.
func assemble(o Options, arch, bins string) (v1.Image, error) {
	data, err := layerTar(o.Created, bins)
	if err != nil {
		return nil, err
	}
	layer, err := layerOf(data)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.Created}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.ConfigFile(base, &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      created,
		Config: v1.Config{
			Entrypoint: []string{WeftdPath},
			Env:        []string{pathEnv},
			Labels:     labels(o),
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   created,
			CreatedBy: "weft dist/image: " + strings.Join(binaryPaths(), " "),
			Comment:   "static binaries: go build -trimpath, CGO_ENABLED=0, GOOS=linux GOARCH=" + arch,
		},
	})
}

// layerOf is the gzipped layer of an uncompressed tar, compressed once (the digest and the
// layout both read it). gzip's output depends only on the input and the level: no name and
// no time in its header. Level 9 would save 1% for 15% more time.
func layerOf(uncompressed []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(uncompressed)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
}

func binaryPaths() []string {
	var out []string
	for _, b := range Binaries() {
		out = append(out, b.Path)
	}
	return out
}

// layerTar is the layer: the binaries at their paths and the directories above them,
// sorted, owned by root, every time created.
func layerTar(created time.Time, bins string) ([]byte, error) {
	dirs := map[string]bool{}
	for _, b := range Binaries() {
		for d := path.Dir(b.Path); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	type entry struct {
		name string
		bin  *Binary
	}
	var entries []entry
	for d := range dirs {
		entries = append(entries, entry{name: strings.TrimPrefix(d, "/") + "/"})
	}
	for _, b := range Binaries() {
		entries = append(entries, entry{name: strings.TrimPrefix(b.Path, "/"), bin: &b})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o755, ModTime: created, Typeflag: tar.TypeDir}
		var data []byte
		if e.bin != nil {
			var err error
			data, err = os.ReadFile(filepath.Join(bins, path.Base(e.bin.Package)))
			if err != nil {
				return nil, fmt.Errorf("binary of %s: %w", e.bin.Package, err)
			}
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", e.name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return buf.Bytes(), nil
}

// labels are the image config's labels, which `docker inspect` shows, and the image
// index's annotations, which registries show of a multi-platform tag.
func labels(o Options) map[string]string {
	l := map[string]string{
		keyTitle:       "weft",
		keyDescription: "weftd, weftctl and the weft CNI plugin: a flannel-compatible node network daemon for Linux and Windows nodes",
		keyVersion:     o.Version,
		keySource:      o.Source,
		keyCreated:     o.Created.Format(time.RFC3339),
	}
	if o.Revision != "" {
		l[keyRevision] = o.Revision
	}
	return l
}
