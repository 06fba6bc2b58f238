package perf

import (
	"strings"
	"testing"
	"time"
)

func TestRatio(t *testing.T) {
	for _, tc := range []struct {
		flanneld, weftd Value
		want            string
	}{
		{Value{N: 2}, Value{N: 1}, "0.50x ahead"},
		{Value{N: 1}, Value{N: 21}, "21x behind"},
		{Value{N: 1}, Value{N: 1.02}, "1.02x even"},
		{Value{N: 1}, timedOut(10 * time.Second), "> 10x behind"},
		{timedOut(10 * time.Second), Value{N: 1}, "< 0.10x ahead"},
		{timedOut(time.Second), timedOut(time.Second), ""},
		{missing("failed"), Value{N: 1}, ""},
		{Value{}, Value{}, "1.00x even"},
	} {
		if got := Ratio(tc.flanneld, tc.weftd); got != tc.want {
			t.Errorf("Ratio(%+v, %+v) = %q, want %q", tc.flanneld, tc.weftd, got, tc.want)
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
	r := &Report{Command: "weft-bench --quick", Daemons: []string{Flanneld, Weftd}}
	f.into(r)
	var b strings.Builder
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| figure | flanneld | weftd | weftd/flanneld |",
		"| cold start, 1k peers: all routes | 1.00 s | 200.0 ms | 0.20x ahead |\n| RSS after settling, 1k peers | — (not measured) | 50.0 MiB |  |",
		"weft-bench --quick",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestValidate(t *testing.T) {
	c := DefaultConfig()
	c.Weftd = "weftd"
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
