package kubecluster

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// GlibcDNSTestingImage is the image the e2e suite's DNS conformance specs run their second
// prober in (the "jessie" one), named as the framework of tools/kube's release names it
// (test/utils/image/manifest.go): its programs resolve through glibc, where agnhost's, on
// Alpine in the real image, go through musl.
const GlibcDNSTestingImage = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0"

// ConformanceImages builds the images the e2e suite's network specs need beyond
// E2EImages', into work, and returns their archives: GlibcDNSTestingImage. E2EImages must
// have run first: it installs the Debian packages these are made of.
func ConformanceImages(ctx context.Context, work string) ([]string, error) {
	img, err := glibcDNSTestingImage(ctx)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(work, strings.NewReplacer("/", "_", ":", "_").Replace(GlibcDNSTestingImage)+".tar")
	if err := writeArchive(out, GlibcDNSTestingImage, img); err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	}
	return []string{out}, nil
}

// glibcDNSTestingImage is Debian's dig and getent (glibc's resolver) over busybox's
// applets, with Debian's dash as /bin/sh: the real image is Debian bookworm-slim with
// dnsutils, and the specs run shell loops of dig, getent, seq, sleep and test in it.
func glibcDNSTestingImage(ctx context.Context) (v1.Image, error) {
	bb, err := busyboxTree(ctx)
	if err != nil {
		return nil, err
	}
	t := newFSTree()
	for _, p := range []struct{ at, command string }{
		{"/usr/bin/dig", "dig"},
		{"/usr/bin/getent", "getent"},
		{"/bin/dash", "dash"},
	} {
		src, err := exec.LookPath(p.command)
		if err != nil {
			return nil, fmt.Errorf("kubecluster: %s for %s (tools/install-e2e-deps.sh): %w", p.command, GlibcDNSTestingImage, err)
		}
		if err := t.hostProgram(ctx, p.at, src); err != nil {
			return nil, fmt.Errorf("kubecluster: %w", err)
		}
	}
	// Debian's sh; busybox's would run its own applets before PATH's programs.
	t.symlink("/bin/sh", "dash")
	// Debian's own /etc/nsswitch.conf says so for hosts: the file first, then DNS.
	t.file("/etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n"))
	img, err := imageOf(v1.Config{Cmd: []string{"/bin/sh"}, Env: []string{pathEnv}}, bb, t)
	if err != nil {
		return nil, fmt.Errorf("kubecluster: %s: %w", GlibcDNSTestingImage, err)
	}
	return img, nil
}
