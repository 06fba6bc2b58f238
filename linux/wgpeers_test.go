package linux

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/weftnet/weft/backend"
)

// TestWGPeersMergeFamilies: on a device both families use (flannel's single-tunnel modes), a
// peer lease's two halves are one WireGuard peer with both subnets as allowed IPs; removing a
// half leaves the other's, removing both removes the peer, and a half whose key changes
// touches the old key's peer and the new one's. Each change names just the keys it touches.
func TestWGPeersMergeFamilies(t *testing.T) {
	k1, k2 := backend.Key{1}, backend.Key{2}
	ep := netip.MustParseAddrPort("192.0.2.5:51820")
	v4 := backend.Peer{Subnet: netip.MustParsePrefix("10.42.2.0/24"), WGKey: k1, WGEndpoint: ep}
	v6 := backend.Peer{Subnet: netip.MustParsePrefix("fd42:0:0:2::/64"), WGKey: k1, WGEndpoint: ep}
	ps := newWGPeers()
	if got := ps.set(wgHalf{backend.IPv4, "a"}, v4); !slices.Equal(got, []backend.Key{k1}) {
		t.Errorf("adding the IPv4 half touched %v", got)
	}
	if got := ps.set(wgHalf{backend.IPv6, "a"}, v6); !slices.Equal(got, []backend.Key{k1}) {
		t.Errorf("adding the IPv6 half touched %v", got)
	}
	if got := ps.set(wgHalf{backend.IPv6, "a"}, v6); got != nil {
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
	moved.WGKey = k2
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
		return backend.Peer{Subnet: netip.MustParsePrefix(sn), WGKey: k, WGEndpoint: netip.MustParseAddrPort("192.0.2.5:51820")}
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
