package perf

import (
	"os"
	"testing"
)

// TestKernelFloor writes the entries of 300 peers (more than one batch of weftd's) and finds
// them all in the kernel; it asserts no timing.
func TestKernelFloor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes a network namespace")
	}
	f, err := kernelFloor(300)
	if err != nil {
		t.Fatal(err)
	}
	if f.sends < 4 {
		t.Errorf("%d sends for four kinds of entries", f.sends)
	}
	t.Logf("300 peers: %v in %d sends, nexthop objects %t", f.took, f.sends, f.nexthops)
}
