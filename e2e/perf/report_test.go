package perf

import (
	"strings"
	"testing"
	"time"
)

func TestRatio(t *testing.T) {
	for _, tc := range []struct {
		k               Kind
		flanneld, weftd Value
		want            string
	}{
		{Duration, Value{N: 2}, Value{N: 1}, "0.50x ahead"},
		{Duration, Value{N: 1}, Value{N: 21}, "21x behind"},
		{Duration, Value{N: 1}, Value{N: 1.02}, "1.02x even"},
		{Duration, Value{N: 1}, timedOut(10 * time.Second), "> 10x behind"},
		{Duration, timedOut(10 * time.Second), Value{N: 1}, "< 0.10x ahead"},
		{Duration, timedOut(time.Second), timedOut(time.Second), ""},
		{Duration, missing("failed"), Value{N: 1}, ""},
		{Duration, Value{}, Value{}, "1.00x even"},
		// More is better.
		{Rate, Value{N: 10e9}, Value{N: 13e9}, "1.30x ahead"},
		{Rate, Value{N: 10e9}, Value{N: 2.9e9}, "0.29x behind"},
		{Rate, Value{N: 10e9}, Value{N: 10.2e9}, "1.02x even"},
		{Factor, Value{N: 4}, Value{N: 4.5}, ""},
	} {
		if got := Ratio(tc.k, tc.flanneld, tc.weftd); got != tc.want {
			t.Errorf("Ratio(%s, %+v, %+v) = %q, want %q", tc.k, tc.flanneld, tc.weftd, got, tc.want)
		}
	}
}

// TestSumOfFloors: the floors' sum, and so the ratio to it, is there only when both floors
// are measurements.
func TestSumOfFloors(t *testing.T) {
	if got := ratio(Value{N: 3}, sum(Value{N: 1}, Value{N: 0.5})); got != (Value{N: 2}) {
		t.Errorf("3 s / (1 s + 0.5 s) = %+v, want 2", got)
	}
	for _, floor := range []Value{missing("failed"), timedOut(time.Second)} {
		if got := ratio(Value{N: 3}, sum(Value{N: 1}, floor)); got.Missing == "" {
			t.Errorf("3 s / (1 s + %+v) = %+v, want no ratio", floor, got)
		}
	}
}

func TestMedianCountsFailuresAsWorst(t *testing.T) {
	got := median([]Value{missing("failed"), {N: 3}, {N: 1}})
	if got != (Value{N: 3}) {
		t.Errorf("median = %+v, want 3", got)
	}
	if got := median([]Value{timedOut(time.Second), missing("x"), {N: 1}}); !got.AtLeast {
		t.Errorf("median of a measurement, a timeout and a failure = %+v, want the timeout", got)
	}
	if got := median(nil); got.Missing == "" {
		t.Errorf("median of nothing = %+v, want missing", got)
	}
}

func TestPercentile(t *testing.T) {
	lat := make([]time.Duration, 0, 100)
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	if got := percentile(lat, 0, time.Second, 0.5); got != seconds(50*time.Millisecond) {
		t.Errorf("p50 = %v", got)
	}
	if got := percentile(lat, 0, time.Second, 0.99); got != seconds(99*time.Millisecond) {
		t.Errorf("p99 = %v", got)
	}
	// Two timeouts out of 100 events: the p99 is among them.
	if got := percentile(lat[:98], 2, time.Second, 0.99); got != timedOut(time.Second) {
		t.Errorf("p99 with 2 timeouts = %v, want a bound of 1s", got)
	}
	if got := percentile(nil, 0, time.Second, 0.5); got.Missing == "" {
		t.Errorf("p50 of no events = %v, want missing", got)
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		v    Value
		k    Kind
		want string
	}{
		{seconds(680 * time.Microsecond), Duration, "0.68 ms"},
		{seconds(14200 * time.Microsecond), Duration, "14.2 ms"},
		{seconds(3830 * time.Millisecond), Duration, "3.83 s"},
		{seconds(22600 * time.Millisecond), Duration, "22.6 s"},
		{timedOut(10 * time.Second), Duration, "> 10.0 s"},
		{Value{N: 42 << 20}, Memory, "42.0 MiB"},
		{missing("failed"), Memory, "— (failed)"},
		{Value{N: 13.24e9}, Rate, "13.2 Gbit/s"},
		{Value{N: 2.912e9}, Rate, "2.91 Gbit/s"},
		{Value{N: 0.85e9}, Rate, "0.85 Gbit/s"},
		{Value{N: 4.55}, Factor, "4.55x"},
		{Value{N: 12.6}, Factor, "13x"},
	} {
		if got := tc.v.Format(tc.k); got != tc.want {
			t.Errorf("%+v.Format(%s) = %q, want %q", tc.v, tc.k, got, tc.want)
		}
	}
}

func TestWriteMarkdown(t *testing.T) {
	f := newFigures()
	f.add(figRSS(1000), Weftd, Value{N: 50 << 20})
	f.add(figAll(1000), Flanneld, seconds(time.Second))
	f.add(figAll(1000), Weftd, seconds(100*time.Millisecond))
	f.add(figAll(1000), Weftd, missing("failed"))
	f.add(figAll(1000), Weftd, seconds(200*time.Millisecond))
	f.add(figFloor(1000), Flanneld, seconds(20*time.Millisecond))
	f.add(figFloor(1000), Weftd, seconds(20*time.Millisecond))
	out := markdown(t, f, "weft-bench --quick")
	for _, want := range []string{
		"| figure | flanneld | weftd | weftd/flanneld |",
		"| cold start, 1k peers: all routes | 1.00 s | 200.0 ms | 0.20x ahead |\n" +
			"| cold start, 1k peers: the kernel's floor (the same entries, a minimal program's netlink writes) | 20.0 ms | 20.0 ms |  |\n" +
			"| RSS after settling, 1k peers | — (not measured) | 50.0 MiB |  |",
		"weft-bench --quick",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// markdown is the table of a report of both daemons holding the figures.
func markdown(t *testing.T, f *figures, command string) string {
	t.Helper()
	r := &Report{Command: command, Daemons: []string{Flanneld, Weftd}}
	f.into(r)
	var b strings.Builder
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestWriteMarkdownThroughput: the throughput rows come after the others, in Gbit/s, on,
// off, then their ratio; weftd's ratio to flanneld says more is better, and the on/off
// factor has none.
func TestWriteMarkdownThroughput(t *testing.T) {
	f := newFigures()
	n := int64(4 << 30)
	f.add(figTputFactor(n), Weftd, Value{N: 13.2 / 2.9})
	f.add(figTputOff(n), Weftd, Value{N: 2.9e9})
	for _, v := range []float64{13.1e9, 13.2e9, 13.5e9} {
		f.add(figTputOn(n), Weftd, Value{N: v})
	}
	f.add(figTputOn(n), Flanneld, Value{N: 12e9})
	f.add(figRSS(1000), Weftd, Value{N: 50 << 20})
	out := markdown(t, f, "weft-bench")
	want := "| RSS after settling, 1k peers | — (not measured) | 50.0 MiB |  |\n" +
		"| pod-to-pod TCP over VXLAN, 4 GiB streams: offload on | 12.0 Gbit/s | 13.2 Gbit/s | 1.10x ahead |\n" +
		"| pod-to-pod TCP over VXLAN, 4 GiB streams: offload off | — (not measured) | 2.90 Gbit/s |  |\n" +
		"| pod-to-pod TCP over VXLAN, 4 GiB streams: offload on / off | — (not measured) | 4.55x |  |\n"
	if !strings.Contains(out, want) {
		t.Errorf("report lacks\n%s\nin\n%s", want, out)
	}
}

func TestMebibytes(t *testing.T) {
	for n, want := range map[int64]string{4 << 30: "4 GiB", 64 << 20: "64 MiB", 1536 << 20: "1536 MiB", 1500: "1500 bytes"} {
		if got := mebibytes(n); got != want {
			t.Errorf("mebibytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	c := DefaultConfig()
	c.Weftd = "weftd"
	if err := c.Validate(); err == nil {
		t.Error("throughput figures without the CNI plugins were accepted")
	}
	c.CNIBin = "/opt/cni/bin"
	if err := c.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	c.Sizes = []int{MaxPeers + 1}
	if err := c.Validate(); err == nil {
		t.Error("more peers than the network holds were accepted")
	}
	c = QuickConfig()
	if err := c.Validate(); err == nil {
		t.Error("a config without daemons was accepted")
	}
}
