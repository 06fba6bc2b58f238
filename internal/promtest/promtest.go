// Package promtest serves the tests of what weft shows Prometheus. It finds Prometheus's
// programs, installing them where it may, and reads the README's table of metrics: the
// documented contract of weftd's /metrics, which the daemon's tests hold what weftd registers
// to, and dist's tests hold the alert rules and the dashboard to.
package promtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Binaries are the programs of Debian's prometheus package.
type Binaries struct {
	Server   string // prometheus
	Promtool string
}

// Need finds prometheus and promtool, installing them with tools/install-prometheus.sh of the
// repository at repo when either is missing, or skips the test: the script needs root to
// install anything.
func Need(t testing.TB, repo string) Binaries {
	t.Helper()
	find := func() (Binaries, error) {
		var b Binaries
		var err1, err2 error
		b.Server, err1 = exec.LookPath("prometheus")
		b.Promtool, err2 = exec.LookPath("promtool")
		return b, errors.Join(err1, err2)
	}
	if b, err := find(); err == nil {
		return b
	}
	script := filepath.Join(repo, "tools", "install-prometheus.sh")
	if out, err := exec.Command(script).CombinedOutput(); err != nil {
		t.Skipf("prometheus and promtool (Debian package prometheus) are missing and %s failed: %v\n%s", script, err, out)
	}
	b, err := find()
	if err != nil {
		t.Skipf("prometheus or promtool missing even after %s: %v", script, err)
	}
	return b
}

// TableHeader starts the header of the README's table of metrics.
const TableHeader = "| metric | type |"

// Metric is a metric as the README's table documents it.
type Metric struct {
	// Type is counter, gauge or histogram; empty for a row of a prefix (go_*).
	Type string
	// Labels maps each label to the values the README lists for it: none where the values
	// are open (a subnet) or listed elsewhere ("as above").
	Labels map[string][]string
}

// Metrics are the metrics of the README's table, by name. A name ending in * stands for
// every metric of that prefix.
type Metrics map[string]Metric

// Find returns the metric documented under name, or under a prefix of it.
func (ms Metrics) Find(name string) (Metric, bool) {
	if m, ok := ms[name]; ok {
		return m, true
	}
	for pattern, m := range ms {
		if prefix, ok := strings.CutSuffix(pattern, "*"); ok && strings.HasPrefix(name, prefix) {
			return m, true
		}
	}
	return Metric{}, false
}

// ReadMetrics reads the table of metrics of the README at path.
func ReadMetrics(path string) (Metrics, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the metrics of the README: %w", err)
	}
	ms, err := ParseMetrics(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ms, nil
}

// code is a `quoted` word of Markdown; a colon right after it makes it a label whose
// values follow.
var code = regexp.MustCompile("`([^`]+)`(:?)")

// ParseMetrics parses the table of metrics of a README: the table whose header starts with
// TableHeader, with the columns metric, type, labels and meaning. The labels column says
// "`label`" for a label, "`label`: `value`, `value`" for one and its values, and separates
// labels with values by semicolons.
func ParseMetrics(readme string) (Metrics, error) {
	_, table, ok := strings.Cut(readme, "\n"+TableHeader)
	if !ok {
		return nil, fmt.Errorf("no table of metrics (a header %q)", TableHeader)
	}
	ms := Metrics{}
	lines := strings.Split(table, "\n")[1:] // the rest of the header line
	for n, line := range lines {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if n == 0 {
			continue // the delimiter row
		}
		cells := strings.Split(strings.Trim(line, "| "), "|")
		if len(cells) != 4 {
			return nil, fmt.Errorf("metrics table row %d: %d columns, want 4: %s", n, len(cells), line)
		}
		names := code.FindAllStringSubmatch(cells[0], -1)
		if len(names) == 0 {
			return nil, fmt.Errorf("metrics table row %d: no `name`: %s", n, line)
		}
		m := Metric{Type: strings.TrimSpace(cells[1]), Labels: parseLabels(cells[2])}
		for _, name := range names {
			pattern := strings.HasSuffix(name[1], "*")
			switch {
			case pattern && m.Type != "":
				return nil, fmt.Errorf("metrics table row %d: %s is a prefix and has a type, %s", n, name[1], m.Type)
			case !pattern && m.Type != "counter" && m.Type != "gauge" && m.Type != "histogram":
				return nil, fmt.Errorf("metrics table row %d: %s has type %q, want counter, gauge or histogram", n, name[1], m.Type)
			}
			if _, dup := ms[name[1]]; dup {
				return nil, fmt.Errorf("metrics table row %d: %s is documented twice", n, name[1])
			}
			ms[name[1]] = m
		}
	}
	if len(ms) == 0 {
		return nil, errors.New("the table of metrics is empty")
	}
	return ms, nil
}

// parseLabels parses a labels cell of the table.
func parseLabels(cell string) map[string][]string {
	labels := map[string][]string{}
	for part := range strings.SplitSeq(cell, ";") {
		label := "" // the label whose values follow, once a colon has named it
		for _, m := range code.FindAllStringSubmatch(part, -1) {
			switch {
			case m[2] == ":":
				label = m[1]
				labels[label] = nil
			case label != "":
				labels[label] = append(labels[label], m[1])
			default:
				labels[m[1]] = nil
			}
		}
	}
	return labels
}
