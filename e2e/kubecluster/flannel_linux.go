package kubecluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
)

// A cluster can start on flannel, as the clusters weft replaces do: flanneld v0.28.10 and
// flannel's CNI plugin in images made of tools/flannel's builds, deployed with
// testdata/kube-flannel.yml, flannel's kube-flannel.yml of that release with the
// differences its comment names.

const (
	// LocalFlannelImage and LocalFlannelCNIImage are the names flannel's images are imported
	// under, in place of ghcr.io/flannel-io/flannel:v0.28.10 and
	// ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel3: they are not those images (the
	// plugin is not even that plugin's release), so they do not take their names.
	LocalFlannelImage    = "flannel.local/flannel:" + flannelVersion
	LocalFlannelCNIImage = "flannel.local/flannel-cni-plugin:v0.9.1"
	// flannelVersion is the release tools/flannel pins, which kube-flannel.yml is of.
	flannelVersion = "v0.28.10"
	// xtablesLibDir is where Debian's iptables looks for its extensions (libxt_*.so), which
	// it loads by name as a rule needs them.
	xtablesLibDir = "/usr/lib/x86_64-linux-gnu/xtables"
)

// FlannelImages builds flannel's two images into work and returns their archives: flannel's
// (LocalFlannelImage) holds flanneld and install-conf from flannelBin (the directory
// tools/flannel/install-flanneld.sh and install-flannel-kube.sh build into) and, for
// flanneld's iptables mode (kube-flannel.yml's "EnableNFTables": false), the host's iptables
// (Debian's iptables-nft, the nf_tables back end kube-proxy's nftables mode shares the kernel
// with) with its extensions and every library these load: flannel's own image is Alpine's
// with iptables; flanneld runs iptables, ip6tables and their -restore programs by name. The
// plugin's (LocalFlannelCNIImage) holds the plugin at /flannel, as flannel's does, and the
// host's cp with its libraries, which its install runs.
func FlannelImages(ctx context.Context, flannelBin, work string) ([]string, error) {
	flanneld := filepath.Join(flannelBin, "flanneld")
	out, err := exec.CommandContext(ctx, flanneld, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w: %s", flanneld, err, out)
	}
	if v := strings.TrimSpace(string(out)); v != flannelVersion {
		return nil, fmt.Errorf("%s is %s, and kube-flannel.yml is %s's", flanneld, v, flannelVersion)
	}
	xtables, err := exec.LookPath("xtables-nft-multi")
	if err != nil {
		return nil, fmt.Errorf("flannel's image: Debian's iptables: %w (tools/flannel/install-deps.sh installs it)", err)
	}
	exts, err := filepath.Glob(filepath.Join(xtablesLibDir, "*.so"))
	if err != nil || len(exts) == 0 {
		return nil, fmt.Errorf("flannel's image: no iptables extensions in %s (%v)", xtablesLibDir, err)
	}
	t := newFSTree()
	for _, p := range []struct{ at, src string }{
		{"/opt/bin/flanneld", flanneld},
		{"/opt/bin/install-conf", filepath.Join(flannelBin, "install-conf")},
		{"/usr/sbin/xtables-nft-multi", xtables},
	} {
		if err := t.hostProgram(ctx, p.at, p.src); err != nil {
			return nil, fmt.Errorf("flannel's image: %w", err)
		}
	}
	for _, p := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		t.symlink("/usr/sbin/"+p, "xtables-nft-multi")
	}
	for _, e := range exts {
		if err := t.hostFile(e, e); err != nil {
			return nil, fmt.Errorf("flannel's image: %w", err)
		}
		if err := t.libraries(ctx, e); err != nil {
			return nil, fmt.Errorf("flannel's image: %w", err)
		}
	}
	flannel, err := treeArchive(work, LocalFlannelImage, v1.Config{Entrypoint: []string{"/opt/bin/flanneld"}, Env: []string{pathEnv}}, t)
	if err != nil {
		return nil, err
	}

	cp, err := exec.LookPath("cp")
	if err != nil {
		return nil, fmt.Errorf("flannel's CNI plugin image: %w", err)
	}
	t = newFSTree()
	if err := t.hostFile("/flannel", filepath.Join(flannelBin, "flannel")); err != nil {
		return nil, fmt.Errorf("flannel's CNI plugin image: %w", err)
	}
	if err := t.hostProgram(ctx, "/bin/cp", cp); err != nil {
		return nil, fmt.Errorf("flannel's CNI plugin image: %w", err)
	}
	plugin, err := treeArchive(work, LocalFlannelCNIImage, v1.Config{Env: []string{pathEnv}}, t)
	if err != nil {
		return nil, err
	}
	return []string{flannel, plugin}, nil
}

// FlannelManifest returns the path of the cluster's kube-flannel.yml, in repo.
func FlannelManifest(repo string) string {
	return filepath.Join(repo, "e2e", "kubecluster", "testdata", "kube-flannel.yml")
}

// DeployFlannel applies kube-flannel.yml (FlannelManifest) as flannel's users do and waits
// until every node is Ready with NetworkUnavailable False, which flanneld sets. The images
// (FlannelImages, BaseImages' pause) must have been imported.
func (c *Cluster) DeployFlannel(ctx context.Context, repo string) ([]corev1.Node, error) {
	manifest := FlannelManifest(repo)
	if _, err := os.Stat(manifest); err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	}
	out, err := c.Kubectl(ctx, "apply", "-f", manifest)
	if err != nil {
		return nil, err
	}
	c.log.Logf("kubectl apply -f %s:\n%s", filepath.Base(manifest), strings.TrimSpace(out))
	return c.waitNetworkReady(ctx, "flannel's apply")
}
