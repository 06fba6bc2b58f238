package kubecluster

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/e2e/cluster"
)

// TestImageNamesFollowKubernetes holds the images' names to the files of the
// k8s.io/kubernetes release tools/kube pins that define them, and CoreDNS's version to
// tools/coredns's: a bump of either that leaves the names behind fails here, not in a
// cluster whose pods wait for an image no node has.
func TestImageNamesFollowKubernetes(t *testing.T) {
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	src, err := kubernetesSource(context.Background(), repo)
	if err != nil {
		t.Fatal(err)
	}
	if src == "" {
		t.Skip("k8s.io/kubernetes is not downloaded yet (tools/kube/install-kube.sh does it)")
	}
	read := func(rel string) string {
		data, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	find := func(text, file, pattern string) []string {
		m := regexp.MustCompile(pattern).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("%s: no match for %s", file, pattern)
		}
		return m[1:]
	}

	const manifestGo = "test/utils/image/manifest.go"
	manifest := read(manifestGo)
	registry := func(field string) string {
		return find(manifest, manifestGo, field+`:\s+"([^"]+)"`)[0]
	}
	for _, im := range []struct{ config, want string }{
		{"Agnhost", AgnhostImage},
		{"BusyBox", BusyBoxImage},
		{"Pause", E2EPauseImage},
	} {
		m := find(manifest, manifestGo, `configs\[`+im.config+`\] = Config\{list\.(\w+), "([^"]+)", "([^"]+)"\}`)
		if got := registry(m[0]) + "/" + m[1] + ":" + m[2]; got != im.want {
			t.Errorf("the e2e framework's %s is %s, kubecluster names it %s", im.config, got, im.want)
		}
	}

	const constantsGo = "cmd/kubeadm/app/constants/constants.go"
	version := find(read(constantsGo), constantsGo, `CoreDNSVersion = "([^"]+)"`)[0]
	if want := "registry.k8s.io/coredns/coredns:" + version; CoreDNSImage != want {
		t.Errorf("kubeadm deploys %s, kubecluster names CoreDNS's image %s", want, CoreDNSImage)
	}
	gomod, err := os.ReadFile(filepath.Join(repo, "tools", "coredns", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if pinned := find(string(gomod), "tools/coredns/go.mod", `github.com/coredns/coredns (v\S+)`)[0]; pinned != version {
		t.Errorf("tools/coredns pins CoreDNS %s, kubeadm deploys %s", pinned, version)
	}
}

// TestFSTreeLayer checks the layer a tree makes: the directories above each entry, in
// path order before what they hold, every kind of entry with its mode, and an extended
// attribute as the PAX record containerd applies.
func TestFSTreeLayer(t *testing.T) {
	tr := newFSTree()
	tr.file("/usr/bin/tool", 0o755, []byte("#!/bin/sh\n"))
	tr.symlink("/bin/sh", "busybox")
	tr.dir("/tmp", 0o1777)
	if err := tr.xattr("/usr/bin/tool", "security.capability", netBindServiceCapability()); err != nil {
		t.Fatal(err)
	}
	if err := tr.xattr("/missing", "user.x", nil); err == nil {
		t.Error("an xattr of a missing entry was accepted")
	}
	l, err := tr.layer()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var got []string
	tarReader := tar.NewReader(rc)
	for {
		h, err := tarReader.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("%s %c %o %s", h.Name, h.Typeflag, h.Mode, h.Linkname)
		if c, ok := h.PAXRecords["SCHILY.xattr.security.capability"]; ok {
			line += " cap=" + hex.EncodeToString([]byte(c))
		}
		if h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != 0 {
			t.Errorf("%s: owner %d:%d, time %v; want root's, at the epoch", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		got = append(got, strings.Join(strings.Fields(line), " "))
	}
	want := []string{
		"bin/ 5 755",
		"bin/sh 2 777 busybox",
		"tmp/ 5 1777",
		"usr/ 5 755",
		"usr/bin/ 5 755",
		"usr/bin/tool 0 755 cap=0100000200040000000000000000000000000000",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("layer entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestNetBindServiceCapability compares the attribute with the one setcap (libcap's)
// writes, where it can run.
func TestNetBindServiceCapability(t *testing.T) {
	setcap, err := exec.LookPath("setcap")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and setcap (libcap2-bin)")
	}
	f := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(f, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(setcap, "cap_net_bind_service=+ep", f).CombinedOutput(); err != nil {
		t.Skipf("setcap on %s: %v: %s", f, err, out)
	}
	want := make([]byte, 64)
	n, err := unix.Getxattr(f, "security.capability", want)
	if err != nil {
		t.Fatal(err)
	}
	if got := netBindServiceCapability(); !bytes.Equal(got, want[:n]) {
		t.Errorf("attribute %x, setcap writes %x", got, want[:n])
	}
}
