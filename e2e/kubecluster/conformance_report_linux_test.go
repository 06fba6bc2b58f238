package kubecluster

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// junitSample is a JUnit report in the form ginkgo writes for e2e.test: every spec of the
// suite, those left out by focus or skip as skipped without a message, the suite's own
// nodes beside the specs.
const junitSample = `<?xml version="1.0" encoding="UTF-8"?>
  <testsuites tests="7" disabled="5" errors="0" failures="1" time="12.5">
      <testsuite name="Kubernetes e2e suite" package="/e2e" tests="7" disabled="0" skipped="5" errors="0" failures="1" time="12.5" timestamp="2026-11-26T03:00:00">
          <testcase name="[It] [sig-network] DNS should provide DNS for the cluster [Conformance]" classname="Kubernetes e2e suite" status="passed" time="4.2"></testcase>
          <testcase name="[It] [sig-network] Services should serve a basic endpoint from pods [Conformance]" classname="Kubernetes e2e suite" status="failed" time="3.1">
              <failure message="" type="failed">[FAILED] service not reachable&#xA;In [It] at: service.go:800</failure>
          </testcase>
          <testcase name="[It] [sig-network] Services should be able to create an internal type load balancer" classname="Kubernetes e2e suite" status="skipped" time="0">
              <skipped message="skipped"></skipped>
          </testcase>
          <testcase name="[It] [sig-network] Services should work after restarting kube-proxy [Disruptive]" classname="Kubernetes e2e suite" status="skipped" time="0.1">
              <skipped message="skipped - Only supported for providers [gce aws local azure] (not skeleton)"></skipped>
          </testcase>
          <testcase name="[It] [sig-network] Networking should provide Internet connection for containers [Feature:Networking-IPv4]" classname="Kubernetes e2e suite" status="skipped" time="0">
              <skipped message="skipped"></skipped>
          </testcase>
          <testcase name="[It] [sig-storage] Volumes should do something [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0">
              <skipped message="skipped"></skipped>
          </testcase>
          <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1"></testcase>
      </testsuite>
  </testsuites>`

func TestReadE2EReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "junit_01.xml")
	if err := os.WriteFile(path, []byte(junitSample), 0o644); err != nil {
		t.Fatal(err)
	}
	focus := []string{`\[sig-network\].*\[Conformance\]`, `\[Feature:Networking-IPv4\]`, `\[sig-network\] Services `}
	skip := []E2ESkip{
		{`load balancer|LoadBalancer`, "no cloud"},
		{`\[Feature:Networking-IPv4\]`, "no Internet"},
	}
	res, err := ReadE2EReport(path, focus, skip)
	if err != nil {
		t.Fatal(err)
	}
	wantPassed := []string{"[sig-network] DNS should provide DNS for the cluster [Conformance]"}
	if !reflect.DeepEqual(res.Passed, wantPassed) {
		t.Errorf("passed %q, want %q", res.Passed, wantPassed)
	}
	wantFailed := []string{"[It] [sig-network] Services should serve a basic endpoint from pods [Conformance]"}
	if !reflect.DeepEqual(res.Failed, wantFailed) {
		t.Errorf("failed %q, want %q", res.Failed, wantFailed)
	}
	if msg := res.Failures[wantFailed[0]]; !strings.Contains(msg, "service not reachable") {
		t.Errorf("failure message %q, want the report's", msg)
	}
	// The storage spec is out of focus; each skipped one has its reason: the skip list's,
	// or the suite's own message.
	wantSkipped := []E2ESkipped{
		{"[sig-network] Networking should provide Internet connection for containers [Feature:Networking-IPv4]", "no Internet"},
		{"[sig-network] Services should be able to create an internal type load balancer", "no cloud"},
		{"[sig-network] Services should work after restarting kube-proxy [Disruptive]", "Only supported for providers [gce aws local azure] (not skeleton)"},
	}
	if !reflect.DeepEqual(res.Skipped, wantSkipped) {
		t.Errorf("skipped %q, want %q", res.Skipped, wantSkipped)
	}
}

func TestReadE2EReportSuiteFailure(t *testing.T) {
	// A failure of the suite's own setup fails every spec's run: it must show as a failure.
	path := filepath.Join(t.TempDir(), "junit_01.xml")
	report := strings.Replace(junitSample, `<testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1"></testcase>`,
		`<testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="failed" time="1"><failure type="failed">no nodes</failure></testcase>`, 1)
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := ReadE2EReport(path, []string{`\[sig-network\]`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Failures["[SynchronizedBeforeSuite]"] != "no nodes" {
		t.Errorf("failures %q, want the suite setup's", res.Failures)
	}
}

func TestFollowE2E(t *testing.T) {
	// ginkgo -v's output: specs left out print an S each before the next delimiter.
	out := `Running Suite: Kubernetes e2e suite
SSSS------------------------------
[sig-network] DNS should provide DNS for the cluster [Conformance]
k8s.io/kubernetes/test/e2e/network/dns.go:54
  STEP: Creating a kubernetes client @ 11/26/26 03:00:00.000
• [4.063 seconds]
------------------------------
SS------------------------------
[sig-network] Services should serve a basic endpoint from pods [Conformance]
k8s.io/kubernetes/test/e2e/network/service.go:733
  [FAILED] service not reachable
• [FAILED] [3.100 seconds]
[sig-network] Services should serve a basic endpoint from pods [Conformance]
------------------------------

Ran 2 of 7000 Specs in 9.000 seconds
FAIL! -- 1 Passed | 1 Failed | 0 Pending | 6998 Skipped
`
	var log strings.Builder
	var progress []string
	summary := followE2E(strings.NewReader(out), &log, func(l string) { progress = append(progress, l) })
	if log.String() != out {
		t.Errorf("log %q, want the whole output", log.String())
	}
	want := []string{
		"e2e 1: passed in 4.063s: [sig-network] DNS should provide DNS for the cluster [Conformance]",
		"e2e 2: failed in 3.100s: [sig-network] Services should serve a basic endpoint from pods [Conformance]",
		"Ran 2 of 7000 Specs in 9.000 seconds",
		"FAIL! -- 1 Passed | 1 Failed | 0 Pending | 6998 Skipped",
	}
	if !reflect.DeepEqual(progress, want) {
		t.Errorf("progress:\n%s\nwant:\n%s", strings.Join(progress, "\n"), strings.Join(want, "\n"))
	}
	if summary != strings.Join(want[2:], "\n") {
		t.Errorf("summary %q", summary)
	}
}

// TestSkipProblems: a spec skipped or not reached that the list lacks is a problem, and so is
// a listed spec in focus that was not skipped; a listed spec out of focus is not.
func TestSkipProblems(t *testing.T) {
	res := &E2EResult{Skipped: []E2ESkipped{
		{Spec: "[sig-network] A listed [Feature:X]", Reason: "ours"},
		{Spec: "[sig-network] B skipped itself", Reason: "no SSH"},
		{Spec: "[sig-network] C never reached", Reason: "not run: the suite stopped before it (timeout or interrupt)"},
	}}
	skipped := map[string]string{
		"[sig-network] A listed [Feature:X]":   "ours",
		"[sig-network] D listed, ran":          "stale",
		"[sig-storage] E listed, out of focus": "elsewhere",
	}
	got := skipProblems(res, []string{`\[sig-network\]`}, skipped)
	want := []string{"B skipped itself", "C never reached", "D listed, ran"}
	if len(got) != len(want) {
		t.Fatalf("problems %q, want one each for %q", got, want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("problem %d: %q, want one about %q", i, got[i], w)
		}
	}
}
