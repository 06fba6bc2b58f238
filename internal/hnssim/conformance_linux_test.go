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

// hcnVersions are the HNS versions the simulator reports to hcsshim's tests (through
// vmcompute's HNSCall GET /globals/version), each with the tests it is not to pass there and
// why. hcsshim tells features apart by version (hcn/hcnglobals.go, hcnsupport.go), and several
// tests use one without asking: at a version without it, HNS refuses the call and the test
// fails, as it would on that Windows. 15.4, the newest version hcsshim v0.15.0 names
// (ModifyLoadbalancerVersion, AccelnetVersion), has them all. 10.0 is a Windows Server 2019
// build's (before 10.3's VXLAN port); there the simulator refuses each feature newer than it,
// and the tests of those features fail with the refusal.
var hcnVersions = []struct {
	version windows.Version
	leftOut map[string]string
}{
	{windows.Version{Major: 15, Minor: 4}, map[string]string{}},
	{windows.Version{Major: 10, Minor: 0}, map[string]string{
		"TestAddDSRLoadBalancer":             "a DSR load balancer needs HNS 9.3 to 9.x or 10.2 on (DSRVersion)",
		"TestAddL4WfpProxyPolicyOnEndpoint":  "an endpoint's L4WFPPROXY policy needs HNS 13.2 (L4WfpProxyPolicyVersion)",
		"TestApplyTierAclPolicyOnEndpoint":   "an endpoint's TierAcl policy needs HNS 14.0 (TierAclPolicyVersion)",
		"TestAddRemoveNetworACLPolicy":       "a network's NetworkACL policy needs HNS 15.0 (NetworkACLPolicyVersion)",
		"TestCreateUpdateDeleteLoadBalancer": "HcnModifyLoadBalancer needs HNS 15.4 (ModifyLoadbalancerVersion)",
	}},
}

// hcnTests is how many tests hcsshim v0.15.0's hcn package has (-test.list), and
// hcnTableTests those of hcn/hcnsupport_test.go, which compare hcsshim's own feature tables
// with themselves (GetSupportedFeatures against the XxxSupported functions, and
// isFeatureSupported against literal versions): they ask HNS its version and nothing else, so
// they are counted apart from the tests that exercise the simulator. A new hcsshim changes
// both numbers, and this test says so.
const (
	hcnTests      = 78
	hcnTableTests = 18
)

// TestHcsshimConformance runs hcsshim v0.15.0's own hcn integration tests (written against
// real HNS, built for Windows with -tags integration) under Wine against this simulator, at
// each of hcnVersions, and fails on every test that fails or skips and is not left out for
// that version, and on every left-out test that passes. It needs Wine (tools/wine/setup.sh
// installs it as root) and skips without it.
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
	t.Logf("hcsshim's hcn tests built in %v", time.Since(start).Round(time.Second))
	tables, err := tableTests()
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != hcnTableTests {
		t.Errorf("hcn/hcnsupport_test.go has %d tests, want %d: update hcnTableTests", len(tables), hcnTableTests)
	}
	for _, hv := range hcnVersions {
		t.Run("HNS "+hv.version.String(), func(t *testing.T) {
			runHcnTests(t, repo, bin, hv.version, hv.leftOut, tables)
		})
	}
}

// runHcnTests runs hcn.test (bin) against a simulator of HNS version v and checks the
// results: see TestHcsshimConformance.
func runHcnTests(t *testing.T, repo, bin string, v windows.Version, leftOut map[string]string, tables []string) {
	start := time.Now()
	hns := hnstest.New(hnstest.Options{Version: v})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() { _ = New(hns, slog.New(slog.NewTextHandler(io.Discard, nil))).Serve(l) }()

	// A prefix of the run's own: hcsshim's namespace tests write the registry.
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
	if len(all) != hcnTests {
		t.Fatalf("hcn.test lists %d tests, want hcsshim v0.15.0's %d: update hcnTests", len(all), hcnTests)
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

	var passed, tablesPassed, failed, out []string
	for _, name := range all {
		reason, left := leftOut[name]
		switch r := results[name]; {
		case left:
			out = append(out, name)
			if r == "PASS" {
				t.Errorf("%s passes: take it off the left-out list (%s)", name, reason)
			}
		case r == "PASS" && slices.Contains(tables, name):
			tablesPassed = append(tablesPassed, name)
		case r == "PASS":
			passed = append(passed, name)
		default: // a skip too: every test here runs against real HNS's answers
			failed = append(failed, name)
			t.Errorf("%s: %s\n%s", name, r, logs[name])
		}
	}
	t.Logf("hcsshim hcn tests against the simulator (HNS %s): %d of the simulator passed, %d of hcsshim's feature tables passed, %d failed or skipped, %d left out (run %s)",
		v, len(passed), len(tablesPassed), len(failed), len(out), time.Since(start).Round(time.Second))
	for _, name := range out {
		t.Logf("left out: %s (%s): %s", name, leftOut[name], results[name])
	}
}

// tableTests are the tests of hcsshim's hcn/hcnsupport_test.go, read from the module's source.
func tableTests() ([]string, error) {
	dir, err := exec.Command(goTool(), "list", "-m", "-f", "{{.Dir}}", "github.com/Microsoft/hcsshim").Output()
	if err != nil {
		return nil, fmt.Errorf("finding hcsshim's source: %w", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(dir)), "hcn", "hcnsupport_test.go"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`).FindAllSubmatch(src, -1) {
		names = append(names, string(m[1]))
	}
	return names, nil
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
