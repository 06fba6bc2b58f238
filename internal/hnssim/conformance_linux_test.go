package hnssim

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/internal/winetest"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

// conformanceVersion is the HNS version the simulator reports to hcsshim's tests (through
// vmcompute's HNSCall GET /globals/version). hcsshim tells features apart by version
// (hcn/hcnglobals.go, hcnsupport.go), and several tests use one without asking
// (TestAddL4WfpProxyPolicyOnEndpoint: 13.2, TestApplyTierAclPolicyOnEndpoint: 14.0,
// TestAddRemoveNetworACLPolicy: 15.0, TestCreateUpdateDeleteLoadBalancer: 15.4): 15.4, the
// newest version hcsshim v0.15.0 names (ModifyLoadbalancerVersion, AccelnetVersion), has
// them all. The simulator refuses each feature
// below its version; hnstest's and this package's unit tests check those gates.
var conformanceVersion = windows.Version{Major: 15, Minor: 4}

// leftOut are hcsshim's hcn tests the simulator does not pass, each with why: none now.
// Every test of networks, endpoints, namespaces, policies, SDN routes, load balancers and
// HNS v1 passes.
var leftOut = map[string]string{}

// TestHcsshimConformance runs hcsshim v0.15.0's own hcn integration tests (written against
// real HNS, built for Windows with -tags integration) under Wine against this simulator,
// and fails on every failing test not in leftOut, and on every test of leftOut that passes.
// It needs Wine (tools/wine/setup.sh installs it as root) and skips without it.
func TestHcsshimConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs hcsshim's hcn tests under Wine")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	winetest.Need(t, repo)
	start := time.Now()
	bin := filepath.Join(t.TempDir(), "hcn.test")
	build := exec.Command(goTool(), "test", "-c", "-tags", "integration", "-o", bin, "github.com/Microsoft/hcsshim/hcn")
	build.Dir = repo
	build.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building hcsshim's hcn tests: %v\n%s", err, out)
	}
	built := time.Since(start)

	hns := hnstest.New(hnstest.Options{Version: conformanceVersion})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() { _ = New(hns, slog.New(slog.NewTextHandler(io.Discard, nil))).Serve(l) }()

	// A prefix of the test's own: hcsshim's namespace tests write the registry.
	prefix := winetest.Prefix(t, repo, "wine-hcn-")
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(repo, "tools", "wine", "exec.sh"), append([]string{bin}, args...)...)
		cmd.Env = append(os.Environ(), "WINEPREFIX="+prefix, "WEFT_HNS_ADDR="+l.Addr().String())
		out, _ := cmd.CombinedOutput() // a failing test, or a panic, exits non-zero: the output tells
		if ctx.Err() != nil {
			t.Fatalf("hcn.test %v: timed out\n%s", args, out)
		}
		return string(out)
	}
	all := testNames(run("-test.list", "."))
	if len(all) < 50 {
		t.Fatalf("hcn.test lists %d tests, want hcsshim v0.15.0's 79", len(all))
	}
	for name := range leftOut {
		if !slices.Contains(all, name) {
			t.Errorf("left out %s: hcn.test has no such test", name)
		}
	}

	// One run, again for the rest when a test kills the process (a panic): that test fails.
	results := map[string]string{}
	logs := map[string]string{}
	for pending := all; len(pending) > 0; {
		out := run("-test.v", "-test.run", "^("+strings.Join(pending, "|")+")$")
		got, running := parseResults(out, logs)
		for name, r := range got {
			results[name] = r
		}
		if running != "" && results[running] == "" {
			results[running] = "FAIL"
			logs[running] += "(the test ended the process)\n" + tail(out, 40)
		}
		rest := slices.DeleteFunc(slices.Clone(pending), func(n string) bool { return results[n] != "" })
		if len(rest) == len(pending) {
			t.Fatalf("hcn.test ran none of %d tests:\n%s", len(pending), tail(out, 40))
		}
		pending = rest
	}

	var passed, failed, skipped, out []string
	for _, name := range all {
		reason, left := leftOut[name]
		switch r := results[name]; {
		case left:
			out = append(out, name)
			if r == "PASS" {
				t.Errorf("%s passes: take it off the left-out list (%s)", name, reason)
			}
		case r == "PASS":
			passed = append(passed, name)
		case r == "SKIP":
			skipped = append(skipped, name)
		default:
			failed = append(failed, name)
			t.Errorf("%s: %s\n%s", name, r, logs[name])
		}
	}
	t.Logf("hcsshim hcn tests against the simulator (HNS %s): %d passed, %d failed, %d skipped, %d left out (build %s, run %s)",
		conformanceVersion, len(passed), len(failed), len(skipped), len(out), built.Round(time.Second), (time.Since(start) - built).Round(time.Second))
	for _, name := range skipped {
		t.Logf("skipped: %s\n%s", name, logs[name])
	}
	for _, name := range out {
		t.Logf("left out: %s (%s): %s", name, leftOut[name], results[name])
	}
}

// goTool is the go command of the toolchain running the test.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// testNames reads the names -test.list prints, one a line.
func testNames(out string) []string {
	var names []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "Test") && !strings.ContainsAny(l, " \t") {
			names = append(names, l)
		}
	}
	return names
}

var resultLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+)`)

// parseResults reads -test.v output: each top-level test's result, its lines into logs, and
// the test that was running when the output ended without its result, if any.
func parseResults(out string, logs map[string]string) (map[string]string, string) {
	results := map[string]string{}
	running := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if name, found := strings.CutPrefix(l, "=== RUN   "); found {
			if !strings.Contains(name, "/") {
				running = name
			}
			continue
		}
		if m := resultLine.FindStringSubmatch(l); m != nil && !strings.Contains(m[2], "/") {
			results[m[2]] = m[1]
			if m[2] == running {
				running = ""
			}
			continue
		}
		if running != "" {
			logs[running] += l + "\n"
		}
	}
	return results, running
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := bytes.Split([]byte(strings.TrimRight(s, "\n")), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("%s\n", bytes.Join(lines, []byte("\n")))
}
