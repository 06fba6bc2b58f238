package backend

import (
	"testing"
	"unsafe"
)

// TestEntrySize: what a Set keeps of every lease stays in the allocator's 176-byte class on
// 64-bit platforms (a Peer carries no WireGuard fields outside wireguard).
func TestEntrySize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are checked on 64-bit platforms")
	}
	if n := unsafe.Sizeof(entry{}); n > 176 {
		t.Errorf("a Set's entry takes %d bytes, more than 176", n)
	}
	if n := unsafe.Sizeof(Peer{}); n > 72 {
		t.Errorf("a Peer takes %d bytes, more than 72", n)
	}
}
