package linux

import (
	"context"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
)

// bench20k is a fixture with a VXLAN device and the State of node 10.0.0.0/24 with 20k
// overlay peers whose public IPs end in last.
func bench20k(b *testing.B) (*fixture, func(last byte) *backend.State) {
	f := newFixture(b, slog.New(slog.DiscardHandler))
	dev := testDevice()
	_, err := f.p.EnsureVXLAN(dev)
	f.must(err)
	cfg, err := subnet.ParseConfig([]byte(`{"Network":"10.0.0.0/8","Backend":{"Type":"vxlan"}}`))
	f.must(err)
	return f, func(last byte) *backend.State {
		st := &backend.State{Config: cfg, Own: pfx("10.0.0.0/24"), Underlay: "ul0", Device: &dev, Peers: backend.PeerMap{}}
		for i := 1; i <= 20000; i++ {
			sn := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
			peersOf(st)[sn.String()] = backend.Peer{Subnet: sn, PublicIP: netip.AddrFrom4([4]byte{192, 168, 50, last}),
				VTEPMAC: backend.MAC{0x0e, 0, 0, 0, byte(i >> 8), byte(i)}}
		}
		return st
	}
}

// BenchmarkApplyFull20k: full Applies that each rewrite 20k peers' FDB entries (every public
// IP moves), the dump, diff and writer of a cold start at that size.
func BenchmarkApplyFull20k(b *testing.B) {
	f, state := bench20k(b)
	sts := [2]*backend.State{state(2), state(3)}
	if _, err := f.p.Apply(context.Background(), sts[0], backend.Update{Full: true}); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		c, err := f.p.Apply(context.Background(), sts[i%2], backend.Update{Full: true})
		if err != nil || c["fdb"] != 20000 {
			b.Fatalf("full Apply wrote %v, %v; want 20000 FDB entries", c, err)
		}
	}
}

// BenchmarkApplyFullSame20k: full Applies of 20k peers that find every entry in place: a
// restart's, the drift watch's first comparison after a cold start's writes, a periodic
// resync. The dump and the diff alone.
func BenchmarkApplyFullSame20k(b *testing.B) {
	f, state := bench20k(b)
	st := state(2)
	if _, err := f.p.Apply(context.Background(), st, backend.Update{Full: true}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		c, err := f.p.Apply(context.Background(), st, backend.Update{Full: true})
		if err != nil || c.Total() != 0 {
			b.Fatalf("full Apply of what is in place wrote %v, %v; want nothing", c, err)
		}
	}
}

// BenchmarkApplyPeer20k: an incremental Apply of one peer's change among 20k, the cost of
// a lease event.
func BenchmarkApplyPeer20k(b *testing.B) {
	f, state := bench20k(b)
	st := state(2)
	if _, err := f.p.Apply(context.Background(), st, backend.Update{Full: true}); err != nil {
		b.Fatal(err)
	}
	key := "10.0.1.0/24"
	old := peersOf(st)[key]
	moved := old
	moved.PublicIP = ip("192.168.50.9")
	i := 0
	for b.Loop() {
		i++
		from, to := old, moved
		if i%2 == 0 {
			from, to = moved, old
		}
		peersOf(st)[key] = to
		c, err := f.p.Apply(context.Background(), st, backend.Update{Peers: []backend.PeerChange{{Key: key, Old: from, New: to}}})
		if err != nil || c["fdb"] != 1 {
			b.Fatalf("incremental Apply wrote %v, %v; want one FDB entry", c, err)
		}
	}
}

// BenchmarkReplaceVXLAN20k: replacing the VXLAN device of 20k peers (their nexthop objects,
// routes, neighbours and FDB entries on it) with one of another VNI, as a changed network
// config makes EnsureVXLAN do; the cost includes the kernel's, holding the routing lock.
func BenchmarkReplaceVXLAN20k(b *testing.B) {
	f, state := bench20k(b)
	st := state(2)
	vni := 1
	for b.Loop() {
		b.StopTimer()
		if _, err := f.p.Apply(context.Background(), st, backend.Update{Full: true}); err != nil {
			b.Fatal(err)
		}
		vni = 3 - vni
		st.Device.VNI = uint32(vni)
		b.StartTimer()
		if _, err := f.p.EnsureVXLAN(*st.Device); err != nil {
			b.Fatal(err)
		}
	}
}
