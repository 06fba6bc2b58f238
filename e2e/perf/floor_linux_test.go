package perf

import (
	"log/slog"
	"os"
	"testing"
	"time"
)

// TestKernelFloor writes the entries of 300 peers (more than one batch of weftd's) and finds
// them all in the kernel, its route watch having seen every route; it asserts no timing.
func TestKernelFloor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes a network namespace")
	}
	f, err := kernelFloor(300, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	if f.sends < 4 {
		t.Errorf("%d sends for four kinds of entries", f.sends)
	}
	t.Logf("300 peers: %v in %d sends, nexthop objects %t", f.took, f.sends, f.nexthops)
}

// TestCPUTime: the CPU time of this process, summed over its threads, is there and grows
// with work done.
func TestCPUTime(t *testing.T) {
	before, err := cpuTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
		x++
	}
	after, err := cpuTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before <= 0 || after <= before {
		t.Errorf("CPU time %v, then %v after %d turns of a busy loop; want it positive and growing", before, after, x)
	}
}
