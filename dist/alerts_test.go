package dist_test

import (
	"encoding/json"
	"fmt"
	"image"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/weftnet/weft/internal/promtest"
)

// severities are the values of the rules' severity label.
var severities = []string{"critical", "warning"}

// ruleFile is a Prometheus rule file, as far as these tests read and write one.
type ruleFile struct {
	Groups []ruleGroup `json:"groups"`
}

type ruleGroup struct {
	Name  string `json:"name"`
	Rules []rule `json:"rules"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ruleTests is a file of unit tests for `promtool test rules`.
type ruleTests struct {
	RuleFiles          []string `json:"rule_files"`
	EvaluationInterval string   `json:"evaluation_interval"`
	Tests              []struct {
		Name        string `json:"name"`
		Interval    string `json:"interval"`
		InputSeries []struct {
			Series string `json:"series"`
			Values string `json:"values"`
		} `json:"input_series"`
		AlertRuleTest []struct {
			EvalTime  string `json:"eval_time"`
			Alertname string `json:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `json:"exp_labels"`
				ExpAnnotations map[string]string `json:"exp_annotations"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// readYAML decodes a YAML file, refusing fields the type does not have: a misspelt field
// (exp_alert) would otherwise be dropped, here and by promtool alike.
func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(readFile(t, path), into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// readAlerts reads the alert rules, every group's.
func readAlerts(t *testing.T) []rule {
	t.Helper()
	var rf ruleFile
	readYAML(t, alertRules, &rf)
	var rules []rule
	for _, g := range rf.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// promtool runs promtool (installed by tools/install-prometheus.sh; the test skips without
// it) in dist/, failing the test with its output if it fails.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	bin := promtest.Need(t, "..").Promtool
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// readmeMetrics reads the README's table of metrics: the contract the rules and the
// dashboard are held to. It is the contract rather than what daemon/metrics.go registers
// because the table may run ahead of the code, for metrics being added elsewhere that the
// rules already use; daemon's TestMetricsDocumented holds the table to the code, and names
// every metric it documents ahead.
func readmeMetrics(t *testing.T) promtest.Metrics {
	t.Helper()
	doc, err := promtest.ReadMetrics(readme)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestAlertRules: promtool finds the rules valid, and their unit tests pass.
func TestAlertRules(t *testing.T) {
	promtool(t, "check", "rules", alertRules)
	promtool(t, "test", "rules", alertTests)
}

// TestAlertRulesShape: every rule is an alert with a severity and an annotation that says
// what it is and one that says where to look; the unit tests are of this file and see each
// alert fire and each stay silent; the README's table of alerts lists them all.
func TestAlertRulesShape(t *testing.T) {
	severity := map[string]string{}
	for _, r := range readAlerts(t) {
		if r.Alert == "" {
			t.Errorf("a rule that is not an alert: %s", r.Expr)
			continue
		}
		if _, dup := severity[r.Alert]; dup {
			t.Errorf("alert %s: defined twice", r.Alert)
		}
		severity[r.Alert] = r.Labels["severity"]
		if !slices.Contains(severities, r.Labels["severity"]) {
			t.Errorf("alert %s: severity %q, want one of %v", r.Alert, r.Labels["severity"], severities)
		}
		for _, a := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("alert %s: no %s", r.Alert, a)
			}
		}
	}
	if len(severity) == 0 {
		t.Fatalf("%s: no alerts", alertRules)
	}

	var rt ruleTests
	readYAML(t, alertTests, &rt)
	if want := filepath.Base(alertRules); !slices.Equal(rt.RuleFiles, []string{want}) {
		t.Errorf("%s tests %v, want %s", alertTests, rt.RuleFiles, want)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range rt.Tests {
		for _, at := range tc.AlertRuleTest {
			if _, ok := severity[at.Alertname]; !ok {
				t.Errorf("%s: test %q: no alert %s", alertTests, tc.Name, at.Alertname)
			}
			if len(at.ExpAlerts) > 0 {
				fires[at.Alertname] = true
			} else {
				silent[at.Alertname] = true
			}
		}
	}
	for name := range severity {
		if !fires[name] || !silent[name] {
			t.Errorf("%s: alert %s is seen firing: %v, seen silent: %v; want both", alertTests, name, fires[name], silent[name])
		}
	}

	// The README's table: | `Alert` | severity | fires when |
	_, table, ok := strings.Cut(string(readFile(t, readme)), "\n| alert | severity |")
	if !ok {
		t.Fatalf("%s: no table of alerts", readme)
	}
	row := regexp.MustCompile("^\\| `(\\w+)` \\| (\\w+) \\|")
	documented := map[string]string{}
	for _, line := range strings.Split(table, "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("%s: table of alerts: cannot read %s", readme, line)
			continue
		}
		documented[m[1]] = m[2]
	}
	for name, sev := range severity {
		if documented[name] != sev {
			t.Errorf("%s: the table of alerts gives %s severity %q; the rules say %s", readme, name, documented[name], sev)
		}
	}
	for name := range documented {
		if _, ok := severity[name]; !ok {
			t.Errorf("%s: the table of alerts lists %s, which is not a rule", readme, name)
		}
	}
}

// TestAlertRulesUseDocumentedMetrics: the rules use only metrics and labels of the README's
// table, and so do the unit tests' input series; an alert whose expression misspelt a name
// could then not fire in its test.
func TestAlertRulesUseDocumentedMetrics(t *testing.T) {
	doc := readmeMetrics(t)
	check := func(where, expr string) {
		problems, _ := checkExpr(doc, expr)
		for _, p := range problems {
			t.Errorf("%s: %s", where, p)
		}
	}
	for _, r := range readAlerts(t) {
		check("alert "+r.Alert, r.Expr)
	}
	var rt ruleTests
	readYAML(t, alertTests, &rt)
	for _, tc := range rt.Tests {
		for _, s := range tc.InputSeries {
			check(fmt.Sprintf("%s: test %q: series %s", alertTests, tc.Name, s.Series), s.Series)
		}
	}
}

// dashboard is a Grafana dashboard, as far as these tests read one.
type dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []dashboardVar `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type dashboardVar struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"` // the data source's type, or {"query": PromQL}
	AllValue   string          `json:"allValue"`
	Datasource *datasourceRef  `json:"datasource"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	GridPos    struct {
		H int `json:"h"`
		W int `json:"w"`
		X int `json:"x"`
		Y int `json:"y"`
	} `json:"gridPos"`
	Targets []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

// Grafana's dashboard grid is 24 columns wide.
const gridColumns = 24

// The data source every panel and query variable uses: the dashboard's variable, so that it
// works with whatever the Prometheus data source is called where it is imported.
var promDatasource = datasourceRef{Type: "prometheus", UID: "${datasource}"}

// grafanaIntervals are Grafana's own variables of the queries, and what the PromQL check
// puts in their place.
var grafanaIntervals = map[string]string{"__rate_interval": "5m", "__interval": "1m", "__range": "6h"}

// labelValues is a query variable's query: the values of a label of what a selector selects.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// TestDashboard: the dashboard is a Grafana dashboard of a recent schema whose panels have
// unique ids and do not overlap, with a data source variable every query goes through, and
// a node variable; every query is valid PromQL (promtool checks each as a recording rule,
// Grafana's variables replaced as Grafana would), refers only to variables the dashboard
// has, and uses only metrics and labels of the README's table; and it shows every metric
// the alert rules use.
func TestDashboard(t *testing.T) {
	var d dashboard
	if err := json.Unmarshal(readFile(t, dashboardFile), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: want both", d.UID, d.Title)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: want 36 (Grafana 9) or later", d.SchemaVersion)
	}

	// Variables, and what a query sees in their place: for those of Grafana, an interval; for
	// the dashboard's, the value of All.
	doc := readmeMetrics(t)
	used := map[string]bool{} // metrics
	expanded := map[string]string{}
	for name, v := range grafanaIntervals {
		expanded[name] = v
	}
	var rules []rule // every query, as a recording rule for promtool
	var queries []string
	for _, v := range d.Templating.List {
		expanded[v.Name] = v.AllValue
		switch v.Type {
		case "datasource":
			if v.Name != "datasource" || string(v.Query) != `"prometheus"` {
				t.Errorf("variable %s: a data source variable of type %s; want one, named datasource (%s), of type prometheus", v.Name, v.Query, promDatasource.UID)
			}
		case "query":
			var q struct{ Query string }
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Errorf("variable %s: query %s: %v", v.Name, v.Query, err)
			}
			m := labelValues.FindStringSubmatch(q.Query)
			if m == nil {
				t.Errorf("variable %s: query %q: want label_values(selector, label)", v.Name, q.Query)
				continue
			}
			if v.Datasource == nil || *v.Datasource != promDatasource {
				t.Errorf("variable %s: data source %v, want %v", v.Name, v.Datasource, promDatasource)
			}
			rules = append(rules, rule{Record: "dashboard:variable_" + v.Name, Expr: m[1]})
			queries = append(queries, m[1])
		}
	}
	for _, name := range []string{"datasource", "instance"} {
		if _, ok := expanded[name]; !ok {
			t.Errorf("no variable %s", name)
		}
	}

	var all []panel
	var flatten func([]panel)
	flatten = func(ps []panel) {
		for _, p := range ps {
			all = append(all, p)
			flatten(p.Panels)
		}
	}
	flatten(d.Panels)
	ids := map[int]string{}
	var areas []image.Rectangle
	for _, p := range all {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if prev, dup := ids[p.ID]; dup || p.ID <= 0 {
			t.Errorf("%s: id taken by %q, or not positive", where, prev)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		area := image.Rect(g.X, g.Y, g.X+g.W, g.Y+g.H)
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > gridColumns {
			t.Errorf("%s: gridPos %+v is outside the %d columns", where, g, gridColumns)
		}
		for _, other := range areas {
			if area.Overlaps(other) {
				t.Errorf("%s: gridPos %+v overlaps another panel", where, g)
			}
		}
		areas = append(areas, area)
		if p.Type == "row" {
			continue
		}
		if p.Title == "" || len(p.Targets) == 0 {
			t.Errorf("%s: want a title and a query", where)
		}
		if p.Datasource == nil || *p.Datasource != promDatasource {
			t.Errorf("%s: data source %v, want %v", where, p.Datasource, promDatasource)
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if refs[q.RefID] || q.RefID == "" {
				t.Errorf("%s: refId %q is empty or taken", where, q.RefID)
			}
			refs[q.RefID] = true
			if q.Datasource != nil && *q.Datasource != promDatasource {
				t.Errorf("%s, query %s: data source %v, want %v", where, q.RefID, q.Datasource, promDatasource)
			}
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard:panel_%d_%s", p.ID, q.RefID), Expr: q.Expr})
			queries = append(queries, q.Expr)
		}
	}

	for _, q := range queries {
		problems, metrics := checkExpr(doc, q)
		for _, p := range problems {
			t.Errorf("query %s: %s", q, p)
		}
		for _, m := range metrics {
			used[m] = true
		}
	}
	for _, r := range readAlerts(t) {
		_, metrics := checkExpr(doc, r.Expr)
		for _, m := range metrics {
			if !used[m] && !used[m+"_bucket"] {
				t.Errorf("alert %s uses %s, which the dashboard does not show", r.Alert, m)
			}
		}
	}

	// Grafana's variables are written as the Dockerfile's arguments are.
	for i, r := range rules {
		rules[i].Expr = argRef.ReplaceAllStringFunc(r.Expr, func(ref string) string {
			v, ok := expanded[argRef.FindStringSubmatch(ref)[1]]
			if !ok {
				t.Errorf("query %s: no variable %s", r.Expr, ref)
			}
			return v
		})
	}
	b, err := yaml.Marshal(ruleFile{Groups: []ruleGroup{{Name: "dashboard", Rules: rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, "check", "rules", path)
}
