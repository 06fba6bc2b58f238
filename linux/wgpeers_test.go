package linux

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/weftnet/weft/backend"
)

// TestWGPeersMergeFamilies: on a device both families use (flannel's single-tunnel modes), a
// peer lease's two halves are one WireGuard peer with both subnets as allowed IPs; removing a
// half leaves the other's, removing both removes the peer, and a half whose key changes
// touches the old key's peer and the new one's. Each change names just the keys it touches.
func TestWGPeersMergeFamilies(t *testing.T) {
	k1, k2 := backend.Key{1}, backend.Key{2}
	ep := netip.MustParseAddrPort("192.0.2.5:51820")
	v4 := backend.Peer{Subnet: netip.MustParsePrefix("10.42.2.0/24"), WireGuard: &backend.WireGuardPeer{Key: k1, Endpoint: ep}}
	v6 := backend.Peer{Subnet: netip.MustParsePrefix("fd42:0:0:2::/64"), WireGuard: &backend.WireGuardPeer{Key: k1, Endpoint: ep}}
	ps := newWGPeers()
	if got := ps.set(wgHalf{backend.IPv4, "a"}, v4); !slices.Equal(got, []backend.Key{k1}) {
		t.Errorf("adding the IPv4 half touched %v", got)
	}
	if got := ps.set(wgHalf{backend.IPv6, "a"}, v6); !slices.Equal(got, []backend.Key{k1}) {
		t.Errorf("adding the IPv6 half touched %v", got)
	}
	again := v6
	again.WireGuard = &backend.WireGuardPeer{Key: k1, Endpoint: ep} // equal, not the same
	if got := ps.set(wgHalf{backend.IPv6, "a"}, again); got != nil {
		t.Errorf("setting the same half again touched %v", got)
	}
	wp, ok := ps.want(k1)
	if !ok || wp.endpoint != ep || !slices.Equal(wp.allowed, []netip.Prefix{v4.Subnet, v6.Subnet}) {
		t.Errorf("peer %+v %v, want both subnets at %v", wp, ok, ep)
	}
	ps.set(wgHalf{backend.IPv4, "a"}, backend.Peer{})
	if wp, ok := ps.want(k1); !ok || !slices.Equal(wp.allowed, []netip.Prefix{v6.Subnet}) {
		t.Errorf("after the IPv4 half went: %+v %v", wp, ok)
	}
	moved := v6
	moved.WireGuard = &backend.WireGuardPeer{Key: k2, Endpoint: ep}
	if got := ps.set(wgHalf{backend.IPv6, "a"}, moved); !slices.Equal(got, []backend.Key{k1, k2}) {
		t.Errorf("a new key touched %v, want the old and the new", got)
	}
	if _, ok := ps.want(k1); ok {
		t.Errorf("the old key's peer is still wanted")
	}
	if all := ps.all(); len(all) != 1 || !slices.Equal(all[k2].allowed, []netip.Prefix{v6.Subnet}) {
		t.Errorf("all %+v", all)
	}
}

// TestWGPeersSetFamily: a full Apply of one family replaces that family's halves only.
func TestWGPeersSetFamily(t *testing.T) {
	k1, k2 := backend.Key{1}, backend.Key{2}
	p := func(sn string, k backend.Key) backend.Peer {
		return backend.Peer{Subnet: netip.MustParsePrefix(sn), WireGuard: &backend.WireGuardPeer{Key: k, Endpoint: netip.MustParseAddrPort("192.0.2.5:51820")}}
	}
	ps := newWGPeers()
	ps.setFamily(backend.IPv4, map[string]backend.Peer{"a": p("10.42.2.0/24", k1), "b": p("10.42.3.0/24", k2)})
	ps.setFamily(backend.IPv6, map[string]backend.Peer{"a": p("fd42:0:0:2::/64", k1)})
	ps.setFamily(backend.IPv4, map[string]backend.Peer{"a": p("10.42.2.0/24", k1)})
	all := ps.all()
	if len(all) != 1 || len(all[k1].allowed) != 2 {
		t.Errorf("all %+v, want k1 alone with both subnets", all)
	}
	if h := (wgHalf{backend.IPv6, "a"}); ps.halves[h].Subnet != netip.MustParsePrefix("fd42:0:0:2::/64") || len(ps.halves) != 2 {
		t.Errorf("halves %v", ps.halves)
	}
}

// TestAnswersFirst: of two nodes, exactly one holds back and lets the other dial first.
func TestAnswersFirst(t *testing.T) {
	keys := []backend.Key{{1}, {2}, {1, 9}, {0xff}, {0, 0, 1}}
	for _, a := range keys {
		if answersFirst(a, a) {
			t.Errorf("%v answers first to itself", a)
		}
		for _, b := range keys {
			if a != b && answersFirst(a, b) == answersFirst(b, a) {
				t.Errorf("%v and %v: both answer first, or both dial (%v)", a, b, answersFirst(a, b))
			}
		}
	}
}

// TestWGPeersHeld: a held peer is due after the wait, once; the others' next deadline is
// told; a peer that goes is no longer held.
func TestWGPeersHeld(t *testing.T) {
	k1, k2, k3 := backend.Key{1}, backend.Key{2}, backend.Key{3}
	p := func(sn string, k backend.Key) backend.Peer {
		return backend.Peer{Subnet: netip.MustParsePrefix(sn), WireGuard: &backend.WireGuardPeer{Key: k, Endpoint: netip.MustParseAddrPort("192.0.2.5:51820")}}
	}
	ps := newWGPeers()
	ps.set(wgHalf{backend.IPv4, "a"}, p("10.42.1.0/24", k1))
	ps.set(wgHalf{backend.IPv4, "b"}, p("10.42.2.0/24", k2))
	ps.set(wgHalf{backend.IPv4, "c"}, p("10.42.3.0/24", k3))
	t0 := time.Unix(1000, 0)
	ps.hold(k1, t0)
	ps.hold(k2, t0.Add(300*time.Millisecond))
	ps.hold(k3, t0)
	if !ps.isHeld(k1) || !ps.isHeld(k2) {
		t.Fatalf("held peers not held")
	}
	ps.set(wgHalf{backend.IPv4, "c"}, backend.Peer{})
	if ps.isHeld(k3) {
		t.Errorf("a peer that went is still held")
	}
	if keys, next := ps.due(t0.Add(500*time.Millisecond), time.Second); len(keys) != 0 || next != 500*time.Millisecond {
		t.Errorf("due before the wait: %v, next in %v; want none, next in 500ms", keys, next)
	}
	keys, next := ps.due(t0.Add(time.Second), time.Second)
	if !slices.Equal(keys, []backend.Key{k1}) || next != 300*time.Millisecond {
		t.Errorf("due at the wait: %v, next in %v; want %v, next in 300ms", keys, next, k1)
	}
	if ps.isHeld(k1) || !ps.isHeld(k2) {
		t.Errorf("after due: k1 held %v, k2 held %v", ps.isHeld(k1), ps.isHeld(k2))
	}
	if keys, next := ps.due(t0.Add(2*time.Second), time.Second); !slices.Equal(keys, []backend.Key{k2}) || next != 0 {
		t.Errorf("due later: %v, next in %v; want %v and none left", keys, next, k2)
	}
}
