package daemon

import (
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftnet/weft/internal/promtest"
)

// descParts takes a Desc's String apart into the metric's name and its labels. A Desc has
// no accessors: its String is the only way to name what a registry holds short of a scrape,
// and a scrape leaves out every vector that has no series yet. The name comes first and the
// labels last, so a help text cannot be mistaken for either.
var descParts = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*, variableLabels: \{([^}]*)\}\}$`)

// TestMetricsDocumented: the README's table of metrics, the contract that dist/'s alert rules
// and dashboard are tested against, is what newMetrics registers, name for name and label for
// label.
func TestMetricsDocumented(t *testing.T) {
	doc, err := promtest.ReadMetrics(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	descs := make(chan *prometheus.Desc)
	go func() {
		newMetrics().reg.Describe(descs)
		close(descs)
	}()
	registered := map[string][]string{} // name → labels
	for d := range descs {
		m := descParts.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot take %s apart", d)
		}
		registered[m[1]] = nil
		if m[2] != "" {
			registered[m[1]] = strings.Split(m[2], ",")
		}
	}

	for name, labels := range registered {
		md, ok := doc.Find(name)
		switch {
		case !ok:
			t.Errorf("%s is registered but not in the README's table of metrics", name)
		case md.Type != "": // a row of its own, not go_* or process_*
			documented := slices.Sorted(maps.Keys(md.Labels))
			if slices.Sort(labels); !slices.Equal(labels, documented) {
				t.Errorf("%s has the labels %v; the README says %v", name, labels, documented)
			}
		}
	}
	for name := range doc {
		if prefix, ok := strings.CutSuffix(name, "*"); ok {
			hasPrefix := func(n string) bool { return strings.HasPrefix(n, prefix) }
			if !slices.ContainsFunc(slices.Collect(maps.Keys(registered)), hasPrefix) {
				t.Errorf("the README documents %s, but no metric of that prefix is registered", name)
			}
			continue
		}
		if _, reg := registered[name]; !reg {
			t.Errorf("the README documents %s, but it is not registered", name)
		}
	}
}
