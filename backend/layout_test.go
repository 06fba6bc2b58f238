package backend

import (
	"net/netip"
	"testing"
	"unsafe"
)

// TestEntrySize: what a Set keeps of every lease stays in the allocator's 112-byte class on
// 64-bit platforms (a Peer carries no WireGuard fields outside wireguard; the claim indexes
// hold every claimant, with no link between them in the entries).
func TestEntrySize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are checked on 64-bit platforms")
	}
	if n := unsafe.Sizeof(entry{}); n > 112 {
		t.Errorf("a Set's entry takes %d bytes, more than 112", n)
	}
	if n := unsafe.Sizeof(Peer{}); n > 72 {
		t.Errorf("a Peer takes %d bytes, more than 72", n)
	}
}

// TestEntryKeepsCandidate: an entry gives back the candidate it was made of, whatever its
// addresses: IPv4, IPv6, an IPv4-mapped IPv6 public IP, a subnet not masked, none.
func TestEntryKeepsCandidate(t *testing.T) {
	wg := &WireGuardPeer{Key: Key{1}, Endpoint: netip.MustParseAddrPort("192.0.2.2:51820")}
	skip := &Skipped{Key: "k", Code: SkipBadPublicIP}
	for _, c := range []candidate{
		{peer: Peer{Subnet: netip.MustParsePrefix("10.244.2.0/24"), PublicIP: netip.MustParseAddr("192.0.2.2"),
			VTEPMAC: MAC{0xaa, 0, 0, 0, 0, 2}}, mac: MAC{0xaa, 0, 0, 0, 0, 2}},
		{peer: Peer{Subnet: netip.MustParsePrefix("10.244.3.0/24"), PublicIP: netip.MustParseAddr("192.0.2.3")}, mac: MAC{0xaa, 3}},
		{peer: Peer{Subnet: netip.MustParsePrefix("fd00:10:244:2::/64"), PublicIP: netip.MustParseAddr("2001:db8::2"), WireGuard: wg}},
		{peer: Peer{Subnet: netip.MustParsePrefix("10.244.4.7/24"), PublicIP: netip.MustParseAddr("::ffff:192.0.2.4")}, skip: skip},
		{peer: Peer{PublicIP: netip.MustParseAddr("192.0.2.5")}, skip: skip},
		{skip: skip},
	} {
		e := newEntry("k", 7, c)
		if got := e.candidate(); got.peer != c.peer || got.mac != c.mac || got.skip != c.skip || e.wgKey() != c.key() {
			t.Errorf("entry of %+v gives back %+v, key %v", c, got, e.wgKey())
		}
		if e.sn != addrKey(c.peer.Subnet.Addr()) || e.ip != addrKey(c.peer.PublicIP) {
			t.Errorf("entry of %+v claims %v and %v", c, e.sn, e.ip)
		}
	}
}
