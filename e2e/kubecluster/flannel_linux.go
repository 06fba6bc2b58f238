package kubecluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

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
// (LocalFlannelImage) holds flanneld from flanneldBin and install-conf from kubeBin (the
// directory tools/flannel/install-flanneld.sh and install-flannel-kube.sh build into), and,
// for flanneld's iptables mode (kube-flannel.yml's "EnableNFTables": false), the host's
// iptables (Debian's iptables-nft, the nf_tables back end kube-proxy's nftables mode
// shares the kernel with) with its extensions and every library these load: flannel's own
// image is Alpine's with iptables; flanneld runs iptables, ip6tables and their -restore
// programs by name. The plugin's (LocalFlannelCNIImage) holds the plugin at /flannel, as
// flannel's does, and the host's cp with its libraries, which its install runs.
func FlannelImages(flannelBin, work string) ([]string, error) {
	flanneld := filepath.Join(flannelBin, "flanneld")
	out, err := exec.Command(flanneld, "--version").CombinedOutput()
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
	files := []imageFile{
		{Path: "/opt/bin/flanneld", Src: flanneld, Mode: 0o755},
		{Path: "/opt/bin/install-conf", Src: filepath.Join(flannelBin, "install-conf"), Mode: 0o755},
		{Path: "/usr/sbin/xtables-nft-multi", Src: xtables, Mode: 0o755},
	}
	for _, p := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		files = append(files, imageFile{Path: "/usr/sbin/" + p, Link: "xtables-nft-multi"})
	}
	exts, err := filepath.Glob(filepath.Join(xtablesLibDir, "*.so"))
	if err != nil || len(exts) == 0 {
		return nil, fmt.Errorf("flannel's image: no iptables extensions in %s (%v)", xtablesLibDir, err)
	}
	for _, e := range exts {
		files = append(files, imageFile{Path: e, Src: e, Mode: 0o644})
	}
	if files, err = withLibraries(files); err != nil {
		return nil, fmt.Errorf("flannel's image: %w", err)
	}
	img, err := hostFilesImage(files, []string{"/opt/bin/flanneld"})
	if err != nil {
		return nil, fmt.Errorf("flannel's image: %w", err)
	}
	flannel := filepath.Join(work, "flannel.tar")
	if err := writeArchive(flannel, LocalFlannelImage, img); err != nil {
		return nil, err
	}

	cp, err := exec.LookPath("cp")
	if err != nil {
		return nil, fmt.Errorf("flannel's CNI plugin image: %w", err)
	}
	files = []imageFile{
		{Path: "/flannel", Src: filepath.Join(flannelBin, "flannel"), Mode: 0o755},
		{Path: "/bin/cp", Src: cp, Mode: 0o755},
	}
	if files, err = withLibraries(files); err != nil {
		return nil, fmt.Errorf("flannel's CNI plugin image: %w", err)
	}
	if img, err = hostFilesImage(files, nil); err != nil {
		return nil, fmt.Errorf("flannel's CNI plugin image: %w", err)
	}
	plugin := filepath.Join(work, "flannel-cni-plugin.tar")
	if err := writeArchive(plugin, LocalFlannelCNIImage, img); err != nil {
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
