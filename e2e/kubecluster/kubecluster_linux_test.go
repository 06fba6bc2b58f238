package kubecluster

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/weftnet/weft/e2e/cluster"
)

// EnvRun names the variable that turns the long tests on (`make conformance` sets it):
// Kubernetes' own e2e suite, the migration from flannel, the Helm install. The cluster's core
// (TestPodNetwork) runs in every `make test` as root.
const EnvRun = "WEFT_KUBE_CLUSTER"

// needLong skips a long test unless it was asked for with EnvRun.
func needLong(t *testing.T) {
	t.Helper()
	if os.Getenv(EnvRun) == "" {
		t.Skipf("a long Kubernetes cluster test runs only when asked: %s=1 (make conformance)", EnvRun)
	}
}

// needCluster skips the test unless it can run, and returns the cluster's options with the
// programs installed (built the first time: minutes; cached after).
func needCluster(t *testing.T) Options {
	t.Helper()
	if testing.Short() {
		t.Skip("a Kubernetes cluster is not started in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("a Kubernetes cluster needs root (network and mount namespaces)")
	}
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubeBin := filepath.Join(repo, ".cache", "kube", "bin")
	ctrdBin := filepath.Join(repo, ".cache", "containerd", "bin")
	install(t, filepath.Join(repo, "tools", "kube", "install-kube.sh"), kubeBin,
		"kube-apiserver", "kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubectl")
	install(t, filepath.Join(repo, "tools", "containerd", "install-containerd.sh"), ctrdBin)
	// nft, for kube-proxy's nftables mode.
	install(t, filepath.Join(repo, "tools", "install-e2e-deps.sh"))
	return Options{KubeBin: kubeBin, ContainerdBin: ctrdBin}
}

// needCNIPlugins installs the reference CNI plugins a node ships (cached) and returns their
// directory.
func needCNIPlugins(t *testing.T, repo string) string {
	t.Helper()
	dir := filepath.Join(repo, ".cache", "cni", "bin")
	install(t, filepath.Join(repo, "tools", "install-cni.sh"), dir)
	return dir
}

// install runs an install script of tools/, which does nothing when its programs are current.
func install(t *testing.T, script string, args ...string) {
	t.Helper()
	start := time.Now()
	out, err := exec.Command(script, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, out)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Logf("%s took %v:\n%s", filepath.Base(script), d.Round(time.Second), out)
	}
}

// newCluster starts a cluster with n nodes.
func newCluster(t *testing.T, n int) *Cluster {
	t.Helper()
	c, err := New(t, needCluster(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if _, err := c.AddNode(fmt.Sprintf("node%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// deployWeft gives every node the reference CNI plugins a node ships and the base images,
// then deploys weft (Cluster.DeployWeft) and returns the nodes once their network is ready.
func deployWeft(ctx context.Context, t *testing.T, c *Cluster) []corev1.Node {
	t.Helper()
	return deployWeftWith(ctx, t, c, (*Cluster).DeployWeft)
}

// deployWeftWith is deployWeft with deploy in place of DeployWeft.
func deployWeftWith(ctx context.Context, t *testing.T, c *Cluster, deploy func(*Cluster, context.Context, string, string) ([]corev1.Node, error)) []corev1.Node {
	t.Helper()
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cniBin := needCNIPlugins(t, repo)
	work := t.TempDir()
	start := time.Now()
	images, err := BaseImages(ctx, repo, work)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pause and weft images built in %v", time.Since(start).Round(time.Second))
	for _, n := range c.Nodes() {
		if err := n.InstallCNIPlugins(cniBin); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ImportImages(ctx, images...); err != nil {
		t.Fatal(err)
	}
	nodes, err := deploy(c, ctx, repo, work)
	if err != nil {
		t.Fatal(err)
	}
	// Each node has a podCIDR of its own inside the cluster CIDR, from the
	// controller-manager, which weft took as its subnet.
	seen := map[netip.Prefix]string{}
	for _, n := range nodes {
		cidr, err := netip.ParsePrefix(n.Spec.PodCIDR)
		if err != nil {
			t.Fatalf("node %s: podCIDR %q: %v", n.Name, n.Spec.PodCIDR, err)
		}
		if cidr.Bits() != 24 || !c.opts.ClusterCIDR.Contains(cidr.Addr()) {
			t.Errorf("node %s: podCIDR %s, want a /24 inside %s", n.Name, cidr, c.opts.ClusterCIDR)
		}
		if other, dup := seen[cidr]; dup {
			t.Errorf("nodes %s and %s share podCIDR %s", n.Name, other, cidr)
		}
		seen[cidr] = n.Name
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeNetworkUnavailable {
				t.Logf("node %s: podCIDR %s, kubelet %s, NetworkUnavailable %s (%s: %s)", n.Name, cidr,
					n.Status.NodeInfo.KubeletVersion, cond.Status, cond.Reason, cond.Message)
			}
		}
	}
	return nodes
}
