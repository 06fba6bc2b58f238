package kubecluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/e2e/cluster"
)

// e2eFocus selects the specs of Kubernetes' e2e suite that judge a cluster's network: SIG
// Network's conformance specs, the networking granular checks (pod to pod and node to pod,
// http and udp; pods to Services), the IPv4 networking feature, and every Services spec.
var e2eFocus = []string{
	`\[sig-network\].*\[Conformance\]`,
	`\[sig-network\] Networking Granular Checks`,
	`\[sig-network\].*\[Feature:Networking-IPv4\]`,
	`\[sig-network\] Services `,
}

// EnvE2EFocus names the variable that narrows a run to the specs its regular expression
// matches, instead of e2eFocus (e2eSkips still apply): for looking into one spec.
const EnvE2EFocus = "WEFT_E2E_FOCUS"

// e2eSkips are the specs in focus that cannot run on this machine, each with why. Specs the
// suite skips by itself (no SSH to the nodes, too few nodes…) are listed with its reasons.
var e2eSkips = []E2ESkip{
	{`LoadBalancer|ESIPP`, "needs a cloud load balancer: nothing here gives a Service of type LoadBalancer an address"},
	{`\[Feature:Networking-IPv4\]`, "needs the Internet (a pod connects to 8.8.8.8:53): this machine's outside " +
		"accepts every TCP connection, whatever the address, so a pass would prove nothing, and the underlay has no way out"},
	{`IPv6|\[Feature:IPv6DualStack\]|[Dd]ual[- ][Ss]tack`, "IPv6: the cluster is IPv4 only (dist/net-conf.json)"},
	{`SCTP`, "this kernel has no SCTP (socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP): protocol not supported)"},
	{`\[Disruptive\]`, "restarts kube-proxy or the API server over SSH, which this cluster's machines do not run"},
	{`\[Flaky\]`, "marked flaky by Kubernetes"},
	{`should implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy changes`,
		"expects a node's own connection to a NodePort with externalTrafficPolicy Local to reach an endpoint on " +
			"another node with the node's address; weft, as flanneld with --ip-masq (dist/kubernetes), masquerades " +
			"what a node sends to other nodes' pods (flannel's rule since its PR 327), so that the replies come back " +
			"over the overlay even where the node's address is not reachable or rp_filter is strict"},
}

// TestConformance runs Kubernetes' own e2e tests of the network (e2eFocus, less e2eSkips)
// against a three-node cluster running weft as a user deploys it, with CoreDNS and the test
// images imported into every node, and fails if any spec that ran failed. It prints the
// suite's summary and each skipped spec with its reason. A Windows node (AddWindowsNode:
// weftd.exe and kube-proxy.exe under Wine, no kubelet, so never Ready: the suite is told to
// allow one node not Ready) is in the cluster all along, as in a mixed cluster; after the
// suite its weftd.exe and kube-proxy.exe still run, it reaches every Linux node's podCIDR,
// and kube-proxy.exe's load balancers hold for every Service left. make conformance runs
// it.
func TestConformance(t *testing.T) {
	needLong(t)
	opts := needCluster(t)
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	install(t, filepath.Join(repo, "tools", "kube", "install-e2e.sh"), opts.KubeBin)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Minute)
	defer cancel()
	start := time.Now()
	wopts := needWindowsNode(t, opts.KubeBin, true)
	c := newCluster(t, 3)
	deployWeft(ctx, t, c)
	w, err := c.AddWindowsNode(ctx, t, "win1", wopts)
	if err != nil {
		t.Fatal(err)
	}
	win := windowsCheck{c: c, w: w, dsr: wopts.DSR}
	win.waitRSRs(ctx, t, "the Windows node started")
	prepareSuite(ctx, t, c, repo, start)
	focus := e2eFocus
	if f := os.Getenv(EnvE2EFocus); f != "" {
		focus = []string{f}
	}
	// The Windows node is not Ready.
	runSuite(ctx, t, c, filepath.Join(repo, ".cache", "conformance"), opts.KubeBin, focus, e2eSkips, 1)
	win.waitRSRs(ctx, t, "after the suite")
	win.waitServices(ctx, t, "after the suite")
	for _, r := range w.Refused() {
		t.Error(r)
	}
	win.checkPeers(ctx, t)
}

// prepareSuite gives the cluster what Kubernetes' e2e suite needs: the test images in
// every node, CoreDNS, and a route from the underlay (where e2e.test runs) to the pods.
func prepareSuite(ctx context.Context, t *testing.T, c *Cluster, repo string, start time.Time) {
	t.Helper()
	work := t.TempDir()
	images, err := E2EImages(ctx, repo, work)
	if err != nil {
		t.Fatal(err)
	}
	more, err := ConformanceImages(ctx, work)
	if err != nil {
		t.Fatal(err)
	}
	images = append(images, more...)
	if err := c.ImportImages(ctx, images...); err != nil {
		t.Fatal(err)
	}
	if err := c.DeployCoreDNS(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.RoutePodNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster ready for the e2e suite in %v", time.Since(start).Round(time.Second))
}

// runSuite runs Kubernetes' e2e suite (focus less skips) on the cluster, its report and
// output kept in reportDir after the run, unlike the cluster's directory; it logs the summary
// and each skipped spec with its reason, and fails the test on every failed spec and when
// none passed.
func runSuite(ctx context.Context, t *testing.T, c *Cluster, reportDir, kubeBin string, focus []string, skips []E2ESkip, notReady int) *E2EResult {
	t.Helper()
	if err := os.RemoveAll(reportDir); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := c.RunE2E(ctx, E2EOptions{
		Binary:               filepath.Join(kubeBin, "e2e.test"),
		ReportDir:            reportDir,
		Focus:                focus,
		Skip:                 skips,
		Timeout:              75 * time.Minute,
		Progress:             func(line string) { t.Log(line) },
		AllowedNotReadyNodes: notReady,
	})
	if err != nil {
		t.Fatal(err)
	}
	var skipped strings.Builder
	for _, s := range res.Skipped {
		fmt.Fprintf(&skipped, "\n  %s\n      (%s)", s.Spec, s.Reason)
	}
	t.Logf("Kubernetes e2e suite, in %v:\n%s\n%d passed, %d failed, %d skipped; skipped:%s\nfull output: %s",
		time.Since(start).Round(time.Second), res.Summary, len(res.Passed), len(res.Failed), len(res.Skipped),
		skipped.String(), res.Log)
	for _, f := range res.Failed {
		t.Errorf("e2e spec failed: %s\n%s", f, res.Failures[f])
	}
	if len(res.Passed) == 0 {
		t.Errorf("no e2e spec passed: is the focus right? see %s", res.Log)
	}
	return res
}
