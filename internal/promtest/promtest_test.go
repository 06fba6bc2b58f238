package promtest

import (
	"reflect"
	"strings"
	"testing"
)

const readme = "# x\n\ntext\n\n" + TableHeader + ` labels | meaning |
|---|---|---|---|
| ` + "`a_ready`" + ` | gauge | | 1 or 0 |
| ` + "`a_errors_total`" + ` | counter | ` + "`operation`: `get`, `put`" + ` | errors |
| ` + "`a_peers`" + ` | gauge | ` + "`backend`, `state`: `up`, `down`" + ` | peers |
| ` + "`a_probes_total`" + ` | counter | ` + "`kind`: `icmp`, `tcp`; `outcome`: `ok`, `lost`" + ` | probes |
| ` + "`a_info`" + ` | gauge | ` + "`subnet`, `public_ip`" + ` | the lease |
| ` + "`a_drift_total`" + ` | counter | ` + "`kind`, as above" + ` | drift |
| ` + "`a_delay_seconds`" + ` | histogram | | delay |
| ` + "`go_*`, `process_*`" + ` | | | the runtime's |

Worth alerting on: ` + "`a_errors_total`" + ` rising.
`

// TestParseMetrics: labels with and without values, several labels with values, prefixes,
// and the end of the table.
func TestParseMetrics(t *testing.T) {
	ms, err := ParseMetrics(readme)
	if err != nil {
		t.Fatal(err)
	}
	want := Metrics{
		"a_ready":         {Type: "gauge", Labels: map[string][]string{}},
		"a_errors_total":  {Type: "counter", Labels: map[string][]string{"operation": {"get", "put"}}},
		"a_peers":         {Type: "gauge", Labels: map[string][]string{"backend": nil, "state": {"up", "down"}}},
		"a_probes_total":  {Type: "counter", Labels: map[string][]string{"kind": {"icmp", "tcp"}, "outcome": {"ok", "lost"}}},
		"a_info":          {Type: "gauge", Labels: map[string][]string{"subnet": nil, "public_ip": nil}},
		"a_drift_total":   {Type: "counter", Labels: map[string][]string{"kind": nil}},
		"a_delay_seconds": {Type: "histogram", Labels: map[string][]string{}},
		"go_*":            {Labels: map[string][]string{}},
		"process_*":       {Labels: map[string][]string{}},
	}
	if !reflect.DeepEqual(ms, want) {
		t.Errorf("ParseMetrics:\n got %v\nwant %v", ms, want)
	}
	for name, found := range map[string]bool{"a_ready": true, "go_goroutines": true, "a_readiness": false, "a_delay_seconds_bucket": false} {
		if _, ok := ms.Find(name); ok != found {
			t.Errorf("Find(%s) found %v, want %v", name, ok, found)
		}
	}
}

// TestParseMetricsErrors: a table that cannot be the contract is refused rather than read
// in part.
func TestParseMetricsErrors(t *testing.T) {
	row := func(cells string) string {
		return TableHeader + " labels | meaning |\n|---|---|---|---|\n" + cells + "\n"
	}
	for name, text := range map[string]string{
		"no table":     "# x\n| name | type |\n",
		"empty":        row(""),
		"columns":      row("| `a` | gauge | |"),
		"no name":      row("| a | gauge | | x |"),
		"type":         row("| `a` | summary | | x |"),
		"typed prefix": row("| `a_*` | gauge | | x |"),
		"twice":        row("| `a` | gauge | | x |\n| `a` | counter | | y |"),
		"missing type": row("| `a` | | | x |"),
	} {
		if ms, err := ParseMetrics("intro\n" + text); err == nil {
			t.Errorf("%s: ParseMetrics(%q) = %v, want an error", name, text, ms)
		} else if !strings.Contains(err.Error(), "table") {
			t.Errorf("%s: error %q does not say it is the table of metrics", name, err)
		}
	}
}
