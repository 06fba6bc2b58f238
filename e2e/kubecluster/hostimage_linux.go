package kubecluster

import (
	"archive/tar"
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// imageFile is one file of an image made of the host's files: a regular file with the
// contents of Src, or, with Link set, a symbolic link, or, with a directory's Mode, an
// empty directory.
type imageFile struct {
	Path string // absolute, in the image
	Src  string // the host file it is a copy of (symbolic links followed)
	Link string // the target of a symbolic link
	Mode os.FileMode
}

// debianPath is root's PATH on Debian. It is the PATH of images made here too: the programs
// a container runs by name (flannel's cp, flanneld's iptables) are looked up in it, and the
// runtime gives a container only what the image says.
const debianPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// hostFilesImage is a linux/amd64 image of one layer holding files, with its parent
// directories, owned by root, every time the epoch, and entrypoint as its entrypoint.
func hostFilesImage(files []imageFile, entrypoint []string) (v1.Image, error) {
	dirs, given := map[string]bool{}, map[string]bool{}
	for _, f := range files {
		if f.Mode.IsDir() {
			given[f.Path] = true
		}
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var sorted []string
	for d := range dirs {
		if !given[d] {
			sorted = append(sorted, d)
		}
	}
	sort.Strings(sorted) // a parent before its children
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	epoch := time.Unix(0, 0)
	for _, d := range sorted {
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755,
			Typeflag: tar.TypeDir, ModTime: epoch}); err != nil {
			return nil, fmt.Errorf("image layer, directory %s: %w", d, err)
		}
	}
	for _, f := range files {
		name := strings.TrimPrefix(f.Path, "/")
		if f.Mode.IsDir() {
			mode := int64(f.Mode.Perm())
			if f.Mode&os.ModeSticky != 0 {
				mode |= 0o1000 // tar's sticky bit (/tmp's)
			}
			if err := tw.WriteHeader(&tar.Header{Name: name + "/", Mode: mode, Typeflag: tar.TypeDir, ModTime: epoch}); err != nil {
				return nil, fmt.Errorf("image layer, directory %s: %w", f.Path, err)
			}
			continue
		}
		if f.Link != "" {
			if err := tw.WriteHeader(&tar.Header{Name: name, Linkname: f.Link, Mode: 0o777,
				Typeflag: tar.TypeSymlink, ModTime: epoch}); err != nil {
				return nil, fmt.Errorf("image layer, link %s: %w", f.Path, err)
			}
			continue
		}
		data, err := os.ReadFile(f.Src)
		if err != nil {
			return nil, fmt.Errorf("image layer, %s: %w", f.Path, err)
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: int64(f.Mode.Perm()), Size: int64(len(data)),
			Typeflag: tar.TypeReg, ModTime: epoch}); err != nil {
			return nil, fmt.Errorf("image layer, %s: %w", f.Path, err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("image layer, %s: %w", f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar.Bytes())), nil
	})
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.Entrypoint = entrypoint
	cfg.Config.Env = []string{"PATH=" + debianPath}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	return img, nil
}

// withLibraries adds to files the shared libraries their dynamically linked programs and
// libraries need, as ldd finds them on the host (the dynamic loader included), each at the
// path ldd names, which the loader of the image searches as the host's does (Debian's
// multiarch directories are built into it; the image has no ld.so.cache).
func withLibraries(files []imageFile) ([]imageFile, error) {
	have := map[string]bool{}
	for _, f := range files {
		have[f.Path] = true
	}
	out := append([]imageFile(nil), files...)
	for _, f := range files {
		if f.Link != "" || f.Mode.IsDir() {
			continue
		}
		libs, err := sharedLibraries(f.Src)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			if !have[lib] {
				have[lib] = true
				out = append(out, imageFile{Path: lib, Src: lib, Mode: 0o755})
			}
		}
	}
	return out, nil
}

// sharedLibraries lists the libraries ldd says bin loads, by absolute path; none for a
// static program.
func sharedLibraries(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) || bytes.Contains(out, []byte("statically linked")) {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w: %s", bin, err, strings.TrimSpace(string(out)))
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", "/lib64/ld-linux-x86-64.so.2
		// (0x...)", and the kernel's "linux-vdso.so.1 (0x...)", which is no file.
		line := strings.TrimSpace(sc.Text())
		if _, after, ok := strings.Cut(line, "=> "); ok {
			line = after
		}
		p, _, _ := strings.Cut(line, " ")
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("ldd %s: %s", bin, sc.Text())
		}
		if filepath.IsAbs(p) {
			libs = append(libs, p)
		}
	}
	return libs, nil
}
