package daemon

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/events"
	"github.com/weftnet/weft/internal/etcdtest"
	"github.com/weftnet/weft/internal/promtest"
	"github.com/weftnet/weft/subnet/etcd"
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

// series matches one sample line of the text exposition: the name, the labels, the value.
var series = regexp.MustCompile(`^([a-z_]+)\{([^}]*)\} (\S+)$`)

// TestCountersStartAtZero: on a fresh, healthy node, the labelled counters whose label values
// are known in advance have a series for each value the README lists, at 0 where nothing
// happened yet, so that rate() and the dashboard's panels show 0 rather than no data until
// the first skip, probe or error.
func TestCountersStartAtZero(t *testing.T) {
	doc, err := promtest.ReadMetrics(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", vxlanConf); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	startNodeWith(t, cli, t.TempDir(), &fakePlane{mac: backend.MAC{0x0e, 1}}, func(c *Config) { c.HealthzPort = port })
	eventually(t, "ready", func() bool { code, _ := get(base + "/readyz"); return code == http.StatusOK })
	_, body := get(base + "/metrics")

	have := map[string][]map[string]string{} // name → the labels of each series, its value as ""
	for line := range strings.SplitSeq(body, "\n") {
		m := series.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		labels := map[string]string{"": m[3]}
		for pair := range strings.SplitSeq(m[2], ",") {
			k, v, _ := strings.Cut(pair, "=")
			labels[k] = strings.Trim(v, `"`)
		}
		have[m[1]] = append(have[m[1]], labels)
	}
	for _, name := range []string{"weft_peer_leases_skipped_total", "weft_probes_total", "weft_lease_acquisitions_total",
		"weft_errors_total", "weft_lease_events_received_total"} {
		md, ok := doc.Find(name)
		if !ok {
			t.Fatalf("%s is not in the README's table", name)
		}
		for label, values := range md.Labels {
			if len(values) == 0 {
				t.Errorf("the README lists no values of %s's label %s", name, label)
			}
			for _, v := range values {
				if !slices.ContainsFunc(have[name], func(l map[string]string) bool { return l[label] == v }) {
					t.Errorf("a fresh node's /metrics has no %s{%s=%q}", name, label, v)
				}
			}
		}
	}
	// Nothing was skipped, probed or failed: every series of those is 0.
	for _, name := range []string{"weft_peer_leases_skipped_total", "weft_probes_total", "weft_errors_total"} {
		for _, l := range have[name] {
			if l[""] != "0" {
				t.Errorf("a fresh node's %s%v is %s, want 0", name, l, l[""])
			}
		}
	}
	if n := len(have["weft_peer_leases_skipped_total"]); n != len(backend.SkipCodes()) {
		t.Errorf("%d series of weft_peer_leases_skipped_total, want one for each of the %d reasons", n, len(backend.SkipCodes()))
	}
}

// TestNodeEventsStartAtZero: in Kubernetes mode, weft_node_events_total has a series at 0 for
// every reason the daemon may post and both results before anything is posted.
func TestNodeEventsStartAtZero(t *testing.T) {
	m := newMetrics()
	newEventRecorder(slog.New(slog.NewTextHandler(testWriter{t}, nil)), m)
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "weft_node_events_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range s.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if s.GetCounter().GetValue() == 0 {
				got[l["reason"]+" "+l["result"]] = true
			}
		}
	}
	for _, reason := range append(events.Reasons(), noticeReasons()...) {
		for _, r := range []string{"success", "error"} {
			if !got[reason+" "+r] {
				t.Errorf("no weft_node_events_total{reason=%q,result=%q} at 0", reason, r)
			}
		}
	}
}

// handshakes is a WireGuardRunner whose devices' peers shook hands at the given times.
type handshakes map[string][]time.Time

func (h handshakes) Implementation(string) string { return "user space" }

func (h handshakes) PeerHandshakes(dev string) ([]time.Time, error) {
	hs, ok := h[dev]
	if !ok {
		return nil, fmt.Errorf("no device %s", dev)
	}
	return hs, nil
}

// TestWireGuardPeersByHandshake: weft_wireguard_peers counts each device's peers by their
// latest handshake against WireGuard's 180 s session life, every label present even at 0,
// and leaves out a device that cannot be read.
func TestWireGuardPeersByHandshake(t *testing.T) {
	now := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	m := newMetrics()
	m.wireguard.now = func() time.Time { return now }
	r := handshakes{
		"flannel-wg":    {now.Add(-5 * time.Second), now.Add(-179 * time.Second), now.Add(-181 * time.Second), {}},
		"flannel-wg-v6": {now.Add(-time.Hour)},
	}
	m.wireguard.devices.Store(&[]wgDevice{{"flannel-wg", r}, {"flannel-wg-v6", r}, {"gone", r}})
	got := map[string]float64{}
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "weft_wireguard_peers" {
			continue
		}
		for _, s := range mf.GetMetric() {
			var dev, hs string
			for _, l := range s.GetLabel() {
				switch l.GetName() {
				case "device":
					dev = l.GetValue()
				case "handshake":
					hs = l.GetValue()
				}
			}
			got[dev+"/"+hs] = s.GetGauge().GetValue()
		}
	}
	want := map[string]float64{
		"flannel-wg/recent": 2, "flannel-wg/stale": 1, "flannel-wg/never": 1,
		"flannel-wg-v6/recent": 0, "flannel-wg-v6/stale": 1, "flannel-wg-v6/never": 0,
	}
	if !maps.Equal(got, want) {
		t.Errorf("weft_wireguard_peers = %v, want %v", got, want)
	}
}
