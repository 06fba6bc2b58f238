package linux

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
)

// batches are a plan's writes as the writer makes them: described, in order, one slice per
// batch (empty batches left out).
func batches(pl plan) [][]string {
	var out [][]string
	var cur []string
	pl.walk(func(o op) { cur = append(cur, pl.describe(o)) }, func() {
		if len(cur) > 0 {
			out = append(out, cur)
			cur = nil
		}
	})
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// planModel is a model set up by a full Apply of node 10.244.1.0/24's State with peers, over
// flannel.1 on eth0, routes through nexthop objects.
func planModel(t *testing.T, peers backend.PeerMap) *model {
	t.Helper()
	cfg, err := subnet.ParseConfig([]byte(`{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`))
	if err != nil {
		t.Fatal(err)
	}
	st := &backend.State{Config: cfg, Own: pfx("10.244.1.0/24"), Underlay: "eth0",
		Device: &backend.VXLANDevice{Name: vx, VNI: 1}, Peers: peers}
	m := &model{}
	m.reset(st, true, false)
	return m
}

// vxPeer is an overlay peer: subnet 10.244.n.0/24, public IP 192.168.50.ip, VTEP MAC ending in m.
func vxPeer(n, ip, m byte) backend.Peer {
	return backend.Peer{Subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, n, 0}), 24),
		PublicIP: netip.AddrFrom4([4]byte{192, 168, 50, ip}), VTEPMAC: backend.MAC{0xaa, 0, 0, 0, 0, m}}
}

// hgPeer is a host-gw (DirectRouting) peer: subnet 10.244.n.0/24 via 192.168.50.ip on eth0.
func hgPeer(n, ip byte) backend.Peer {
	p := vxPeer(n, ip, 0)
	p.VTEPMAC = backend.MAC{}
	return p
}

// TestPlanPeers: the incremental plan from the model before and after the changes, in the
// writer's order: FDB and neighbours, then nexthops, then routes, then deletions of routes,
// then of what no route uses; an entry left alike is not written.
func TestPlanPeers(t *testing.T) {
	tests := []struct {
		name    string
		before  backend.PeerMap
		changes []backend.PeerChange
		want    [][]string
	}{
		{
			name:    "a peer joins",
			changes: []backend.PeerChange{{Key: "a", New: vxPeer(2, 2, 2)}},
			want: [][]string{
				{"setting FDB entry aa:00:00:00:00:02 dst 192.168.50.2 dev flannel.1", "setting neighbour 10.244.2.0 lladdr aa:00:00:00:00:02 dev flannel.1"},
				{"replacing nexthop id 1459617794 via 10.244.2.0 dev flannel.1 onlink"},
				{"replacing route 10.244.2.0/24 nhid 1459617794 via 10.244.2.0 dev flannel.1 onlink"},
			},
		},
		{
			name:    "a peer leaves",
			before:  backend.PeerMap{"a": vxPeer(2, 2, 2)},
			changes: []backend.PeerChange{{Key: "a", Old: vxPeer(2, 2, 2)}},
			want: [][]string{
				{"deleting route 10.244.2.0/24 nhid 1459617794 via 10.244.2.0 dev flannel.1 onlink"},
				{"deleting nexthop id 1459617794 via 10.244.2.0 dev flannel.1 onlink", "deleting neighbour 10.244.2.0 dev flannel.1",
					"deleting FDB entry aa:00:00:00:00:02 dst 192.168.50.2 dev flannel.1"},
			},
		},
		{
			name:    "a peer's public IP changes: only its FDB entry is replaced",
			before:  backend.PeerMap{"a": vxPeer(2, 2, 2)},
			changes: []backend.PeerChange{{Key: "a", Old: vxPeer(2, 2, 2), New: vxPeer(2, 9, 2)}},
			want:    [][]string{{"setting FDB entry aa:00:00:00:00:02 dst 192.168.50.9 dev flannel.1"}},
		},
		{
			name:    "a peer's VTEP MAC changes: FDB entry and neighbour set, the old MAC's entry deleted",
			before:  backend.PeerMap{"a": vxPeer(2, 2, 2)},
			changes: []backend.PeerChange{{Key: "a", Old: vxPeer(2, 2, 2), New: vxPeer(2, 2, 7)}},
			want: [][]string{
				{"setting FDB entry aa:00:00:00:00:07 dst 192.168.50.2 dev flannel.1", "setting neighbour 10.244.2.0 lladdr aa:00:00:00:00:07 dev flannel.1"},
				{"deleting FDB entry aa:00:00:00:00:02 dst 192.168.50.2 dev flannel.1"},
			},
		},
		{
			name:    "overlay to direct routing: the nexthop changes in place, the overlay entries go after",
			before:  backend.PeerMap{"a": vxPeer(2, 2, 2)},
			changes: []backend.PeerChange{{Key: "a", Old: vxPeer(2, 2, 2), New: hgPeer(2, 2)}},
			want: [][]string{
				{"replacing nexthop id 1459617794 via 192.168.50.2 dev eth0"},
				{"replacing route 10.244.2.0/24 nhid 1459617794 via 192.168.50.2 dev eth0"},
				{"deleting neighbour 10.244.2.0 dev flannel.1", "deleting FDB entry aa:00:00:00:00:02 dst 192.168.50.2 dev flannel.1"},
			},
		},
		{
			name:   "two keys swap subnets: each subnet's entries are replaced, nothing deleted",
			before: backend.PeerMap{"a": vxPeer(2, 2, 2), "b": vxPeer(3, 3, 3)},
			changes: []backend.PeerChange{
				{Key: "a", Old: vxPeer(2, 2, 2), New: vxPeer(3, 2, 2)},
				{Key: "b", Old: vxPeer(3, 3, 3), New: vxPeer(2, 3, 3)},
			},
			want: [][]string{{
				"setting neighbour 10.244.2.0 lladdr aa:00:00:00:00:03 dev flannel.1",
				"setting neighbour 10.244.3.0 lladdr aa:00:00:00:00:02 dev flannel.1",
			}},
		},
		{
			name:   "a node leaves and another joins with its MAC: the MAC's FDB entry moves, not deleted",
			before: backend.PeerMap{"a": vxPeer(2, 2, 2)},
			changes: []backend.PeerChange{
				{Key: "a", Old: vxPeer(2, 2, 2)},
				{Key: "b", New: vxPeer(4, 4, 2)},
			},
			want: [][]string{
				{"setting FDB entry aa:00:00:00:00:02 dst 192.168.50.4 dev flannel.1", "setting neighbour 10.244.4.0 lladdr aa:00:00:00:00:02 dev flannel.1"},
				{"replacing nexthop id 1459617796 via 10.244.4.0 dev flannel.1 onlink"},
				{"replacing route 10.244.4.0/24 nhid 1459617796 via 10.244.4.0 dev flannel.1 onlink"},
				{"deleting route 10.244.2.0/24 nhid 1459617794 via 10.244.2.0 dev flannel.1 onlink"},
				{"deleting nexthop id 1459617794 via 10.244.2.0 dev flannel.1 onlink", "deleting neighbour 10.244.2.0 dev flannel.1"},
			},
		},
		{
			// The model, not the change's Old, says what was programmed.
			name:    "Old disagrees with the model: the model's entries are deleted",
			before:  backend.PeerMap{"a": vxPeer(2, 2, 2)},
			changes: []backend.PeerChange{{Key: "a", Old: vxPeer(2, 8, 8)}},
			want: [][]string{
				{"deleting route 10.244.2.0/24 nhid 1459617794 via 10.244.2.0 dev flannel.1 onlink"},
				{"deleting nexthop id 1459617794 via 10.244.2.0 dev flannel.1 onlink", "deleting neighbour 10.244.2.0 dev flannel.1",
					"deleting FDB entry aa:00:00:00:00:02 dst 192.168.50.2 dev flannel.1"},
			},
		},
		{
			name:    "a peer the model never programmed leaves: nothing to write",
			before:  backend.PeerMap{"a": vxPeer(2, 2, 2)},
			changes: []backend.PeerChange{{Key: "z", Old: vxPeer(9, 9, 9)}},
		},
		{
			name:    "a change to what is already programmed: nothing to write",
			before:  backend.PeerMap{"a": vxPeer(2, 2, 2)},
			changes: []backend.PeerChange{{Key: "a", Old: vxPeer(2, 2, 2), New: vxPeer(2, 2, 2)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before == nil {
				tt.before = backend.PeerMap{}
			}
			m := planModel(t, tt.before)
			got := batches(m.change(tt.changes))
			if !slices.EqualFunc(got, tt.want, slices.Equal) {
				t.Errorf("plan:\n got %s\nwant %s", render(got), render(tt.want))
			}
		})
	}
}

func render(b [][]string) string {
	var s []string
	for _, w := range b {
		s = append(s, "["+strings.Join(w, "; ")+"]")
	}
	return strings.Join(s, "\n     ")
}

// TestPlanModelFollows: after an incremental plan the model holds what the State holds, so
// that the next change starts from it and Watch takes the plane's writes for its own.
func TestPlanModelFollows(t *testing.T) {
	m := planModel(t, backend.PeerMap{"a": vxPeer(2, 2, 2), "b": vxPeer(3, 3, 3)})
	m.change([]backend.PeerChange{
		{Key: "a", Old: vxPeer(2, 2, 2), New: vxPeer(3, 2, 2)},
		{Key: "b", Old: vxPeer(3, 3, 3), New: vxPeer(2, 3, 3)},
		{Key: "c", New: hgPeer(5, 5)},
	})
	for _, want := range []backend.Peer{vxPeer(3, 2, 2), vxPeer(2, 3, 3), hgPeer(5, 5)} {
		if got, ok := m.get(want.Subnet); !ok || got != want {
			t.Errorf("model at %s = %v, %t; want %v", want.Subnet, got, ok, want)
		}
	}
	for mac, sn := range map[backend.MAC]netip.Prefix{{0xaa, 0, 0, 0, 0, 2}: pfx("10.244.3.0/24"), {0xaa, 0, 0, 0, 0, 3}: pfx("10.244.2.0/24")} {
		if got, ok := m.subnetOf(mac); !ok || got != sn {
			t.Errorf("model's MAC %s at %s, %t; want %s", mac, got, ok, sn)
		}
	}
	// The next change starts from there: c leaving deletes its host-gw route and nexthop.
	got := batches(m.change([]backend.PeerChange{{Key: "c", Old: hgPeer(5, 5)}}))
	want := [][]string{{"deleting route 10.244.5.0/24 nhid 1459617797 via 192.168.50.5 dev eth0"}, {"deleting nexthop id 1459617797 via 192.168.50.5 dev eth0"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("plan:\n got %s\nwant %s", render(got), render(want))
	}
}

// TestPlanFullOrder: a full Apply's plan is written in the same order as an incremental
// one's, the device's addresses first and last.
func TestPlanFullOrder(t *testing.T) {
	want := Want{
		Device:    vx,
		Addrs:     []netip.Prefix{pfx("10.244.1.0/32")},
		Nexthops:  []Nexthop{{ID: nexthopTag | 2, Gw: ip("10.244.2.0"), Dev: vx, Onlink: true}},
		Routes:    []Route{{Dst: pfx("10.244.2.0/24"), Gw: ip("10.244.2.0"), Dev: vx, Onlink: true, NH: nexthopTag | 2}},
		Neighbors: []Neighbor{neigh("10.244.2.0", "aa:00:00:00:00:02", vx, true).Neighbor},
		FDB:       []FDBEntry{fdb("aa:00:00:00:00:02", "192.168.50.2", vx, true).FDBEntry},
	}
	have := kernelState{
		Nexthops:  []kernelNexthop{{Nexthop: Nexthop{ID: nexthopTag | 3, Gw: ip("10.244.3.0"), Dev: vx, Onlink: true}}},
		Routes:    []kernelRoute{kr(Route{Dst: pfx("10.244.3.0/24"), Gw: ip("10.244.3.0"), Dev: vx, Onlink: true, NH: nexthopTag | 3})},
		Neighbors: []kernelNeighbor{neigh("10.244.3.0", "aa:00:00:00:00:03", vx, true)},
		FDB:       []kernelFDB{fdb("aa:00:00:00:00:03", "192.168.50.3", vx, true)},
		Addrs:     []netip.Prefix{pfx("10.244.9.0/32")},
	}
	got := batches(diff(want, have, testOwn()))
	wantB := [][]string{
		{"adding address 10.244.1.0/32", "setting FDB entry aa:00:00:00:00:02 dst 192.168.50.2 dev flannel.1",
			"setting neighbour 10.244.2.0 lladdr aa:00:00:00:00:02 dev flannel.1"},
		{"replacing nexthop id 1459617794 via 10.244.2.0 dev flannel.1 onlink"},
		{"replacing route 10.244.2.0/24 nhid 1459617794 via 10.244.2.0 dev flannel.1 onlink"},
		{"deleting route 10.244.3.0/24 nhid 1459617795 via 10.244.3.0 dev flannel.1 onlink"},
		{"deleting nexthop id 1459617795 via 10.244.3.0 dev flannel.1 onlink", "deleting neighbour 10.244.3.0 dev flannel.1",
			"deleting FDB entry aa:00:00:00:00:03 dst 192.168.50.3 dev flannel.1"},
		{"deleting address 10.244.9.0/32"},
	}
	if !slices.EqualFunc(got, wantB, slices.Equal) {
		t.Errorf("plan:\n got %s\nwant %s", render(got), render(wantB))
	}
}
