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
		"kube-apiserver", "kubelet", "kube-controller-manager", "kube-scheduler")
	install(t, filepath.Join(repo, "tools", "containerd", "install-containerd.sh"), ctrdBin)
	return Options{KubeBin: kubeBin, ContainerdBin: ctrdBin}
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

// TestNodesRegister starts the control plane and three nodes, and checks that each node
// registers and gets a podCIDR of its own inside the cluster CIDR from the controller-manager.
// No network plugin is installed yet, so the nodes are not Ready; the test logs why.
func TestNodesRegister(t *testing.T) {
	opts := needCluster(t)
	c, err := New(t, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := c.AddNode(fmt.Sprintf("node%d", i)); err != nil {
			t.Fatal(err)
		}
	}
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
