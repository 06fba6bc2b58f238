package kubecluster

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/weftnet/weft/e2e/cluster"
)

// envHelm names the variable holding the helm binary (as in dist's tests, which `make test`
// sets); without it, tools/helm/install-helm.sh builds it into .cache/helm/bin.
const envHelm = "WEFT_HELM"

// needHelm returns the helm to use, building it (cached) unless WEFT_HELM names one.
func needHelm(t *testing.T, repo string) string {
	t.Helper()
	if p := os.Getenv(envHelm); p != "" {
		return p
	}
	dir := filepath.Join(repo, ".cache", "helm", "bin")
	install(t, filepath.Join(repo, "tools", "helm", "install-helm.sh"), dir)
	return filepath.Join(dir, "helm")
}

// TestWeftHelm deploys weft as a Helm user does, `helm install weft dist/helm/weft` with only
// the image set to the local one, waits for every node to turn Ready with NetworkUnavailable
// cleared, and checks that pods on two nodes reach each other through the overlay.
func TestWeftHelm(t *testing.T) {
	needLong(t)
	c := newCluster(t, 3)
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := needHelm(t, repo)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	work := t.TempDir()
	pingImage := prepareNodes(ctx, t, c, repo, work)
	nodes, err := c.HelmInstallWeft(ctx, helm, repo, work)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeNetworkUnavailable {
				t.Logf("node %s: podCIDR %s, NetworkUnavailable %s (%s)", n.Name, n.Spec.PodCIDR, cond.Status, cond.Reason)
			}
		}
	}
	kubectl(ctx, t, c, "get", "pods", "-A", "-o", "wide")

	a, b := c.Nodes()[0].Name, c.Nodes()[1].Name
	states, err := c.RunPods(ctx, PingPod("ping-"+a, a, pingImage), PingPod("ping-"+b, b, pingImage))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range states {
		other := states[1-i]
		out := kubectl(ctx, t, c, "exec", s.Name, "--", "ping", "-c", "5", "-i", "0.2", "-W", "2", other.IP.String())
		r, err := parsePing(out)
		if err != nil {
			t.Fatalf("%s (%s, on %s) -> %s (%s, on %s): %v", s.Name, s.IP, s.Node, other.Name, other.IP, other.Node, err)
		}
		t.Logf("%s (%s, on %s) -> %s (%s, on %s): %d of %d answered", s.Name, s.IP, s.Node, other.Name, other.IP, other.Node,
			r.Sent-r.Lost, r.Sent)
	}
}
