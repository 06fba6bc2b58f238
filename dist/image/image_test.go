package image

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// testOptions builds from this checkout with a version no release has.
func testOptions(t *testing.T) Options {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the binaries with")
	}
	return Options{
		Version:   "v0.0.0-image-test",
		Revision:  "0123456789abcdef0123456789abcdef01234567",
		Created:   time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC),
		ModuleDir: filepath.Join("..", ".."),
		Go:        goBin,
	}
}

// TestBuild builds the image twice, in two directories, and reads it back with
// go-containerregistry's layout reader: the same digest both times (the build is
// reproducible); one image for linux/amd64 with weftd as its entrypoint and the version in
// its labels and in the layout's tag; one layer holding exactly the three binaries and their
// directories (no shell, nothing else), owned by root, dated Created; the binaries static
// (no interpreter, no dynamic section) and, on this machine's architecture, printing the
// version for --version.
func TestBuild(t *testing.T) {
	o := testOptions(t)
	ctx := context.Background()
	dirs := []string{filepath.Join(t.TempDir(), "weft"), filepath.Join(t.TempDir(), "other")}
	var results []Result
	for _, dir := range dirs {
		res, err := Build(ctx, o, dir)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
	}
	if results[0].Digest != results[1].Digest || !strings.HasPrefix(results[0].Digest, "sha256:") {
		t.Errorf("two builds of the same source: digests %s and %s", results[0].Digest, results[1].Digest)
	}
	for _, f := range []string{"index.json", "oci-layout"} {
		a, _ := os.ReadFile(filepath.Join(dirs[0], f))
		b, _ := os.ReadFile(filepath.Join(dirs[1], f))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s differs between two builds:\n%s\n%s", f, a, b)
		}
	}

	top, err := layout.ImageIndexFromPath(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].Annotations[keyRefName] != o.Version ||
		tm.Manifests[0].Digest.String() != results[0].Digest || tm.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("index.json: %+v; want one image index %s tagged %s", tm.Manifests, results[0].Digest, o.Version)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.Annotations[keyVersion] != o.Version || im.Annotations[keyRevision] != o.Revision {
		t.Errorf("index annotations %v", im.Annotations)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || im.Manifests[0].Platform.String() != "linux/amd64" ||
		im.Manifests[0].Digest.String() != results[0].Images["amd64"] {
		t.Fatalf("image index: %+v; want one image, linux/amd64", im.Manifests)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("image manifest media type %s", mt)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || !cfg.Created.Equal(o.Created) ||
		!slices.Equal(cfg.Config.Entrypoint, []string{WeftdPath}) || len(cfg.Config.Cmd) != 0 ||
		cfg.Config.Labels[keyVersion] != o.Version || cfg.Config.Labels[keySource] != DefaultSource ||
		cfg.Config.Labels[keyCreated] != "2026-11-21T12:00:00Z" {
		t.Errorf("image config: %+v", cfg)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %v, %v; want one", layers, err)
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type %s, want %s", mt, types.OCILayer)
	}
	files := layerFiles(t, layers[0], o.Created)

	want := map[string]bool{"opt/": true, "opt/cni/": true, "opt/cni/bin/": true, "usr/": true, "usr/local/": true, "usr/local/bin/": true}
	for _, b := range Binaries() {
		want[strings.TrimPrefix(b.Path, "/")] = true
	}
	var got []string
	for name := range files {
		got = append(got, name)
	}
	slices.Sort(got)
	for _, name := range got {
		if !want[name] {
			t.Errorf("the layer holds %s, which is not one of weft's binaries", name)
		}
	}
	for name := range want {
		if _, ok := files[name]; !ok {
			t.Errorf("the layer lacks %s", name)
		}
	}
	if _, ok := files["bin/sh"]; ok {
		t.Error("the image has a shell")
	}

	for _, b := range Binaries() {
		data := files[strings.TrimPrefix(b.Path, "/")]
		checkStatic(t, b.Path, data)
		if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
			checkVersion(t, b, data, o.Version)
		}
	}
}

// layerFiles reads a layer's tar: the content of every regular file, and nil for each
// directory; every entry owned by root and dated created.
func layerFiles(t *testing.T, l v1.Layer, created time.Time) map[string][]byte {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(created) || h.Mode != 0o755 {
			t.Errorf("%s: owner %d:%d, mode %o, time %v; want 0:0, 755, %v", h.Name, h.Uid, h.Gid, h.Mode, h.ModTime, created)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			files[h.Name] = nil
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = data
		default:
			t.Errorf("%s: tar entry type %c; want only files and directories", h.Name, h.Typeflag)
		}
	}
}

// checkStatic: an x86-64 executable that the kernel runs without a dynamic loader.
func checkStatic(t *testing.T, name string, data []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Errorf("%s: not an ELF file: %v", name, err)
		return
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 || f.Type != elf.ET_EXEC {
		t.Errorf("%s: %v %v, want an x86-64 executable (not position-independent)", name, f.Machine, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s: has %v: linked dynamically, and the image has no libc", name, p.Type)
		}
	}
	if f.Section(".dynamic") != nil || f.Section(".interp") != nil {
		t.Errorf("%s: has a .dynamic or .interp section", name)
	}
}

// checkVersion runs a binary of the image here (no container needed: it is static) and
// checks that it says the stamped version.
func checkVersion(t *testing.T, b Binary, data []byte, version string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(b.Path))
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(b.Path)
	cmd := exec.Command(bin, "--version")
	cmd.Env = []string{} // not run as a CNI plugin, and no WEFTD_ settings
	out, err := cmd.Output()
	if want := name + " " + version + " go"; err != nil || !strings.HasPrefix(string(out), want) {
		t.Errorf("%s --version: %q, %v; want %q...", b.Path, out, err, want)
	}
}

func TestOptionsRefused(t *testing.T) {
	for _, o := range []Options{
		{ModuleDir: "."},
		{Version: "(devel)", ModuleDir: "."},
		{Version: "v1+dirty", ModuleDir: "."},
		{Version: "v1", ModuleDir: ".", Arches: []string{"linux/amd64"}},
		{Version: "v1"},
	} {
		if _, err := Build(context.Background(), o, filepath.Join(t.TempDir(), "weft")); err == nil {
			t.Errorf("%+v: built", o)
		}
	}
}
