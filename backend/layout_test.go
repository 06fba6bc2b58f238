package backend

import (
	"testing"
	"unsafe"
)

// TestEntrySize: what a Set keeps of every lease stays in the allocator's 144-byte class on
// 64-bit platforms (a Peer carries no WireGuard fields outside wireguard; the claim indexes
// hold every claimant, with no link between them in the entries).
func TestEntrySize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are checked on 64-bit platforms")
	}
	if n := unsafe.Sizeof(entry{}); n > 144 {
		t.Errorf("a Set's entry takes %d bytes, more than 144", n)
	}
	if n := unsafe.Sizeof(Peer{}); n > 72 {
		t.Errorf("a Peer takes %d bytes, more than 72", n)
	}
}
