package backend

import (
	"net/netip"
	"testing"
	"unsafe"
)

// TestEntrySize: what a Set keeps of every lease stays in the allocator's 80-byte class on
// 64-bit platforms (a Peer carries no WireGuard fields outside wireguard; the claim indexes
// hold every claimant, with no link between them in the entries; what only skipped leases
// and WireGuard peers have is apart, entryMore).
func TestEntrySize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are checked on 64-bit platforms")
	}
	if n := unsafe.Sizeof(entry{}); n > 80 {
		t.Errorf("a Set's entry takes %d bytes, more than 80", n)
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

// TestEntryMoreOnlyWhenSkipped: the entries of usable VXLAN leases hold nothing apart; a lease
// that loses its public IP to an older one does, with the skip reported once, and holds
// nothing apart again once the older lease is gone and it is programmed.
func TestEntryMoreOnlyWhenSkipped(t *testing.T) {
	be := newBackend(t, benchConf)
	leases := peerLeases(4)
	for i := range leases {
		leases[i].Created = int64(100 + i)
	}
	s := NewSet(be, leases[0], false)
	var r Result
	for _, l := range leases[1:] {
		s.Put(l, &r)
	}
	for _, l := range leases[1:] {
		if e := s.entry(l.Key()); e == nil || e.more != nil {
			t.Fatalf("usable lease %s: entry %+v, want one with nothing apart", l.Key(), e)
		}
	}
	// A younger lease claiming leases[1]'s public IP loses it.
	rival := peerLeases(5)[4]
	rival.Created = leases[1].Created + 1
	rival.Attrs.PublicIP = leases[1].Attrs.PublicIP
	r = Result{}
	s.Put(rival, &r)
	e := s.entry(rival.Key())
	if e == nil || e.more == nil || e.more.lost == nil || e.more.said != e.more.lost || len(r.Skipped) != 1 {
		t.Fatalf("the rival's entry %+v (apart: %+v), skips reported %v: want it lost, reported once", e, e.rare(), r.Skipped)
	}
	r = Result{}
	s.Put(rival, &r)
	if len(r.Skipped) != 0 {
		t.Errorf("the same skip reported again: %v", r.Skipped)
	}
	r = Result{}
	s.Remove(leases[1].Key(), &r)
	if e := s.entry(rival.Key()); e == nil || !e.on || e.more != nil {
		t.Fatalf("the rival after the older lease went: %+v (apart: %+v), want it programmed with nothing apart", e, e.rare())
	}
}
