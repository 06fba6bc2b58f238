package kubecluster

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/e2e/cluster"
)

// e2eFocus selects the specs of Kubernetes' e2e suite that judge a cluster's network: SIG
// Network's conformance specs, the networking granular checks (pod to pod and node to pod,
// http and udp; pods to Services), the IPv4 networking feature, and every Services spec.
var e2eFocus = []string{
	conformanceFocus,
	`\[sig-network\] Networking Granular Checks`,
	`\[sig-network\].*\[Feature:Networking-IPv4\]`,
	`\[sig-network\] Services `,
}

// conformanceFocus selects SIG Network's conformance specs.
const conformanceFocus = `\[sig-network\].*\[Conformance\]`

// netpolCore are the Netpol specs `make test` runs (TestPodNetwork), by their full text:
// one of each kind of rule weft compiles (a default deny, pod and namespace selectors
// together, a named port, an ipBlock with except, both directions in one policy, a UDP
// port, a protocol weft must not take for another) and of each kind of change it follows (a
// pod's labels, a policy deleted). make conformance runs them all (netpolFocus).
var netpolCore = []string{
	"[sig-network] Netpol NetworkPolicy between server and client should support a 'default-deny-ingress' policy [Feature:NetworkPolicy]",
	"[sig-network] Netpol NetworkPolicy between server and client should enforce policy based on PodSelector and NamespaceSelector [Feature:NetworkPolicy]",
	"[sig-network] Netpol NetworkPolicy between server and client should allow ingress access on one named port [Feature:NetworkPolicy]",
	"[sig-network] Netpol NetworkPolicy between server and client should enforce except clause while egress access to server in CIDR block [Feature:NetworkPolicy]",
	"[sig-network] Netpol NetworkPolicy between server and client should work with Ingress, Egress specified together [Feature:NetworkPolicy]",
	"[sig-network] Netpol NetworkPolicy between server and client should allow ingress access from updated pod [Feature:NetworkPolicy]",
	"[sig-network] Netpol NetworkPolicy between server and client should stop enforcing policies after they are deleted [Feature:NetworkPolicy]",
	"[sig-network] Netpol NetworkPolicy between server and client should not mistakenly treat 'protocol: SCTP' as 'protocol: TCP', even if the plugin doesn't support SCTP [Feature:NetworkPolicy]",
	"[sig-network] Netpol [LinuxOnly] NetworkPolicy between server and client using UDP should enforce policy based on Ports [Feature:NetworkPolicy]",
}

// coreFocus is what `make test` runs of Kubernetes' e2e suite: SIG Network's conformance
// specs and netpolCore.
func coreFocus() []string {
	focus := []string{conformanceFocus}
	for _, name := range netpolCore {
		focus = append(focus, exactSpec(name))
	}
	return focus
}

// exactSpec is the expression that selects the spec of full text name and no other. ginkgo
// matches --ginkgo.focus and --ginkgo.skip against a spec's full text after a space.
func exactSpec(name string) string { return `(^|\s)` + regexp.QuoteMeta(name) + "$" }

// EnvE2EFocus names the variable that narrows a run to the specs its regular expression
// matches, instead of e2eFocus (e2eSkipped still apply): for looking into one spec.
const EnvE2EFocus = "WEFT_E2E_FOCUS"

// e2eSkipped are the specs of e2eFocus that are not to pass on this machine, by their full
// text, each with why; the suite is told to skip exactly these. A spec in focus that does not
// pass and is not here fails TestConformance (skipped by itself, or never reached), and so
// does one here that the run did not skip (the list is stale): a new Kubernetes, or a fix,
// shows.
var e2eSkipped = map[string]string{
	"[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: sctp [LinuxOnly] [Feature:SCTPConnectivity]": noSCTP,
	"[sig-network] Networking Granular Checks: Pods should function for node-pod communication: sctp [LinuxOnly] [Feature:SCTPConnectivity]":  noSCTP,
	"[sig-network] Networking Granular Checks: Services should function for endpoint-Service: sctp [Feature:SCTPConnectivity]":                noSCTP,
	"[sig-network] Networking Granular Checks: Services should function for node-Service: sctp [Feature:SCTPConnectivity]":                    noSCTP,
	"[sig-network] Networking Granular Checks: Services should function for pod-Service: sctp [Feature:SCTPConnectivity]":                     noSCTP,
	"[sig-network] Services should allow creating a basic SCTP service with pod and endpoints [LinuxOnly] [Serial]":                           noSCTP,
	"[sig-network] Networking should provide Internet connection for containers [Feature:Networking-IPv4]": "needs the Internet " +
		"(a pod connects to 8.8.8.8:53): this machine's outside accepts every TCP connection, whatever the address, so a pass " +
		"would prove nothing, and the underlay has no way out",
	"[sig-network] Services should work after restarting apiserver [Disruptive]":  noSSH,
	"[sig-network] Services should work after restarting kube-proxy [Disruptive]": noSSH,
	"[sig-network] Services should implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy changes": "expects " +
		"a node's own connection to a NodePort with externalTrafficPolicy Local to reach an endpoint on another node with the " +
		"node's address; weft, as flanneld with --ip-masq (dist/kubernetes), masquerades what a node sends to other nodes' pods " +
		"(flannel's rule since its PR 327), so that the replies come back over the overlay even where the node's address is not " +
		"reachable or rp_filter is strict",
}

// Reasons shared by several specs.
const (
	noSCTP = "this kernel has no SCTP (socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP): protocol not supported)"
	noSSH  = "restarts kube-proxy or the API server over SSH, which this cluster's machines do not run"
)

// TestConformance runs Kubernetes' own e2e tests of the network (e2eFocus, less e2eSkipped)
// against a three-node cluster running weft as a user deploys it, with CoreDNS and the test
// images imported into every node, and fails if any spec that ran failed. It prints the
// suite's summary and each skipped spec with its reason. A Windows node (AddWindowsNode:
// weftd.exe and kube-proxy.exe under Wine, no kubelet, so never Ready: the suite is told to
// allow one node not Ready) is in the cluster all along, as in a mixed cluster; after the
// suite its weftd.exe and kube-proxy.exe still run, it reaches every Linux node's podCIDR,
// and kube-proxy.exe's load balancers hold for every Service left. make conformance runs
// it.
func TestConformance(t *testing.T) {
	opts, repo := needSuite(t)

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
	// The Windows node is not Ready.
	runSuite(ctx, t, c, filepath.Join(repo, ".cache", "conformance"), opts.KubeBin, suiteFocus(e2eFocus), e2eSkipped, 1)
	win.waitRSRs(ctx, t, "after the suite")
	win.waitServices(ctx, t, "after the suite")
	for _, r := range w.Refused() {
		t.Error(r)
	}
	win.checkPeers(ctx, t)
}

// needSuite skips the test unless a long cluster test can run, and returns the cluster's
// options and the repository, with Kubernetes' e2e suite built (needE2E).
func needSuite(t *testing.T) (Options, string) {
	t.Helper()
	needLong(t)
	opts := needCluster(t)
	return opts, needE2E(t, opts.KubeBin)
}

// needE2E builds Kubernetes' e2e suite into kubeBin (the first time only; cached after) and
// returns the repository.
func needE2E(t *testing.T, kubeBin string) string {
	t.Helper()
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	install(t, filepath.Join(repo, "tools", "kube", "install-e2e.sh"), kubeBin)
	return repo
}

// suiteFocus is focus, or the expression of EnvE2EFocus when it is set.
func suiteFocus(focus []string) []string {
	if f := os.Getenv(EnvE2EFocus); f != "" {
		return []string{f}
	}
	return focus
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

// runSuite runs Kubernetes' e2e suite on the cluster (focus, less the specs skipped, each by
// its full text), its report and output kept in reportDir after the run, unlike the cluster's
// directory; it logs the summary and each skipped spec with its reason, and fails the test on
// every failed spec, every spec in focus skipped or not reached that skipped does not list,
// every spec skipped lists (and focus selects) that was not skipped, and when none passed.
func runSuite(ctx context.Context, t *testing.T, c *Cluster, reportDir, kubeBin string, focus []string, skipped map[string]string, notReady int) *E2EResult {
	t.Helper()
	if err := os.RemoveAll(reportDir); err != nil {
		t.Fatal(err)
	}
	var skips []E2ESkip
	for _, name := range slices.Sorted(maps.Keys(skipped)) {
		skips = append(skips, E2ESkip{Pattern: exactSpec(name), Reason: skipped[name]})
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
	var list strings.Builder
	for _, s := range res.Skipped {
		fmt.Fprintf(&list, "\n  %s\n      (%s)", s.Spec, s.Reason)
	}
	t.Logf("Kubernetes e2e suite, in %v:\n%s\n%d passed, %d failed, %d skipped; skipped:%s\nfull output: %s",
		time.Since(start).Round(time.Second), res.Summary, len(res.Passed), len(res.Failed), len(res.Skipped),
		list.String(), res.Log)
	for _, f := range res.Failed {
		t.Errorf("e2e spec failed: %s\n%s", f, res.Failures[f])
	}
	for _, p := range skipProblems(res, focus, skipped) {
		t.Error(p)
	}
	if len(res.Passed) == 0 {
		t.Errorf("no e2e spec passed: is the focus right? see %s", res.Log)
	}
	return res
}

// skipProblems are the ways res's skipped specs differ from skipped: a spec skipped (or not
// reached) that skipped does not list, and one it lists, and focus selects, that was not
// skipped.
func skipProblems(res *E2EResult, focus []string, skipped map[string]string) []string {
	var out []string
	focusRE := regexp.MustCompile(strings.Join(focus, "|"))
	seen := map[string]bool{}
	for _, s := range res.Skipped {
		seen[s.Spec] = true
		if _, listed := skipped[s.Spec]; !listed {
			out = append(out, fmt.Sprintf("e2e spec skipped unexpectedly (pass it, or list it with why): %s\n      (%s)", s.Spec, s.Reason))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(skipped)) {
		if focusRE.MatchString(name) && !seen[name] {
			out = append(out, "e2e spec listed as skipped was not (take it off the list, or the suite no longer has it): "+name)
		}
	}
	return out
}
