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

	"github.com/weftnet/weft/dist/image"
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

// localWeftImage is the name the weft image from `make image` is imported under; the
// manifest's image is changed to it, and nothing else.
const localWeftImage = "weft.local/weft:e2e"

// TestWeftDeployed deploys weft as a user does, `kubectl apply -f dist/kubernetes/` with only
// the image changed to the local one, and waits for every node to turn Ready with
// NetworkUnavailable cleared.
func TestWeftDeployed(t *testing.T) {
	c := newCluster(t, 3)
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cniBin := needCNIPlugins(t, repo)
	work := t.TempDir()
	pause, err := PauseArchive(ctx, repo, work)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := image.Build(ctx, image.Options{ModuleDir: repo, Version: "v0.0.0-e2e", Arches: []string{"amd64"}},
		filepath.Join(work, "weft-layout")); err != nil {
		t.Fatalf("building weft's image: %v", err)
	}
	t.Logf("weft's image built in %v", time.Since(start).Round(time.Second))
	weft, err := LayoutArchive(filepath.Join(work, "weft-layout"), localWeftImage, work)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		if err := n.InstallCNIPlugins(cniBin); err != nil {
			t.Fatal(err)
		}
		for _, a := range []string{pause, weft} {
			if err := n.ImportImage(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
	}
	manifest, err := os.ReadFile(filepath.Join(repo, "dist", "kubernetes", "weft.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const shipped = "image: ghcr.io/weftnet/weft:v0.1.0\n"
	if !strings.Contains(string(manifest), shipped) {
		t.Fatalf("dist/kubernetes/weft.yaml has no %q to replace", shipped)
	}
	local := filepath.Join(work, "weft.yaml")
	if err := os.WriteFile(local, []byte(strings.ReplaceAll(string(manifest), shipped, "image: "+localWeftImage+"\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(repo, "dist", "kubernetes", "rbac.yaml"), local} {
		out, err := c.Kubectl(ctx, "apply", "-f", f)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kubectl apply -f %s:\n%s", filepath.Base(f), strings.TrimSpace(out))
	}
	start = time.Now()
	// Both conditions must be there: the kubelet posts Ready, weftd NetworkUnavailable
	// (False, once its network is up), which no one else here sets.
	nodes, err := c.WaitNodes(ctx, func(n *corev1.Node) error {
		var ready, network *corev1.NodeCondition
		for i, cond := range n.Status.Conditions {
			switch cond.Type {
			case corev1.NodeReady:
				ready = &n.Status.Conditions[i]
			case corev1.NodeNetworkUnavailable:
				network = &n.Status.Conditions[i]
			}
		}
		switch {
		case ready == nil || ready.Status != corev1.ConditionTrue:
			return fmt.Errorf("not Ready: %v", ready)
		case network == nil:
			return errors.New("no NetworkUnavailable condition yet")
		case network.Status != corev1.ConditionFalse:
			return fmt.Errorf("NetworkUnavailable %s: %s", network.Status, network.Message)
		}
		return nil
	})
	if err != nil {
		if out, kerr := c.Kubectl(context.Background(), "get", "pods", "-A", "-o", "wide"); kerr == nil {
			t.Logf("pods:\n%s", out)
		}
		t.Fatal(err)
	}
	t.Logf("every node Ready with NetworkUnavailable False %v after the apply", time.Since(start).Round(time.Millisecond))
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
