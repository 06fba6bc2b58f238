package dist_test

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weftnet/weft/internal/promtest"
)

// selector is a metric selector of a PromQL expression.
type selector struct {
	name     string // empty for {…} alone
	matchers []matcher
}

// matcher is a label matcher of a selector: label op "value".
type matcher struct{ label, op, value string }

// Words of PromQL that are not metric names where they stand bare: aggregations, which may
// be followed by by (…) rather than their argument, keywords and operators. Functions are
// followed by their parenthesis.
var promqlWords = []string{
	"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
	"topk", "quantile", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
	"and", "or", "unless", "atan2", "offset", "inf", "nan",
}

// labelLists are the words followed by a list of label names in parentheses.
var labelLists = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}

// selectors finds the metric selectors of a PromQL expression, well enough to hold their
// names and labels to the README: it passes over strings, numbers, ranges and subqueries in
// brackets, and the label lists of by, without, on, ignoring, group_left and group_right, and
// takes every other bare word that is not followed by a parenthesis (a function) nor one of
// promqlWords to be a metric's name. It checks no syntax: promtool does that.
func selectors(expr string) ([]selector, error) {
	var sels []selector
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			_, n, err := promqlString(expr[i:])
			if err != nil {
				return nil, err
			}
			i += n
		case c == '[':
			n := strings.IndexByte(expr[i:], ']')
			if n < 0 {
				return nil, fmt.Errorf("%q: [ without ]", expr)
			}
			i += n + 1
		case c == '{':
			ms, n, err := matchers(expr[i:])
			if err != nil {
				return nil, fmt.Errorf("%q: %w", expr, err)
			}
			sels = append(sels, selector{matchers: ms})
			i += n
		case c >= '0' && c <= '9' || c == '.':
			i++
			for i < len(expr) && (isWordByte(expr[i]) || expr[i] == '.') {
				i++ // a number, a duration (offset 5m) or a hexadecimal
			}
		case isWordByte(c):
			end := i
			for end < len(expr) && isWordByte(expr[end]) {
				end++
			}
			word := expr[i:end]
			next := end + len(expr[end:]) - len(strings.TrimLeft(expr[end:], " \t\n"))
			i = end
			switch {
			case slices.Contains(labelLists, word):
				if next < len(expr) && expr[next] == '(' {
					n := strings.IndexByte(expr[next:], ')')
					if n < 0 {
						return nil, fmt.Errorf("%q: %s ( without )", expr, word)
					}
					i = next + n + 1
				}
			case slices.Contains(promqlWords, word) || next < len(expr) && expr[next] == '(':
			default:
				s := selector{name: word}
				if next < len(expr) && expr[next] == '{' {
					ms, n, err := matchers(expr[next:])
					if err != nil {
						return nil, fmt.Errorf("%q: %w", expr, err)
					}
					s.matchers, i = ms, next+n
				}
				sels = append(sels, s)
			}
		default:
			i++
		}
	}
	return sels, nil
}

func isWordByte(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// matcherRE is one label matcher and what separates it from the next.
var matcherRE = regexp.MustCompile(`^\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*`)

// matchers parses the label matchers of s, which starts with {, and says how long they are.
func matchers(s string) ([]matcher, int, error) {
	var ms []matcher
	i := 1
	for {
		rest := strings.TrimLeft(s[i:], " \t\n,")
		i = len(s) - len(rest)
		if strings.HasPrefix(rest, "}") {
			return ms, i + 1, nil
		}
		m := matcherRE.FindStringSubmatch(rest)
		if m == nil {
			return nil, 0, fmt.Errorf("not a label matcher: %.20q", rest)
		}
		value, n, err := promqlString(rest[len(m[0]):])
		if err != nil {
			return nil, 0, err
		}
		ms = append(ms, matcher{label: m[1], op: m[2], value: value})
		i += len(m[0]) + n
	}
}

// promqlString reads the string literal s starts with: its value and its length.
func promqlString(s string) (string, int, error) {
	if s == "" {
		return "", 0, fmt.Errorf("a string expected at the end")
	}
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == '\\' && q != '`':
			i++
		case s[i] == q:
			lit := s[:i+1]
			if q == '\'' { // Go has no single-quoted strings; PromQL's are double-quoted ones
				lit = `"` + strings.ReplaceAll(lit[1:i], `"`, `\"`) + `"`
			}
			v, err := strconv.Unquote(lit)
			if err != nil {
				return "", 0, fmt.Errorf("%s: %w", s[:i+1], err)
			}
			return v, i + 1, nil
		}
	}
	return "", 0, fmt.Errorf("unterminated string %.20q", s)
}

// histogramSuffixes are the series a histogram is exported as.
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// checkSelector holds a selector to the README's table of metrics: a documented metric (or
// up, the scrape's, with its job and instance), with labels the table gives it, and those
// matched against fixed values with values the table lists, where it lists any. It returns
// what is wrong.
func checkSelector(doc promtest.Metrics, s selector) []string {
	if s.name == "" {
		return []string{fmt.Sprintf("%v: a selector without a metric name cannot be checked", s.matchers)}
	}
	target := []string{"job", "instance"} // labels of every series, from the scrape
	m, ok := doc.Find(s.name)
	if s.name == "up" {
		m, ok = promtest.Metric{}, true
	}
	for _, suffix := range histogramSuffixes {
		if base, cut := strings.CutSuffix(s.name, suffix); !ok && cut {
			if h, found := doc.Find(base); found && h.Type == "histogram" {
				m, ok = h, true
				if suffix == "_bucket" {
					target = append(target, "le")
				}
			}
		}
	}
	if !ok {
		return []string{s.name + " is not in the README's table of metrics"}
	}
	var problems []string
	for _, mt := range s.matchers {
		values, labelled := m.Labels[mt.label]
		switch {
		case slices.Contains(target, mt.label):
		case !labelled:
			problems = append(problems, fmt.Sprintf("%s has no label %s", s.name, mt.label))
		case len(values) > 0 && !strings.Contains(mt.value, "$"):
			for _, v := range matchedValues(mt) {
				if !slices.Contains(values, v) {
					problems = append(problems, fmt.Sprintf("%s's label %s is never %q (the README lists %v)", s.name, mt.label, v, values))
				}
			}
		}
	}
	return problems
}

// alternatives is a regular expression that is only words or'ed together.
var alternatives = regexp.MustCompile(`^\w+(\|\w+)*$`)

// matchedValues lists the fixed values a matcher names: its value, or the words of a
// regular expression of alternatives; none for other regular expressions.
func matchedValues(m matcher) []string {
	switch {
	case m.op == "=" || m.op == "!=":
		return []string{m.value}
	case alternatives.MatchString(m.value):
		return strings.Split(m.value, "|")
	}
	return nil
}

// checkExpr holds every selector of a PromQL expression to the README, and returns what is
// wrong and the metrics it uses.
func checkExpr(doc promtest.Metrics, expr string) (problems, metrics []string) {
	sels, err := selectors(expr)
	if err != nil {
		return []string{err.Error()}, nil
	}
	if len(sels) == 0 {
		return []string{fmt.Sprintf("%q selects no metric", expr)}, nil
	}
	for _, s := range sels {
		problems = append(problems, checkSelector(doc, s)...)
		metrics = append(metrics, s.name)
	}
	return problems, metrics
}

// TestSelectors: the selectors of expressions in the shapes the rules and the dashboard use.
func TestSelectors(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []selector
	}{
		{`up{job=~"weft.*"} == 0`, []selector{{"up", []matcher{{"job", "=~", "weft.*"}}}}},
		{`weft_ready == 0`, []selector{{name: "weft_ready"}}},
		{`sum without (backend) (weft_peers{state="skipped"}) > 0`,
			[]selector{{"weft_peers", []matcher{{"state", "=", "skipped"}}}}},
		{`increase(weft_errors_total{operation="converge"}[5m]) > 0`,
			[]selector{{"weft_errors_total", []matcher{{"operation", "=", "converge"}}}}},
		{"increase(a{result=\"error\"}[10m]) > 0\nunless on (job, instance)\nincrease(a{result=~'success|changed', x!=`y`}[10m]) > 0",
			[]selector{{"a", []matcher{{"result", "=", "error"}}}, {"a", []matcher{{"result", "=~", "success|changed"}, {"x", "!=", "y"}}}}},
		{`(weft_lease_expiry_timestamp_seconds > 0) - time() < 1.8e3 and on(job) b offset 5m`,
			[]selector{{name: "weft_lease_expiry_timestamp_seconds"}, {name: "b"}}},
		{`histogram_quantile(0.99, sum by (instance, le) (rate(h_bucket{job=~"$job", instance=~"a\"}"}[$__rate_interval])))`,
			[]selector{{"h_bucket", []matcher{{"job", "=~", "$job"}, {"instance", "=~", `a"}`}}}}},
		{`min by(family)(x) / max without(instance)(y{ family = "IPv4" ,})`,
			[]selector{{name: "x"}, {"y", []matcher{{"family", "=", "IPv4"}}}}},
		{`topk(3, sum by (kind) (rate(c[5m:1m])))`, []selector{{name: "c"}}},
		{`{__name__="up"}`, []selector{{matchers: []matcher{{"__name__", "=", "up"}}}}},
	} {
		got, err := selectors(tc.expr)
		if err != nil {
			t.Errorf("selectors(%q): %v", tc.expr, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("selectors(%q) =\n\t%v, want\n\t%v", tc.expr, got, tc.want)
		}
	}
	for _, expr := range []string{`a{b="c}`, `a{b}`, `a[5m`, `sum by (a`} {
		if got, err := selectors(expr); err == nil {
			t.Errorf("selectors(%q) = %v, want an error", expr, got)
		}
	}
}

// TestCheckSelector: what the README's table allows, on a table of three metrics.
func TestCheckSelector(t *testing.T) {
	doc := promtest.Metrics{
		"weft_errors_total": {Type: "counter", Labels: map[string][]string{"operation": {"renew", "converge"}}},
		"weft_drift_total":  {Type: "counter", Labels: map[string][]string{"kind": nil}},
		"weft_delay":        {Type: "histogram", Labels: map[string][]string{}},
	}
	for expr, wantProblems := range map[string]int{
		`up{job="weft", instance="a"}`:                                    0,
		`weft_errors_total{operation=~"renew|converge", job="weft"}`:      0,
		`weft_errors_total{operation=~"renew.*"}`:                         0, // not checked
		`weft_errors_total{operation=~"$op"}`:                             0, // a dashboard's variable
		`weft_drift_total{kind="anything"}`:                               0, // values not listed
		`weft_delay_bucket{le="0.5"} + weft_delay_sum + weft_delay_count`: 0,
		`weft_errors_total{operation="renwe"}`:                            1,
		`weft_errors_total{operation=~"renew|acquire|get"}`:               2,
		`weft_errors_total{op="renew"}`:                                   1,
		`weft_drift_total_bucket`:                                         1, // not a histogram
		`weft_delay_sum{le="1"}`:                                          1,
		`weft_erors_total`:                                                1,
		`up{node="a"}`:                                                    1,
		`{__name__="weft_delay"}`:                                         1,
	} {
		sels, err := selectors(expr)
		if err != nil {
			t.Fatalf("selectors(%q): %v", expr, err)
		}
		var problems []string
		for _, s := range sels {
			problems = append(problems, checkSelector(doc, s)...)
		}
		if len(problems) != wantProblems {
			t.Errorf("%s: %d problems %q, want %d", expr, len(problems), problems, wantProblems)
		}
	}
}
