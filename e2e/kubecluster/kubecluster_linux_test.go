package kubecluster

import (
	"context"
	"errors"
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

// EnvRun names the variable that turns these tests on (`make conformance` sets it): a cluster
// takes the Kubernetes programs' builds (minutes, once) and a minute to start.
const EnvRun = "WEFT_KUBE_CLUSTER"

// needCluster skips the test unless it was asked for and can run, and returns the cluster's
// options with the programs installed (cached after the first time).
func needCluster(t *testing.T) Options {
	t.Helper()
	if os.Getenv(EnvRun) == "" {
		t.Skipf("a Kubernetes cluster is tested only when asked: %s=1 (make conformance)", EnvRun)
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

// TestNodesRegister starts the control plane and three nodes, and checks that each node
// registers and gets a podCIDR of its own inside the cluster CIDR from the controller-manager.
// No network plugin is installed yet, so the nodes are not Ready; the test logs why.
func TestNodesRegister(t *testing.T) {
	c := newCluster(t, 3)
	clusterCIDR := netip.MustParsePrefix("10.244.0.0/16")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	nodes, err := c.WaitNodes(ctx, func(n *corev1.Node) error {
		if n.Spec.PodCIDR == "" {
			return errors.New("no podCIDR")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes registered with podCIDRs %v after the last kubelet started", len(nodes), time.Since(start).Round(time.Millisecond))
	seen := map[netip.Prefix]string{}
	for _, n := range nodes {
		cidr, err := netip.ParsePrefix(n.Spec.PodCIDR)
		if err != nil {
			t.Errorf("node %s: podCIDR %q: %v", n.Name, n.Spec.PodCIDR, err)
			continue
		}
		if cidr.Bits() != 24 || !clusterCIDR.Contains(cidr.Addr()) {
			t.Errorf("node %s: podCIDR %s, want a /24 inside %s", n.Name, cidr, clusterCIDR)
		}
		if other, dup := seen[cidr]; dup {
			t.Errorf("nodes %s and %s share podCIDR %s", n.Name, other, cidr)
		}
		seen[cidr] = n.Name
		var ready string
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				ready = fmt.Sprintf("%s (%s: %s)", cond.Status, cond.Reason, cond.Message)
			}
		}
		t.Logf("node %s: podCIDR %s, kubelet %s, Ready %s", n.Name, cidr, n.Status.NodeInfo.KubeletVersion, ready)
	}
}

// TestWeftDeployed deploys weft as a user does, `kubectl apply -f dist/kubernetes/` with only
// the image changed to the local one, and waits for every node to turn Ready with
// NetworkUnavailable cleared.
func TestWeftDeployed(t *testing.T) {
	c := newCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	nodes := deployWeft(ctx, t, c)
	for _, n := range nodes {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeNetworkUnavailable {
				t.Logf("node %s: podCIDR %s, NetworkUnavailable %s (%s: %s)", n.Name, n.Spec.PodCIDR, cond.Status, cond.Reason, cond.Message)
			}
		}
	}
	out, err := c.Kubectl(ctx, "get", "pods", "-A", "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pods:\n%s", out)
}

// deployWeft gives every node the reference CNI plugins a node ships and the base images,
// then deploys weft (Cluster.DeployWeft) and returns the nodes once their network is ready.
func deployWeft(ctx context.Context, t *testing.T, c *Cluster) []corev1.Node {
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
	nodes, err := c.DeployWeft(ctx, repo, work)
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}
