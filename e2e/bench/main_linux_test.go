package main

import (
	"io"
	"testing"
)

// TestThroughputFlags: the throughput figures' size in the full and the quick run, and the
// flags that skip them or measure nothing else.
func TestThroughputFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		bytes int64
		other bool // other figures are measured too
	}{
		{nil, 2 << 30, true},
		{[]string{"--quick"}, 1 << 30, true},
		{[]string{"--quick", "--throughput-mib=256"}, 256 << 20, true},
		{[]string{"--no-throughput"}, 0, true},
		{[]string{"--throughput-mib=0"}, 0, true},
		{[]string{"--only-throughput", "--quick"}, 1 << 30, false},
	} {
		o, err := parseFlags(tc.args, io.Discard)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		c := o.cfg
		other := len(c.Sizes)+len(c.EventSizes)+len(c.KubeSizes)+c.Bulk > 0
		if c.ThroughputBytes != tc.bytes || other != tc.other {
			t.Errorf("%q: streams of %d bytes, other figures %t; want %d, %t", tc.args, c.ThroughputBytes, other, tc.bytes, tc.other)
		}
	}
	if _, err := parseFlags([]string{"--no-throughput", "--only-throughput"}, io.Discard); err == nil {
		t.Error("--no-throughput with --only-throughput: no error")
	}
}
