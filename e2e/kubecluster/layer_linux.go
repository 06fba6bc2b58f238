package kubecluster

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// fsTree is the file tree of one image layer, held in memory until written: the images
// here are built without a container engine, from programs this machine has or builds.
// Every entry is owned by root and dated at the epoch, so that the same files make the same
// layer; the directories above each entry are added.
type fsTree struct {
	entries map[string]*tar.Header // by path, without the leading slash
	data    map[string][]byte
}

func newFSTree() *fsTree {
	return &fsTree{entries: map[string]*tar.Header{}, data: map[string][]byte{}}
}

// put adds h at p, with the directories above it.
func (t *fsTree) put(p string, h *tar.Header, data []byte) {
	name := strings.TrimPrefix(path.Clean("/"+p), "/")
	for d := path.Dir(name); d != "."; d = path.Dir(d) {
		if _, ok := t.entries[d]; !ok {
			t.entries[d] = &tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}
		}
	}
	h.Name = name
	t.entries[name] = h
	if data != nil {
		t.data[name] = data
	}
}

// dir adds an empty directory.
func (t *fsTree) dir(p string, mode int64) {
	t.put(p, &tar.Header{Typeflag: tar.TypeDir, Mode: mode}, nil)
}

// file adds a regular file.
func (t *fsTree) file(p string, mode int64, data []byte) {
	t.put(p, &tar.Header{Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data))}, data)
}

// symlink adds a symbolic link to target.
func (t *fsTree) symlink(p, target string) {
	t.put(p, &tar.Header{Typeflag: tar.TypeSymlink, Mode: 0o777, Linkname: target}, nil)
}

// hostFile adds the file src of this machine at p, with its permission bits; a symbolic
// link is followed, so that p holds what src names.
func (t *fsTree) hostFile(p, src string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("image file %s: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("image file %s: %s is not a regular file", p, src)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("image file %s: %w", p, err)
	}
	t.file(p, int64(fi.Mode().Perm()), data)
	return nil
}

// xattr sets an extended attribute of the entry at p (containerd applies a tar's
// SCHILY.xattr records when it unpacks a layer).
func (t *fsTree) xattr(p, key string, value []byte) error {
	h, ok := t.entries[strings.TrimPrefix(path.Clean("/"+p), "/")]
	if !ok {
		return fmt.Errorf("image file %s: no such entry for xattr %s", p, key)
	}
	if h.PAXRecords == nil {
		h.PAXRecords = map[string]string{}
	}
	h.PAXRecords["SCHILY.xattr."+key] = string(value)
	return nil
}

// layer is the tree as a layer: its entries in path order, so that a directory comes before
// what it holds.
func (t *fsTree) layer() (v1.Layer, error) {
	names := make([]string, 0, len(t.entries))
	for n := range t.entries {
		names = append(names, n)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		h := *t.entries[n]
		if h.Typeflag == tar.TypeDir {
			h.Name += "/"
		}
		h.ModTime = time.Unix(0, 0)
		if len(h.PAXRecords) > 0 {
			h.Format = tar.FormatPAX
		}
		if err := tw.WriteHeader(&h); err != nil {
			return nil, fmt.Errorf("image layer: %s: %w", n, err)
		}
		if _, err := tw.Write(t.data[n]); err != nil {
			return nil, fmt.Errorf("image layer: %s: %w", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	return l, nil
}

// imageOf is the linux/amd64 image of the trees, bottom layer first, run as cfg says.
func imageOf(cfg v1.Config, trees ...*fsTree) (v1.Image, error) {
	img := empty.Image
	for _, t := range trees {
		l, err := t.layer()
		if err != nil {
			return nil, err
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = cfg
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	return img, nil
}

// treeArchive writes the image of the trees, run as cfg says, named ref, to an image archive
// in dir, which it returns.
func treeArchive(dir, ref string, cfg v1.Config, trees ...*fsTree) (string, error) {
	img, err := imageOf(cfg, trees...)
	if err != nil {
		return "", fmt.Errorf("kubecluster: %s: %w", ref, err)
	}
	out := archivePath(dir, ref)
	if err := writeArchive(out, ref, img); err != nil {
		return "", fmt.Errorf("kubecluster: %w", err)
	}
	return out, nil
}
