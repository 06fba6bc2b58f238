package kubecluster

import (
	"bufio"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftnet/weft/e2e/cluster"
)

// Kubernetes' own end-to-end suite (e2e.test, tools/kube/install-e2e.sh) runs against the
// cluster from the underlay, where the API server's address is, as kubectl does: its pods'
// traffic, its NodePorts and its own connections to the nodes all cross the netns underlay
// and weft's overlay, not the host.

// E2EOptions describe a run of e2e.test against the cluster.
type E2EOptions struct {
	// Binary is e2e.test. Required.
	Binary string
	// ReportDir receives the suite's JUnit report (junit_01.xml) and its whole output
	// (e2e.log). Required.
	ReportDir string
	// Focus are the regular expressions of the specs to run: a spec runs if its full text
	// matches one of them and no Skip. Required.
	Focus []string
	// Skip are the specs left out, each with its reason.
	Skip []E2ESkip
	// Timeout is the suite's --ginkgo.timeout; past it, ginkgo interrupts the running spec and
	// reports the rest as not run. Default one hour.
	Timeout time.Duration
	// Progress receives a line as each spec ends, and the suite's summary lines.
	Progress func(line string)
	// AllowedNotReadyNodes is the suite's --allowed-not-ready-nodes: the nodes it may find
	// not Ready (a Windows node without a kubelet: AddWindowsNode) and leaves out of the
	// nodes it schedules to.
	AllowedNotReadyNodes int
}

// E2ESkip is a group of specs left out of a run, and why.
type E2ESkip struct {
	// Pattern is a regular expression that matches the full text of the specs.
	Pattern string
	// Reason says why they cannot run here.
	Reason string
}

// E2EResult is what a run of e2e.test reported.
type E2EResult struct {
	// Summary is the suite's own summary: ginkgo's "Ran N of M Specs" and its verdict line.
	Summary string
	// Passed, Failed and Skipped are the specs in focus, by their full text, in order.
	Passed, Failed []string
	// Skipped are the specs in focus that did not run, each with its reason: the reason of
	// the E2ESkip that left it out, or the suite's own (a Skipf at run time: a provider, a
	// node count, a feature the cluster lacks).
	Skipped []E2ESkipped
	// Failures holds each failed spec's message, by full text.
	Failures map[string]string
	// Log is the file with the suite's whole output.
	Log string
}

// E2ESkipped is a spec in focus that did not run.
type E2ESkipped struct {
	Spec, Reason string
}

// RunE2E runs e2e.test in the underlay against the cluster's API server, with the
// administrator's kubeconfig and the cluster's kubectl, and returns what its JUnit report
// says of the specs in focus. An error means the suite could not run or report, not that a
// spec failed: that is in the result.
func (c *Cluster) RunE2E(ctx context.Context, opts E2EOptions) (*E2EResult, error) {
	if opts.Binary == "" || opts.ReportDir == "" || len(opts.Focus) == 0 {
		return nil, errors.New("kubecluster: E2EOptions.Binary, ReportDir and Focus are required")
	}
	if opts.Timeout == 0 {
		opts.Timeout = time.Hour
	}
	if opts.Progress == nil {
		opts.Progress = func(string) {}
	}
	if err := os.MkdirAll(opts.ReportDir, 0o755); err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	}
	// --provider=skeleton: the framework's provider for a cluster it knows nothing of. It
	// is not among the providers with SSH (local is), so the specs that would ssh into a
	// node skip themselves instead of failing to connect.
	args := []string{
		"--kubeconfig=" + c.adminKubeconfig,
		"--kubectl-path=" + filepath.Join(c.opts.KubeBin, "kubectl"),
		"--provider=skeleton",
		"--report-dir=" + opts.ReportDir,
		"--e2e-output-dir=" + opts.ReportDir,
		"--dns-domain=" + ClusterDomain,
		"--ginkgo.focus=" + strings.Join(opts.Focus, "|"),
		"--ginkgo.timeout=" + opts.Timeout.String(),
		"--ginkgo.v",
		"--ginkgo.no-color",
	}
	if opts.AllowedNotReadyNodes > 0 {
		args = append(args, fmt.Sprintf("--allowed-not-ready-nodes=%d", opts.AllowedNotReadyNodes))
	}
	if len(opts.Skip) > 0 {
		var skip []string
		for _, s := range opts.Skip {
			skip = append(skip, s.Pattern)
		}
		args = append(args, "--ginkgo.skip="+strings.Join(skip, "|"))
	}
	logPath := filepath.Join(opts.ReportDir, "e2e.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	}
	defer logf.Close()
	argv := append(c.net.UnderlayCommand(), append([]string{opts.Binary}, args...)...)
	fmt.Fprintf(logf, "=== weft-kubecluster %s: %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// The suite looks for its test data under --repo-root (default ../../) before its
	// embedded copy; a directory of its own keeps it from reading anything of this tree.
	cmd.Dir = opts.ReportDir
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("kubecluster: starting %s: %w", opts.Binary, err)
	}
	summary := followE2E(out, logf, opts.Progress)
	runErr := cmd.Wait()
	res, err := ReadE2EReport(filepath.Join(opts.ReportDir, "junit_01.xml"), opts.Focus, opts.Skip)
	if err != nil {
		return nil, fmt.Errorf("kubecluster: e2e.test (%v) left no report: %w; its output is in %s", runErr, err, logPath)
	}
	res.Summary, res.Log = summary, logPath
	// e2e.test exits non-zero when a spec failed, which the result says; anything else
	// (no spec in focus, a suite that could not start) is an error of the run.
	if runErr != nil && len(res.Failed) == 0 {
		return res, fmt.Errorf("kubecluster: e2e.test: %w, with no spec failed; its output is in %s", runErr, logPath)
	}
	return res, nil
}

// ginkgo -v's output, run by run: a line of dashes (after the "S" of any specs left out
// before it), the spec's full text, its timeline, then its end: "• [4.063 seconds]" when it
// passed, "• [FAILED] [...]", "S [SKIPPED] [...]" (skipped at run time) and so on.
var (
	e2eDelimiter = regexp.MustCompile(`-{30}$`)
	e2eEnd       = regexp.MustCompile(`^(•|S|P) (\[([A-Z]+)\] )?\[([0-9.]+) seconds\]$`)
	e2eSummary   = regexp.MustCompile(`^(Ran [0-9]+ of [0-9]+ Specs|SUCCESS!|FAIL!)`)
)

// followE2E copies the suite's output to logf as it comes, hands progress a line for each
// spec that ends and the suite's summary lines, and returns those.
func followE2E(r io.Reader, logf io.Writer, progress func(string)) string {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var summary []string
	var spec string
	var named bool
	ended := 0
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(logf, line)
		trimmed := strings.TrimSpace(line)
		if m := e2eEnd.FindStringSubmatch(trimmed); m != nil {
			verdict := "passed"
			if m[3] != "" {
				verdict = strings.ToLower(m[3])
			}
			ended++
			progress(fmt.Sprintf("e2e %d: %s in %ss: %s", ended, verdict, m[4], spec))
			continue
		}
		switch {
		case e2eSummary.MatchString(trimmed):
			summary = append(summary, trimmed)
			progress(trimmed)
		case e2eDelimiter.MatchString(trimmed):
			named = false
		case !named && trimmed != "":
			spec, named = trimmed, true
		}
	}
	return strings.Join(summary, "\n")
}

// junitSuites is the part of ginkgo's JUnit report read here.
type junitSuites struct {
	Suites []struct {
		Cases []struct {
			Name    string `xml:"name,attr"`
			Status  string `xml:"status,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
			Failure *struct {
				Text string `xml:",chardata"`
			} `xml:"failure"`
			Error *struct {
				Text string `xml:",chardata"`
			} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// ReadE2EReport reads the JUnit report e2e.test wrote (its --report-dir's junit_01.xml) and
// sorts the specs that focus selects into passed, failed and skipped; a spec skip matched
// gets that reason. The report lists every spec of the suite: the rest are left out.
func ReadE2EReport(path string, focus []string, skip []E2ESkip) (*E2EResult, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the e2e report: %w", err)
	}
	var report junitSuites
	if err := xml.Unmarshal(data, &report); err != nil {
		return nil, fmt.Errorf("parsing the e2e report %s: %w", path, err)
	}
	focusRE, err := regexp.Compile(strings.Join(focus, "|"))
	if err != nil {
		return nil, fmt.Errorf("e2e focus: %w", err)
	}
	skipREs := make([]*regexp.Regexp, len(skip))
	for i, s := range skip {
		if skipREs[i], err = regexp.Compile(s.Pattern); err != nil {
			return nil, fmt.Errorf("e2e skip %q: %w", s.Pattern, err)
		}
	}
	res := &E2EResult{Failures: map[string]string{}}
	for _, suite := range report.Suites {
		for _, tc := range suite.Cases {
			// "[It] <full text>"; the suite's own nodes ([SynchronizedBeforeSuite],
			// [ReportAfterSuite]) have other kinds: a failure there is the run's.
			spec, isIt := strings.CutPrefix(tc.Name, "[It] ")
			if isIt && !focusRE.MatchString(spec) {
				continue
			}
			switch tc.Status {
			case "passed":
				if isIt {
					res.Passed = append(res.Passed, spec)
				}
			case "skipped", "pending":
				if !isIt {
					continue
				}
				reason := ""
				for i, re := range skipREs {
					if re.MatchString(spec) {
						reason = skip[i].Reason
						break
					}
				}
				if reason == "" && tc.Skipped != nil {
					reason = strings.TrimPrefix(strings.TrimPrefix(tc.Skipped.Message, "skipped"), " - ")
				}
				if strings.TrimSpace(reason) == "" {
					// Neither skipped by us nor by itself: the suite ended first.
					reason = "not run: the suite stopped before it (timeout or interrupt)"
				}
				res.Skipped = append(res.Skipped, E2ESkipped{Spec: spec, Reason: strings.TrimSpace(reason)})
			default: // failed, timedout, interrupted, aborted, panicked
				res.Failed = append(res.Failed, tc.Name)
				msg := tc.Status
				switch {
				case tc.Failure != nil:
					msg = tc.Failure.Text
				case tc.Error != nil:
					msg = tc.Error.Text
				}
				res.Failures[tc.Name] = msg
			}
		}
	}
	sort.Strings(res.Passed)
	sort.Strings(res.Failed)
	sort.Slice(res.Skipped, func(i, j int) bool { return res.Skipped[i].Spec < res.Skipped[j].Spec })
	return res, nil
}

// RoutePodNetwork routes each node's podCIDR to the node in the underlay, where the control
// plane runs. The API server reaches pods directly: its pod and service proxy
// (/api/v1/namespaces/NS/pods/NAME/proxy, which the e2e suite reads its DNS probes' results
// through) dials the pod's IP. In a cluster of machines the API server's machine is a node of
// the pod network, running weft's DaemonSet; here it is the underlay, which has no kubelet
// and so no weft, and these routes stand in for that machine's share of the overlay, as a
// cloud's route table would. Pods' own traffic never takes them: every node is on the
// overlay.
func (c *Cluster) RoutePodNetwork(ctx context.Context) error {
	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("kubecluster: listing nodes: %w", err)
	}
	for _, obj := range list.Items {
		var n *cluster.Node
		for _, cand := range c.nodes {
			if cand.Name == obj.Name {
				n = cand.Node
			}
		}
		for _, cand := range c.windows {
			if cand.Name == obj.Name {
				n = cand
			}
		}
		if n == nil || obj.Spec.PodCIDR == "" {
			return fmt.Errorf("kubecluster: node %s: no podCIDR, or not a node of this cluster", obj.Name)
		}
		argv := []string{"ip", "-n", c.net.Underlay(), "route", "replace", obj.Spec.PodCIDR, "via", n.IP.String()}
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("kubecluster: routing %s to node %s in the underlay: %w: %s", obj.Spec.PodCIDR, n.Name,
				err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
