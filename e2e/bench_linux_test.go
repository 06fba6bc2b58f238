package e2e

import (
	"log/slog"
	"testing"
	"time"

	"github.com/weftnet/weft/e2e/perf"
)

// TestBenchSmoke runs the benchmark harness of `make bench` (package perf) at a tiny size,
// weftd only, in etcd mode, and its throughput figures with 64 MiB streams, and checks that it
// measures every figure: all routes seen, an RSS, a rate with the offload on and off, no
// failure. It asserts no timing.
func TestBenchSmoke(t *testing.T) {
	bins := needBinaries(t)
	cfg := perf.Config{
		Weftd:         bins.weftd,
		Sizes:         []int{50},
		EventSizes:    []int{50},
		Events:        5,
		EventInterval: 20 * time.Millisecond,
		EventTimeout:  10 * time.Second,
		Bulk:          20,
		BulkBase:      50,
		// Enough for a rate; the full run's streams are 32 times longer.
		ThroughputBytes: 64 << 20,
		CNIBin:          bins.cniBin,
		Reps:            1,
		Settle:          100 * time.Millisecond,
		StartTimeout:    30 * time.Second,
	}
	rep, err := perf.Run(t.Context(), cfg, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Errors) > 0 {
		t.Fatalf("the run had errors: %q", rep.Errors)
	}
	// Cold start (subnet.env, first route, all routes, the kernel's floor and all routes'
	// ratio to it, etcd's listing and all routes' ratio to the two floors), RSS, peak RSS and their ratio, p50 and p99 and those of etcd's delivery
	// (the floor), bulk join; throughput with the offload on and off and their ratio, eight
	// streams at once and the request/response round trip over VXLAN and over host-gw,
	// host-gw's one stream and VXLAN's ratio to it, between two pods on one node, and over
	// WireGuard.
	if len(rep.Rows) != 26 {
		t.Errorf("%d figures, want 26: %+v", len(rep.Rows), rep.Rows)
	}
	for _, row := range rep.Rows {
		v, ok := row.Values[perf.Weftd]
		switch {
		case !ok || v.Missing != "":
			t.Errorf("%s: no value (%s)", row.Figure, v.Missing)
		case v.AtLeast:
			t.Errorf("%s: timed out after %s", row.Figure, v.Format(row.Kind))
		case row.Kind != perf.Duration && v.N <= 0, v.N < 0:
			t.Errorf("%s: %s", row.Figure, v.Format(row.Kind))
		}
		if row.Kind == perf.Rate || row.Kind == perf.Factor {
			t.Logf("%s: %s", row.Figure, v.Format(row.Kind))
		}
	}
}
