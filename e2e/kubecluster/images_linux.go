package kubecluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// An image reaches a node's containerd as an image archive (`docker save`'s form, which
// carries its name) that ctr imports into the CRI's namespace, k8s.io: the nodes have no
// registry to pull from, and the kubelet pulls nothing that is present (imagePullPolicy
// IfNotPresent, the default for a tag other than latest).

// PauseArchive builds the pause program (./e2e/kubecluster/pause of the module in repo) and
// writes an image archive of it named PauseImage to dir/pause.tar, which it returns.
func PauseArchive(ctx context.Context, repo, dir string) (string, error) {
	img, err := pauseImage(ctx, repo, dir)
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "pause.tar")
	return out, writeArchive(out, PauseImage, img)
}

// pauseImage builds the pause program in dir and makes its image.
func pauseImage(ctx context.Context, repo, dir string) (v1.Image, error) {
	bin := filepath.Join(dir, "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s", "-o", bin, "./e2e/kubecluster/pause")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the pause program: %w: %s", err, strings.TrimSpace(string(out)))
	}
	t := newFSTree()
	if err := t.hostFile("/pause", bin); err != nil {
		return nil, err
	}
	// 65535, as Kubernetes' pause image: the sandbox needs no privilege.
	img, err := imageOf(v1.Config{User: "65535:65535", Entrypoint: []string{"/pause"}}, t)
	if err != nil {
		return nil, fmt.Errorf("pause image: %w", err)
	}
	return img, nil
}

// LayoutArchive writes the linux/amd64 image of the OCI image layout at layoutDir (what
// `make image` writes) to an image archive named ref in dir, which it returns.
func LayoutArchive(layoutDir, ref, dir string) (string, error) {
	p, err := layout.FromPath(layoutDir)
	if err != nil {
		return "", fmt.Errorf("reading the image layout %s: %w", layoutDir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return "", fmt.Errorf("reading the image layout %s: %w", layoutDir, err)
	}
	img, err := findImage(top, v1.Platform{OS: "linux", Architecture: "amd64"})
	if err != nil {
		return "", fmt.Errorf("image layout %s: %w", layoutDir, err)
	}
	out := archivePath(dir, ref)
	return out, writeArchive(out, ref, img)
}

// archivePath is where in dir the archive of the image named ref goes.
func archivePath(dir, ref string) string {
	return filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
}

// findImage looks through an index, and the indexes it holds, for the image of platform.
func findImage(idx v1.ImageIndex, platform v1.Platform) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading an index: %w", err)
	}
	for _, d := range m.Manifests {
		switch {
		case d.MediaType.IsIndex():
			inner, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("reading index %s: %w", d.Digest, err)
			}
			if img, err := findImage(inner, platform); err == nil {
				return img, nil
			}
		case d.MediaType.IsImage() && d.Platform != nil && d.Platform.OS == platform.OS &&
			d.Platform.Architecture == platform.Architecture:
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no %s/%s image", platform.OS, platform.Architecture)
}

// writeArchive writes img, named ref, as an image archive at path.
func writeArchive(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image name %s: %w", ref, err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return fmt.Errorf("writing the image archive %s: %w", path, err)
	}
	return nil
}

// ImportImage imports an image archive into the node's containerd, where the kubelet finds it.
func (n *Node) ImportImage(ctx context.Context, archive string) error {
	argv := n.inNode(filepath.Join(n.c.opts.ContainerdBin, "ctr"), "--address", "/run/containerd/containerd.sock",
		"--namespace", "k8s.io", "images", "import", archive)
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("node %s: importing %s: %w: %s", n.Name, archive, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// InstallCNIPlugins copies the reference CNI plugins (bridge, host-local, portmap, loopback)
// from dir into the node's /opt/cni/bin, as a node's packages would have put them there
// (most Kubernetes installs ship them; weft's DaemonSet installs only its own plugin).
func (n *Node) InstallCNIPlugins(dir string) error {
	for _, p := range []string{"bridge", "host-local", "portmap", "loopback"} {
		data, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			return fmt.Errorf("node %s: CNI plugin %s: %w", n.Name, p, err)
		}
		if err := os.WriteFile(filepath.Join(n.hostDir("/opt/cni/bin"), p), data, 0o755); err != nil {
			return fmt.Errorf("node %s: installing CNI plugin %s: %w", n.Name, p, err)
		}
	}
	return nil
}
