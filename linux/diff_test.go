package linux

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
)

const vx = "flannel.1"

// testOwn is node 10.244.1.0/24 of a dual-stack cluster.
func testOwn() Ownership {
	return Ownership{
		Networks: []netip.Prefix{pfx("10.244.0.0/16"), pfx("fd00:10:244::/56")},
		Own:      []netip.Prefix{pfx("10.244.1.0/24"), pfx("fd00:10:244:1::/64")},
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ip(s string) netip.Addr    { return netip.MustParseAddr(s) }

func mac(s string) backend.MAC {
	m, err := backend.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

// vxRoute is the route flannel programs to a peer's subnet over VXLAN.
func vxRoute(dst string) Route {
	p := pfx(dst)
	return Route{Dst: p, Gw: p.Addr(), Dev: vx, Onlink: true}
}

func hgRoute(dst, gw string) Route {
	return Route{Dst: pfx(dst), Gw: ip(gw), Dev: "eth0"}
}

// kr is a route as the kernel reports one of ours: default metric, proto boot.
func kr(r Route) kernelRoute { return kernelRoute{Route: r, Metric: defaultMetric(r.Dst)} }

func pick[T any](have []T, idx []int) []T {
	var out []T
	for _, i := range idx {
		out = append(out, have[i])
	}
	return out
}

func TestDiffRoutes(t *testing.T) {
	hostGW := testOwn()
	hostGW.Devices = []string{"eth0"}
	tests := []struct {
		name    string
		own     Ownership
		want    []Route
		have    []kernelRoute
		wantSet []Route
		wantDel []kernelRoute
	}{
		{
			name:    "empty kernel: add all",
			want:    []Route{vxRoute("10.244.2.0/24"), vxRoute("fd00:10:244:2::/64")},
			wantSet: []Route{vxRoute("10.244.2.0/24"), vxRoute("fd00:10:244:2::/64")},
		},
		{
			name: "in place: nothing",
			want: []Route{vxRoute("10.244.2.0/24"), vxRoute("fd00:10:244:2::/64")},
			have: []kernelRoute{kr(vxRoute("10.244.2.0/24")), kr(vxRoute("fd00:10:244:2::/64"))},
		},
		{
			name:    "same Dst, other gateway: one replace, no delete",
			want:    []Route{hgRoute("10.244.2.0/24", "192.168.50.2")},
			have:    []kernelRoute{kr(hgRoute("10.244.2.0/24", "192.168.50.9"))},
			own:     hostGW,
			wantSet: []Route{hgRoute("10.244.2.0/24", "192.168.50.2")},
		},
		{
			name:    "flanneld left the route without onlink: replace",
			want:    []Route{vxRoute("10.244.2.0/24")},
			have:    []kernelRoute{kr(Route{Dst: pfx("10.244.2.0/24"), Gw: ip("10.244.2.0"), Dev: vx})},
			wantSet: []Route{vxRoute("10.244.2.0/24")},
		},
		{
			name: "moved from VXLAN to direct routing: replace, no delete",
			want: []Route{hgRoute("10.244.2.0/24", "192.168.50.2")},
			have: []kernelRoute{kr(vxRoute("10.244.2.0/24"))},
			wantSet: []Route{
				hgRoute("10.244.2.0/24", "192.168.50.2"),
			},
		},
		{
			name:    "other metric: replace, then delete the old one",
			want:    []Route{vxRoute("10.244.2.0/24")},
			have:    []kernelRoute{{Route: vxRoute("10.244.2.0/24"), Metric: 100}},
			wantSet: []Route{vxRoute("10.244.2.0/24")},
			wantDel: []kernelRoute{{Route: vxRoute("10.244.2.0/24"), Metric: 100}},
		},
		{
			name: "appended duplicate of a kept route: delete the duplicate",
			want: []Route{vxRoute("10.244.2.0/24")},
			have: []kernelRoute{
				kr(Route{Dst: pfx("10.244.2.0/24"), Gw: ip("10.244.2.9"), Dev: vx, Onlink: true}),
				kr(vxRoute("10.244.2.0/24")),
			},
			wantDel: []kernelRoute{kr(Route{Dst: pfx("10.244.2.0/24"), Gw: ip("10.244.2.9"), Dev: vx, Onlink: true})},
		},
		{
			name:    "stale peer on the VXLAN device: delete",
			want:    []Route{vxRoute("10.244.2.0/24")},
			have:    []kernelRoute{kr(vxRoute("10.244.2.0/24")), kr(vxRoute("10.244.9.0/24")), kr(vxRoute("fd00:10:244:9::/64"))},
			wantDel: []kernelRoute{kr(vxRoute("10.244.9.0/24")), kr(vxRoute("fd00:10:244:9::/64"))},
		},
		{
			name: "not ours: never deleted",
			want: []Route{vxRoute("10.244.2.0/24")},
			have: []kernelRoute{
				kr(vxRoute("10.244.2.0/24")),
				{Route: Route{Dst: pfx("10.244.7.0/24"), Dev: vx}, ProtoKernel: true},
				kr(Route{Dst: pfx("172.16.0.0/16"), Dev: vx}),                             // outside Networks
				kr(Route{Dst: pfx("10.244.1.0/24"), Dev: vx}),                             // own subnet
				kr(Route{Dst: pfx("10.244.1.128/25"), Gw: ip("10.244.1.2"), Dev: vx}),     // inside own subnet
				kr(Route{Dst: pfx("fd00:10:244:1::/64"), Dev: vx}),                        // own IPv6 subnet
				kr(Route{Dst: pfx("10.244.5.0/24"), Dev: "cni0"}),                         // other device, no gateway
				kr(Route{Dst: pfx("10.244.6.0/24"), Gw: ip("192.168.50.6"), Dev: "eth1"}), // device we do not route through
				kr(Route{Dst: pfx("10.99.0.0/16"), Gw: ip("192.168.50.2"), Dev: "eth0"}),  // outside Networks
				kr(Route{Dst: pfx("10.244.8.0/24")}),                                      // multipath or blackhole
				kr(Route{Dst: pfx("10.0.0.0/8"), Gw: ip("192.168.50.254"), Dev: "eth0"}),  // covers Networks, not inside
			},
		},
		{
			name: "host-gw: a gatewayed route on the routed device is ours, one without a gateway is not",
			want: []Route{hgRoute("10.244.2.0/24", "192.168.50.2")},
			have: []kernelRoute{
				kr(hgRoute("10.244.2.0/24", "192.168.50.2")),
				kr(hgRoute("10.244.3.0/24", "192.168.50.3")),
				kr(Route{Dst: pfx("10.244.4.0/24"), Dev: "eth0"}),
			},
			wantDel: []kernelRoute{kr(hgRoute("10.244.3.0/24", "192.168.50.3"))},
		},
		{
			name:    "host-gw, last peer gone: Devices still marks its route ours",
			own:     hostGW,
			have:    []kernelRoute{kr(hgRoute("10.244.3.0/24", "192.168.50.3"))},
			wantDel: []kernelRoute{kr(hgRoute("10.244.3.0/24", "192.168.50.3"))},
		},
		{
			name: "host-gw, last peer gone, no Devices: nothing says the route is ours",
			have: []kernelRoute{kr(hgRoute("10.244.3.0/24", "192.168.50.3"))},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			own := tt.own
			if own.Networks == nil {
				own = testOwn()
			}
			set, del := diffRoutes(listOf(tt.want), tt.have, routeOwner(listOf(tt.want), vx, own))
			if !slices.Equal(set.slice(), tt.wantSet) {
				t.Errorf("set:\n got %v\nwant %v", set, tt.wantSet)
			}
			if got := pick(tt.have, del); !slices.Equal(got, tt.wantDel) {
				t.Errorf("delete:\n got %v\nwant %v", got, tt.wantDel)
			}
		})
	}
}

func neigh(ipS, macS string, dev string, permanent bool) kernelNeighbor {
	return kernelNeighbor{Neighbor: Neighbor{IP: ip(ipS), MAC: mac(macS), Dev: dev}, Permanent: permanent}
}

func TestDiffNeighbors(t *testing.T) {
	const m2, m3 = "aa:00:00:00:00:02", "aa:00:00:00:00:03"
	tests := []struct {
		name    string
		want    []Neighbor
		have    []kernelNeighbor
		wantSet []Neighbor
		wantDel []kernelNeighbor
	}{
		{
			name:    "add",
			want:    []Neighbor{neigh("10.244.2.0", m2, vx, true).Neighbor},
			wantSet: []Neighbor{neigh("10.244.2.0", m2, vx, true).Neighbor},
		},
		{
			name: "in place",
			want: []Neighbor{neigh("10.244.2.0", m2, vx, true).Neighbor},
			have: []kernelNeighbor{neigh("10.244.2.0", m2, vx, true)},
		},
		{
			name:    "new MAC: replace only",
			want:    []Neighbor{neigh("10.244.2.0", m3, vx, true).Neighbor},
			have:    []kernelNeighbor{neigh("10.244.2.0", m2, vx, true)},
			wantSet: []Neighbor{neigh("10.244.2.0", m3, vx, true).Neighbor},
		},
		{
			name:    "right MAC but not permanent: made permanent",
			want:    []Neighbor{neigh("10.244.2.0", m2, vx, true).Neighbor},
			have:    []kernelNeighbor{neigh("10.244.2.0", m2, vx, false)},
			wantSet: []Neighbor{neigh("10.244.2.0", m2, vx, true).Neighbor},
		},
		{
			name: "stale permanent on the VXLAN device: delete; others stay",
			have: []kernelNeighbor{
				neigh("10.244.9.0", m2, vx, true),
				neigh("fd00:10:244:9::", m2, vx, true),
				neigh("10.244.8.0", m2, vx, false),               // not permanent
				neigh("192.168.50.9", m3, "eth0", true),          // other device
				neigh("fe80::1", "33:33:00:00:00:01", vx, false), // kernel's own
			},
			wantDel: []kernelNeighbor{neigh("10.244.9.0", m2, vx, true), neigh("fd00:10:244:9::", m2, vx, true)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, del := diffNeighbors(listOf(tt.want), tt.have, vx)
			if !slices.Equal(set.slice(), tt.wantSet) {
				t.Errorf("set:\n got %v\nwant %v", set, tt.wantSet)
			}
			if got := pick(tt.have, del); !slices.Equal(got, tt.wantDel) {
				t.Errorf("delete:\n got %v\nwant %v", got, tt.wantDel)
			}
		})
	}
}

func fdb(macS, dst, dev string, permanent bool) kernelFDB {
	f := kernelFDB{FDBEntry: FDBEntry{MAC: mac(macS), Dev: dev}, Permanent: permanent}
	if dst != "" {
		f.Dst = ip(dst)
	}
	return f
}

func TestDiffFDB(t *testing.T) {
	const m2, m3 = "aa:00:00:00:00:02", "aa:00:00:00:00:03"
	tests := []struct {
		name    string
		want    []FDBEntry
		have    []kernelFDB
		wantSet []FDBEntry
		wantDel []kernelFDB
	}{
		{
			name:    "add",
			want:    []FDBEntry{fdb(m2, "192.168.50.2", vx, true).FDBEntry},
			wantSet: []FDBEntry{fdb(m2, "192.168.50.2", vx, true).FDBEntry},
		},
		{
			name: "in place",
			want: []FDBEntry{fdb(m2, "192.168.50.2", vx, true).FDBEntry},
			have: []kernelFDB{fdb(m2, "192.168.50.2", vx, true)},
		},
		{
			name:    "peer's public IP changed: replace only",
			want:    []FDBEntry{fdb(m2, "192.168.50.22", vx, true).FDBEntry},
			have:    []kernelFDB{fdb(m2, "192.168.50.2", vx, true)},
			wantSet: []FDBEntry{fdb(m2, "192.168.50.22", vx, true).FDBEntry},
		},
		{
			name:    "peer's VtepMAC changed: add the new MAC, delete the old",
			want:    []FDBEntry{fdb(m3, "192.168.50.2", vx, true).FDBEntry},
			have:    []kernelFDB{fdb(m2, "192.168.50.2", vx, true)},
			wantSet: []FDBEntry{fdb(m3, "192.168.50.2", vx, true).FDBEntry},
			wantDel: []kernelFDB{fdb(m2, "192.168.50.2", vx, true)},
		},
		{
			name: "stale: delete; not ours: stay",
			have: []kernelFDB{
				fdb(m2, "192.168.50.2", vx, true),
				fdb("00:00:00:00:00:00", "192.168.50.7", vx, true),  // flooding default
				fdb(m3, "239.1.1.1", vx, true),                      // multicast destination
				fdb(m3, "0.0.0.0", vx, true),                        // no destination
				fdb("aa:00:00:00:00:04", "", vx, true),              // no destination IP
				fdb("aa:00:00:00:00:05", "192.168.50.5", vx, false), // learned
				fdb("aa:00:00:00:00:06", "192.168.50.6", "vxlan9", true),
			},
			wantDel: []kernelFDB{fdb(m2, "192.168.50.2", vx, true)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, del := diffFDB(listOf(tt.want), tt.have, vx)
			if !slices.Equal(set.slice(), tt.wantSet) {
				t.Errorf("set:\n got %v\nwant %v", set, tt.wantSet)
			}
			if got := pick(tt.have, del); !slices.Equal(got, tt.wantDel) {
				t.Errorf("delete:\n got %v\nwant %v", got, tt.wantDel)
			}
		})
	}
}

func TestDiffAddrs(t *testing.T) {
	tests := []struct {
		name    string
		want    []netip.Prefix
		have    []netip.Prefix
		wantAdd []netip.Prefix
		wantDel []netip.Prefix
	}{
		{
			name:    "add",
			want:    []netip.Prefix{pfx("10.244.1.0/32"), pfx("fd00:10:244:1::/128")},
			have:    []netip.Prefix{pfx("fe80::1/64")},
			wantAdd: []netip.Prefix{pfx("10.244.1.0/32"), pfx("fd00:10:244:1::/128")},
		},
		{
			name: "in place",
			want: []netip.Prefix{pfx("10.244.1.0/32")},
			have: []netip.Prefix{pfx("fe80::1/64"), pfx("10.244.1.0/32")},
		},
		{
			name:    "old subnet's address: replaced; outside Networks: stays",
			want:    []netip.Prefix{pfx("10.244.1.0/32")},
			have:    []netip.Prefix{pfx("10.244.3.0/32"), pfx("192.168.7.1/24"), pfx("fe80::1/64")},
			wantAdd: []netip.Prefix{pfx("10.244.1.0/32")},
			wantDel: []netip.Prefix{pfx("10.244.3.0/32")},
		},
		{
			name:    "same address, other length: replaced",
			want:    []netip.Prefix{pfx("10.244.1.0/32")},
			have:    []netip.Prefix{pfx("10.244.1.0/16")},
			wantAdd: []netip.Prefix{pfx("10.244.1.0/32")},
			wantDel: []netip.Prefix{pfx("10.244.1.0/16")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			add, del := diffAddrs(tt.want, tt.have, testOwn().Networks)
			if !slices.Equal(add, tt.wantAdd) {
				t.Errorf("add:\n got %v\nwant %v", add, tt.wantAdd)
			}
			if got := pick(tt.have, del); !slices.Equal(got, tt.wantDel) {
				t.Errorf("delete:\n got %v\nwant %v", got, tt.wantDel)
			}
		})
	}
}

// TestDiffHostGW: with no VXLAN device in the State nothing on any VXLAN device is ours,
// not even neighbours and FDB entries that look like flannel's.
func TestDiffHostGW(t *testing.T) {
	st := Want{Routes: []Route{hgRoute("10.244.2.0/24", "192.168.50.2")}}
	have := kernelState{
		Routes:    []kernelRoute{kr(vxRoute("10.244.3.0/24"))},
		Neighbors: []kernelNeighbor{neigh("10.244.3.0", "aa:00:00:00:00:03", vx, true)},
		FDB:       []kernelFDB{fdb("aa:00:00:00:00:03", "192.168.50.3", vx, true)},
	}
	p := diff(st, have, testOwn())
	want := plan{SetRoutes: listOf(st.Routes)}
	if !slices.Equal(p.SetRoutes.slice(), st.Routes) || len(p.DelRoutes)+len(p.DelNeighbors)+len(p.DelFDB)+len(p.DelAddrs) != 0 {
		t.Errorf("plan = %+v, want %+v", p, want)
	}
}

// TestDiffConverged: a kernel that already matches the State needs no write at all.
func TestDiffConverged(t *testing.T) {
	st := Want{
		Device:    vx,
		Addrs:     []netip.Prefix{pfx("10.244.1.0/32")},
		Routes:    []Route{vxRoute("10.244.2.0/24")},
		Neighbors: []Neighbor{neigh("10.244.2.0", "aa:00:00:00:00:02", vx, true).Neighbor},
		FDB:       []FDBEntry{fdb("aa:00:00:00:00:02", "192.168.50.2", vx, true).FDBEntry},
	}
	have := kernelState{
		Routes:    []kernelRoute{kr(st.Routes[0]), {Route: Route{Dst: pfx("192.168.50.0/24"), Dev: "eth0"}, ProtoKernel: true}},
		Neighbors: []kernelNeighbor{{Neighbor: st.Neighbors[0], Permanent: true}},
		FDB:       []kernelFDB{{FDBEntry: st.FDB[0], Permanent: true}, fdb("00:00:00:00:00:00", "192.168.50.9", vx, true)},
		Addrs:     []netip.Prefix{pfx("10.244.1.0/32"), pfx("fe80::aa/64")},
	}
	if p := diff(st, have, testOwn()); !p.empty() {
		t.Errorf("plan = %+v, want empty", p)
	}
}

func TestChangesString(t *testing.T) {
	c := Changes{RoutesAdded: 3, NeighborsRemoved: 1, FDBAdded: 2, AddrsAdded: 1}
	const want = "nexthops +0 -0, routes +3 -0, neighbours +0 -1, fdb +2 -0, addresses +1 -0"
	if got := c.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// peersOf is the peers of a State built by hand, to change.
func peersOf(st *backend.State) backend.PeerMap { return st.Peers.(backend.PeerMap) }

// BenchmarkDiff20k: the full diff of 20k peers (start-up, resync, drift): the kernel holds
// every entry but one route, which has another gateway.
func BenchmarkDiff20k(b *testing.B) {
	cfg, err := subnet.ParseConfig([]byte(`{"Network":"10.0.0.0/8","Backend":{"Type":"vxlan"}}`))
	if err != nil {
		b.Fatal(err)
	}
	st := &backend.State{Config: cfg, Own: pfx("10.0.0.0/24"), Underlay: "eth0",
		Device: &backend.VXLANDevice{Name: vx, VNI: 1}, Peers: backend.PeerMap{}}
	for i := 1; i <= 20000; i++ {
		sn := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
		peersOf(st)[sn.String()] = backend.Peer{Subnet: sn, PublicIP: netip.AddrFrom4([4]byte{172, 16, byte(i >> 8), byte(i)}),
			VTEPMAC: backend.MAC{0x0e, 0, 0, 0, byte(i >> 8), byte(i)}}
	}
	want, own := WantOf(st, true)
	nexthops, routes, neighbors, fdbs := want.Entries()
	var have kernelState
	for _, n := range nexthops {
		have.Nexthops = append(have.Nexthops, kernelNexthop{Nexthop: n})
	}
	for _, r := range routes {
		have.Routes = append(have.Routes, kernelRoute{Route: r})
	}
	have.Routes[100].NH = 0
	for _, n := range neighbors {
		have.Neighbors = append(have.Neighbors, kernelNeighbor{Neighbor: n, Permanent: true})
	}
	for _, f := range fdbs {
		have.FDB = append(have.FDB, kernelFDB{FDBEntry: f, Permanent: true})
	}
	have.Addrs = want.Addrs
	b.ReportAllocs()
	for b.Loop() {
		if p := diff(want, have, own); p.SetRoutes.Len() != 1 {
			b.Fatalf("plan sets %d routes, want 1", p.SetRoutes.Len())
		}
	}
}

// TestOwnershipFamily: a plane of one family dumps only its family's routes; ownership of
// both (or none) dumps all.
func TestOwnershipFamily(t *testing.T) {
	for _, c := range []struct {
		nets []netip.Prefix
		want uint8
	}{
		{[]netip.Prefix{pfx("10.244.0.0/16")}, 2},
		{[]netip.Prefix{pfx("fd00:10:244::/56")}, 10},
		{[]netip.Prefix{pfx("10.244.0.0/16"), pfx("fd00:10:244::/56")}, 0},
		{nil, 0},
	} {
		if got := (Ownership{Networks: c.nets}).family(); got != c.want {
			t.Errorf("%v: family %d, want %d", c.nets, got, c.want)
		}
	}
}

// TestDiffBlackhole: --ip-blackhole-route's route is added when missing and kept when there;
// of the blackhole routes, the diff owns only that one (own subnet, default metric), never
// another's, and without the flag not even that one.
func TestDiffBlackhole(t *testing.T) {
	w, own := Want{Routes: []Route{vxRoute("10.244.2.0/24")}}, testOwn()
	AddBlackhole(&w, &own, pfx("10.244.1.1/24"))
	bh := Route{Dst: pfx("10.244.1.0/24"), Blackhole: true}
	if !slices.Contains(w.Routes, bh) || own.Blackhole != pfx("10.244.1.0/24") {
		t.Fatalf("AddBlackhole: routes %v, ownership %v", w.Routes, own.Blackhole)
	}
	bridge := kernelRoute{Route: Route{Dst: pfx("10.244.1.0/24"), Dev: "cni0"}, ProtoKernel: true}
	others := []kernelRoute{
		bridge,
		{Route: Route{Dst: pfx("10.244.1.0/24"), Blackhole: true}, Metric: 100}, // another metric: not ours
		kr(Route{Dst: pfx("10.244.7.0/26"), Blackhole: true}),                   // Calico's block
		kr(Route{Dst: pfx("192.168.9.0/24"), Blackhole: true}),
	}
	have := append([]kernelRoute{kr(vxRoute("10.244.2.0/24"))}, others...)
	set, del := diffRoutes(w.routes(), have, routeOwner(w.routes(), vx, own))
	if !slices.Equal(set.slice(), []Route{bh}) || len(del) != 0 {
		t.Errorf("missing blackhole: set %v, delete %v; want set [%v], delete none", set, pick(have, del), bh)
	}
	have = append(have, kr(bh))
	if set, del := diffRoutes(w.routes(), have, routeOwner(w.routes(), vx, own)); set.Len()+len(del) != 0 {
		t.Errorf("blackhole there: set %v, delete %v; want nothing", set, pick(have, del))
	}
	// Without the flag, nothing of it is the plane's: a blackhole already there stays.
	w2, own2 := Want{Routes: []Route{vxRoute("10.244.2.0/24")}}, testOwn()
	if set, del := diffRoutes(w2.routes(), have, routeOwner(w2.routes(), vx, own2)); set.Len()+len(del) != 0 {
		t.Errorf("without the flag: set %v, delete %v; want nothing", set, pick(have, del))
	}
	// A unicast route where the blackhole is wanted is not it.
	if sameRoute(kr(vxRoute("10.244.1.0/24")), bh) || sameRoute(kr(bh), vxRoute("10.244.1.0/24")) {
		t.Error("a blackhole and a unicast route to one destination compare the same")
	}
}

// TestSubset: the entries to set are the wanted ones themselves, not a copy, when they are
// all of them (a cold start); else those picked, in order, and none for no index.
func TestSubset(t *testing.T) {
	want := listOf([]int{10, 11, 12, 13})
	if got := subset(want, []int32{0, 1, 2, 3}); got.idx != nil || !slices.Equal(got.slice(), want.given) {
		t.Errorf("every index: %v (picking %v), want the list itself", got.slice(), got.idx)
	}
	got := subset(want, []int32{1, 3})
	if !slices.Equal(got.slice(), []int{11, 13}) || got.Len() != 2 || got.get(1) != 13 {
		t.Errorf("some: %v, want [11 13]", got.slice())
	}
	if again := subset(got, []int32{1}); !slices.Equal(again.slice(), []int{13}) {
		t.Errorf("a subset of a subset: %v, want [13]", again.slice())
	}
	if got := subset(want, nil); got.Len() != 0 {
		t.Errorf("none: %v, want none", got.slice())
	}
}

// TestWantOfPeers: a Want made of a State holds, kind by kind, the entries that entriesOf
// makes of each peer, whether the peer table keeps it compact (an IPv4 /24) or whole (another
// subnet length, an IPv6 public IP), and no entry of a kind a peer has none of (a DirectRouting
// peer's neighbour and FDB entry).
func TestWantOfPeers(t *testing.T) {
	cfg, err := subnet.ParseConfig([]byte(`{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`))
	if err != nil {
		t.Fatal(err)
	}
	odd := vxPeer(4, 4, 4)
	odd.Subnet = pfx("10.244.4.0/25")
	v6 := vxPeer(5, 5, 5)
	v6.PublicIP = ip("fd00::5")
	peers := backend.PeerMap{"a": vxPeer(2, 2, 2), "b": hgPeer(3, 3), "c": odd, "d": v6}
	st := &backend.State{Config: cfg, Own: pfx("10.244.1.0/24"), Underlay: "eth0",
		Device: &backend.VXLANDevice{Name: vx, VNI: 1}, Peers: peers}
	w, _ := WantOf(st, true)
	if w.peers.len() != 4 || len(w.peers.v4) != 2 {
		t.Fatalf("peer table of %d peers, %d compact; want 4, 2", w.peers.len(), len(w.peers.v4))
	}
	nexthops, routes, neighbors, fdbs := w.Entries()
	l := layoutOf(st, true)
	var wantNH []Nexthop
	var wantRoutes []Route
	var wantNeigh []Neighbor
	var wantFDB []FDBEntry
	for i := range w.peers.len() {
		p := w.peers.peer(i)
		if got, ok := peers[map[byte]string{2: "a", 3: "b", 4: "c", 5: "d"}[p.Subnet.Addr().As4()[2]]]; !ok || got != p {
			t.Errorf("table's peer %d is %v, not one of the State's", i, p)
		}
		e := l.entriesOf(p)
		wantRoutes = append(wantRoutes, e.route)
		wantNH = append(wantNH, e.nh)
		if e.overlay {
			wantNeigh, wantFDB = append(wantNeigh, e.neigh), append(wantFDB, e.fdb)
		}
	}
	if !slices.Equal(nexthops, wantNH) || !slices.Equal(routes, wantRoutes) || !slices.Equal(neighbors, wantNeigh) || !slices.Equal(fdbs, wantFDB) {
		t.Errorf("entries:\n got %v\n     %v\n     %v\n     %v\nwant %v\n     %v\n     %v\n     %v",
			nexthops, routes, neighbors, fdbs, wantNH, wantRoutes, wantNeigh, wantFDB)
	}
	if len(neighbors) != 3 {
		t.Errorf("%d neighbours, want 3 (the DirectRouting peer has none)", len(neighbors))
	}
	// A cold start writes them all; the plan reads the Want's own lists.
	pl := diff(w, kernelState{}, Ownership{Networks: []netip.Prefix{pfx("10.244.0.0/16")}})
	if !slices.Equal(pl.SetRoutes.slice(), routes) || !slices.Equal(pl.SetFDB.slice(), fdbs) || pl.SetFDB.Len() != 3 {
		t.Errorf("cold start's plan: routes %v, FDB %v; want %v, %v", pl.SetRoutes.slice(), pl.SetFDB.slice(), routes, fdbs)
	}
}
