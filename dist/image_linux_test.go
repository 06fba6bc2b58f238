package dist_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/weftnet/weft/dist/image"
)

// ociLayout reads an OCI image layout directory.
type ociLayout struct {
	t   *testing.T
	dir string
}

// blob reads the blob a descriptor points to, checking its size and digest.
func (l ociLayout) blob(d ocispec.Descriptor) []byte {
	l.t.Helper()
	alg, hexDigest := string(d.Digest.Algorithm()), d.Digest.Encoded()
	if alg != "sha256" {
		l.t.Fatalf("digest %q: want sha256", d.Digest)
	}
	data, err := os.ReadFile(filepath.Join(l.dir, "blobs", alg, hexDigest))
	if err != nil {
		l.t.Fatal(err)
	}
	if sum := sha256.Sum256(data); int64(len(data)) != d.Size || hex.EncodeToString(sum[:]) != hexDigest {
		l.t.Fatalf("blob %s: %d bytes, sha256 %x; the descriptor says %d bytes", d.Digest, len(data), sum, d.Size)
	}
	return data
}

// json reads a descriptor's blob as JSON of its media type into v.
func (l ociLayout) json(d ocispec.Descriptor, mediaType string, v any) {
	l.t.Helper()
	if d.MediaType != mediaType {
		l.t.Fatalf("descriptor %s: media type %s, want %s", d.Digest, d.MediaType, mediaType)
	}
	if err := json.Unmarshal(l.blob(d), v); err != nil {
		l.t.Fatalf("blob %s: %v", d.Digest, err)
	}
}

// unpackImage finds the image tagged tag for linux/arch in an OCI image layout (through
// its image index) and unpacks its layers into rootfs, as a runtime makes a container's
// root file system. It returns the image's config. The layout is read with the image spec's
// own types (image-spec), not by the library that wrote it.
func unpackImage(t *testing.T, dir, tag, arch, rootfs string) ocispec.Image {
	t.Helper()
	l := ociLayout{t: t, dir: dir}
	var marker ocispec.ImageLayout
	if err := json.Unmarshal(readFile(t, filepath.Join(dir, ocispec.ImageLayoutFile)), &marker); err != nil || marker.Version != ocispec.ImageLayoutVersion {
		t.Fatalf("oci-layout: version %q, %v; want %s", marker.Version, err, ocispec.ImageLayoutVersion)
	}
	var top ocispec.Index
	if err := json.Unmarshal(readFile(t, filepath.Join(dir, "index.json")), &top); err != nil || top.SchemaVersion != 2 {
		t.Fatalf("index.json: schema %d, %v", top.SchemaVersion, err)
	}
	i := slices.IndexFunc(top.Manifests, func(d ocispec.Descriptor) bool { return d.Annotations[ocispec.AnnotationRefName] == tag })
	if i < 0 {
		t.Fatalf("index.json has no image tagged %s: %+v", tag, top.Manifests)
	}
	var idx ocispec.Index
	l.json(top.Manifests[i], ocispec.MediaTypeImageIndex, &idx)
	i = slices.IndexFunc(idx.Manifests, func(d ocispec.Descriptor) bool {
		return d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == arch
	})
	if i < 0 {
		t.Fatalf("the image index has no linux/%s image: %+v", arch, idx.Manifests)
	}
	var m ocispec.Manifest
	l.json(idx.Manifests[i], ocispec.MediaTypeImageManifest, &m)
	var cfg ocispec.Image
	l.json(m.Config, ocispec.MediaTypeImageConfig, &cfg)
	if cfg.OS != "linux" || cfg.Architecture != arch || cfg.RootFS.Type != "layers" || len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		t.Fatalf("image config: %+v for %d layers", cfg, len(m.Layers))
	}
	for i, ld := range m.Layers {
		if ld.MediaType != ocispec.MediaTypeImageLayerGzip {
			t.Fatalf("layer %s: media type %s", ld.Digest, ld.MediaType)
		}
		zr, err := gzip.NewReader(bytes.NewReader(l.blob(ld)))
		if err != nil {
			t.Fatalf("layer %s: %v", ld.Digest, err)
		}
		tarData, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("layer %s: %v", ld.Digest, err)
		}
		if sum := sha256.Sum256(tarData); "sha256:"+hex.EncodeToString(sum[:]) != string(cfg.RootFS.DiffIDs[i]) {
			t.Fatalf("layer %s: uncompressed sha256 %x, the config's diff_id %s", ld.Digest, sum, cfg.RootFS.DiffIDs[i])
		}
		untar(t, tarData, rootfs)
	}
	return cfg
}

// untar extracts a layer holding only directories and regular files (weft's does) into
// rootfs.
func untar(t *testing.T, data []byte, rootfs string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) || strings.HasPrefix(filepath.Base(name), ".wh.") {
			t.Fatalf("layer entry %q: not a plain path inside the image", h.Name)
		}
		p := filepath.Join(rootfs, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, h.FileInfo().Mode().Perm()); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, h.FileInfo().Mode().Perm())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("layer entry %s: type %c; weft's layer holds only files and directories", h.Name, h.Typeflag)
		}
	}
}

// The OCI runtime spec's config.json, as much of it as these containers need.
type (
	runtimeSpec struct {
		OCIVersion string         `json:"ociVersion"`
		Process    runtimeProcess `json:"process"`
		Root       runtimeRoot    `json:"root"`
		Hostname   string         `json:"hostname"`
		Mounts     []runtimeMount `json:"mounts"`
		Linux      runtimeLinux   `json:"linux"`
	}
	runtimeProcess struct {
		User            runtimeUser  `json:"user"`
		Args            []string     `json:"args"`
		Env             []string     `json:"env"`
		Cwd             string       `json:"cwd"`
		Capabilities    runtimeCaps  `json:"capabilities"`
		NoNewPrivileges bool         `json:"noNewPrivileges"`
		Rlimits         []runtimeRLi `json:"rlimits"`
	}
	runtimeUser struct {
		UID uint32 `json:"uid"`
		GID uint32 `json:"gid"`
	}
	// runtimeCaps: every set is given, empty if need be: a missing set would keep runc's.
	runtimeCaps struct {
		Bounding    []string `json:"bounding"`
		Effective   []string `json:"effective"`
		Inheritable []string `json:"inheritable"`
		Permitted   []string `json:"permitted"`
		Ambient     []string `json:"ambient"`
	}
	runtimeRLi struct {
		Type string `json:"type"`
		Hard uint64 `json:"hard"`
		Soft uint64 `json:"soft"`
	}
	runtimeRoot struct {
		Path     string `json:"path"`
		Readonly bool   `json:"readonly"`
	}
	runtimeMount struct {
		Destination string   `json:"destination"`
		Type        string   `json:"type"`
		Source      string   `json:"source"`
		Options     []string `json:"options,omitempty"`
	}
	runtimeLinux struct {
		Namespaces []runtimeNamespace `json:"namespaces"`
	}
	runtimeNamespace struct {
		Type string `json:"type"`
	}
)

// runc runs containers of one unpacked image with runc, as a kubelet's runtime would.
type runc struct {
	bin    string
	state  string // runc's --root
	bundle string
	rootfs string
	env    []string // the image's
	n      int
}

// specFor is the runtime config of a container of the DaemonSet: its command, its
// security context (capabilities added to none, no privilege escalation, a read-only root),
// and its volume mounts, from the scratch node's directories. The pod shares the node's
// network (hostNetwork), so there is no network namespace.
func (r *runc) specFor(c corev1.Container, mounts map[string]hostMount) runtimeSpec {
	caps := []string{}
	readonly, noNewPrivs := false, false
	if sc := c.SecurityContext; sc != nil {
		if sc.Capabilities != nil {
			for _, c := range sc.Capabilities.Add {
				caps = append(caps, "CAP_"+string(c))
			}
		}
		readonly = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
		noNewPrivs = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
	}
	spec := runtimeSpec{
		OCIVersion: "1.0.2",
		Process: runtimeProcess{
			Args:            append(slices.Clone(c.Command), c.Args...),
			Env:             r.env,
			Cwd:             "/",
			Capabilities:    runtimeCaps{Bounding: caps, Effective: caps, Inheritable: []string{}, Permitted: caps, Ambient: []string{}},
			NoNewPrivileges: noNewPrivs,
			Rlimits:         []runtimeRLi{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
		},
		Root:     runtimeRoot{Path: r.rootfs, Readonly: readonly},
		Hostname: "weft-image-test",
		Mounts: []runtimeMount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Linux: runtimeLinux{Namespaces: []runtimeNamespace{{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}}},
	}
	var dests []string
	for d := range mounts {
		dests = append(dests, d)
	}
	slices.Sort(dests) // parents before children
	for _, d := range dests {
		opts := []string{"rbind", "rw"}
		if mounts[d].readOnly {
			opts[1] = "ro"
		}
		spec.Mounts = append(spec.Mounts, runtimeMount{Destination: d, Type: "bind", Source: mounts[d].source, Options: opts})
	}
	return spec
}

// run runs container c to its end and returns its output, stdout then stderr.
func (r *runc) run(t *testing.T, c corev1.Container, mounts map[string]hostMount) (string, error) {
	t.Helper()
	spec, err := json.MarshalIndent(r.specFor(c, mounts), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.bundle, "config.json"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	r.n++
	id := fmt.Sprintf("weft-image-test-%d-%d", os.Getpid(), r.n)
	t.Cleanup(func() { _ = exec.Command(r.bin, "--root", r.state, "delete", "--force", id).Run() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bin, "--root", r.state, "run", "--bundle", r.bundle, id)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	return stdout.String() + stderr.String(), err
}

// TestImageInRunc builds the Linux image (dist/image), unpacks it as a runtime does, with
// a reader written from the OCI specs, and runs the Linux DaemonSet's containers in it with
// runc, Debian's OCI runtime (tools/install-e2e-deps.sh; no container daemon): weftd's with
// --version added, which prints the stamped version; the init container, with a scratch
// node's CNI directories and the ConfigMap mounted, twice: the plugin (the image's bytes)
// and the configuration (the ConfigMap's) are installed and flannel's set aside, and the
// second run replaces nothing; and a shell, which the image does not have. Needs root: runc
// makes namespaces and mounts.
func TestImageInRunc(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runc makes namespaces and mounts")
	}
	runcBin, err := exec.LookPath("runc")
	if err != nil {
		t.Skip("runc is not installed: tools/install-e2e-deps.sh (make deps, as root) installs Debian's")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the image's binaries with")
	}
	const version = "v0.0.0-runc-test"
	dir := t.TempDir()
	o := image.Options{Version: version, ModuleDir: "..", Go: goBin, Arches: []string{runtime.GOARCH}}
	if _, err := image.Build(context.Background(), o, filepath.Join(dir, "layout")); err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(dir, "rootfs")
	cfg := unpackImage(t, filepath.Join(dir, "layout"), version, runtime.GOARCH, rootfs)
	for _, sh := range []string{"bin/sh", "bin/busybox", "usr/bin/sh"} {
		if _, err := os.Lstat(filepath.Join(rootfs, sh)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the image has /%s (%v); it should hold no shell", sh, err)
		}
	}

	objs := loadManifest(t, allInOne)
	data := configMapData(t, objs)
	spec := daemonSet(t, objs, linuxDS).Spec.Template.Spec
	r := &runc{bin: runcBin, state: filepath.Join(dir, "runc"), bundle: filepath.Join(dir, "bundle"), rootfs: rootfs, env: cfg.Config.Env}
	if err := os.MkdirAll(r.bundle, 0o755); err != nil {
		t.Fatal(err)
	}

	weftd := container(t, spec.Containers, weftdContainer)
	if !slices.Equal(cfg.Config.Entrypoint, weftd.Command) {
		t.Errorf("the image's entrypoint %q is not what the DaemonSet runs, %q", cfg.Config.Entrypoint, weftd.Command)
	}
	weftd.Args = []string{"--version"}
	out, err := r.run(t, weftd, nil)
	if want := "weftd " + version + " go"; err != nil || !strings.HasPrefix(out, want) {
		t.Errorf("weftd --version in the image: %v\n%s\nwant %q...", err, out, want)
	}

	sh := corev1.Container{Name: "shell", Command: []string{"/bin/sh", "-c", "echo a shell"}}
	if out, err := r.run(t, sh, nil); err == nil || strings.Contains(out, "a shell") {
		t.Errorf("/bin/sh ran in the image: %v\n%s", err, out)
	}

	node := filepath.Join(dir, "node")
	ic := spec.InitContainers[0]
	mounts := fakeNode(t, node, spec, ic, data)
	plugin := readFile(t, filepath.Join(rootfs, image.PluginPath))
	var first os.FileInfo
	for run := 1; run <= 2; run++ {
		out, err := r.run(t, ic, mounts)
		if err != nil {
			t.Fatalf("run %d of init container %s: %v\n%s", run, ic.Name, err, out)
		}
		t.Logf("run %d of %s:\n%s", run, ic.Name, out)
		fi := checkInstalled(t, node, plugin, data)
		if run == 1 {
			first = fi
		} else if !os.SameFile(first, fi) {
			t.Error("the second run replaced the plugin that the first installed")
		}
	}
}
