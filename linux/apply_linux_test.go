package linux

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
)

// testState is the State of node 10.244.1.0/24 (vxlan, or host-gw without a device) on ul0.
func testState(tb testing.TB, vxlan bool) *backend.State {
	tb.Helper()
	cfg, err := subnet.ParseConfig([]byte(`{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`))
	if err != nil {
		tb.Fatal(err)
	}
	st := &backend.State{Config: cfg, Own: pfx("10.244.1.0/24"), Underlay: "ul0", Peers: backend.PeerMap{}}
	if vxlan {
		dev := testDevice()
		st.Device = &dev
	}
	return st
}

// randomPeer is peer i of a small space, on the overlay or (direct) on ul0.
func randomPeer(rng *rand.Rand) (string, backend.Peer) {
	i := 2 + rng.IntN(10)
	p := backend.Peer{
		Subnet:   netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24),
		PublicIP: netip.AddrFrom4([4]byte{192, 168, 50, byte(2 + rng.IntN(10))}),
	}
	if rng.IntN(4) != 0 {
		p.VTEPMAC = backend.MAC{0xaa, 0, 0, 0, byte(rng.IntN(3)), byte(i)}
	}
	return p.Subnet.String(), p
}

func (f *fixture) apply(st *backend.State, u backend.Update) backend.Changes {
	f.tb.Helper()
	c, err := f.p.Apply(context.Background(), st, u)
	if err != nil {
		f.tb.Fatalf("Apply(full %t): %v", u.Full, err)
	}
	declaredKinds(f.tb, c)
	return c
}

// declaredKinds checks that every kind Changes count is one Capabilities lists, so that the
// daemon's counters of it start at zero.
func declaredKinds(tb testing.TB, c backend.Changes) {
	tb.Helper()
	for k := range c {
		if !slices.Contains(Capabilities().ChangeKinds, k) {
			tb.Errorf("Apply counted %q, which Capabilities().ChangeKinds %v lacks", k, Capabilities().ChangeKinds)
		}
	}
}

// converged checks, through the full dump and diff, that the kernel holds exactly st.
func (f *fixture) converged(st *backend.State, what string) {
	f.tb.Helper()
	r, err := f.p.Diff(st)
	f.must(err)
	if !r.Converged() {
		f.tb.Fatalf("%s: the kernel differs from the State:\n%s", what, reportString(r))
	}
}

// TestApplyIncremental is a differential test: incremental Applies of random peer changes
// leave the kernel exactly as a full Apply of the same State would.
func TestApplyIncremental(t *testing.T) {
	f := newFixture(t, testLog(t))
	st := testState(t, true)
	_, err := f.p.Prepare(t.Context(), st)
	f.must(err)
	f.apply(st, backend.Update{Full: true})
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 150 {
		var changes []backend.PeerChange
		before := maps.Clone(peersOf(st))
		for range 1 + rng.IntN(3) {
			key, p := randomPeer(rng)
			old, had := peersOf(st)[key]
			if had && rng.IntN(3) == 0 {
				delete(peersOf(st), key)
				changes = append(changes, backend.PeerChange{Key: key, Old: old})
				continue
			}
			// A MAC or a public IP in use by another peer would be skipped by the backend.
			clash := false
			for k, o := range peersOf(st) {
				clash = clash || k != key && (o.PublicIP == p.PublicIP || p.Overlay() && o.VTEPMAC == p.VTEPMAC)
			}
			if clash || old == p {
				continue
			}
			peersOf(st)[key] = p
			changes = append(changes, backend.PeerChange{Key: key, Old: old, New: p})
		}
		// One change per key, from what was programmed to what is wanted, as a Set's
		// Result gives them.
		changes = changes[:0]
		for key := range keysOf(before, peersOf(st)) {
			if before[key] != peersOf(st)[key] {
				changes = append(changes, backend.PeerChange{Key: key, Old: before[key], New: peersOf(st)[key]})
			}
		}
		c := f.apply(st, backend.Update{Peers: changes})
		if len(changes) == 0 && c.Total() != 0 {
			t.Fatalf("step %d: nothing changed, Apply wrote %v", step, c)
		}
		f.converged(st, fmt.Sprintf("step %d (%d changes)", step, len(changes)))
	}
}

// TestApplyHostGW: host-gw peers come and go one at a time, without a dump.
func TestApplyHostGW(t *testing.T) {
	f := newFixture(t, testLog(t))
	st := testState(t, false)
	f.apply(st, backend.Update{Full: true})
	p2 := backend.Peer{Subnet: pfx("10.244.2.0/24"), PublicIP: ip("192.168.50.2")}
	peersOf(st)["a"] = p2
	if c := f.apply(st, backend.Update{Peers: []backend.PeerChange{{Key: "a", New: p2}}}); c["route"] != 1 {
		t.Errorf("adding a peer wrote %v, want one route", c)
	}
	checkList(t, "routes", f.routes(), "10.244.2.0/24 via 192.168.50.2 dev ul0")
	delete(peersOf(st), "a")
	if c := f.apply(st, backend.Update{Peers: []backend.PeerChange{{Key: "a", Old: p2}}}); c["route"] != 1 {
		t.Errorf("removing a peer wrote %v, want one route", c)
	}
	f.converged(st, "after the peer left")
}

// TestWatchModel: the kernel's echo of Apply's own writes is not drift; a hand-made change
// to what the plane programmed is, and so is a stray entry it would delete; what is not the
// plane's is not.
func TestWatchModel(t *testing.T) {
	f := newFixture(t, testLog(t))
	st := testState(t, true)
	_, err := f.p.Prepare(t.Context(), st)
	f.must(err)
	p2 := backend.Peer{Subnet: pfx("10.244.2.0/24"), PublicIP: ip("192.168.50.2"), VTEPMAC: mac("aa:00:00:00:00:02")}
	peersOf(st)["p2"] = p2
	f.apply(st, backend.Update{Full: true})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var calls atomic.Int32
	done := make(chan error, 1)
	go func() { done <- f.p.Watch(ctx, func() { calls.Add(1) }) }()
	// The first call says the watch is on.
	waitFor(t, "the first call", func() bool { return calls.Load() > 0 })
	settle := func() int32 {
		time.Sleep(300 * time.Millisecond)
		return calls.Swap(0)
	}
	settle()

	for i := range 20 {
		p := backend.Peer{Subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(10 + i), 0}), 24),
			PublicIP: netip.AddrFrom4([4]byte{192, 168, 50, byte(10 + i)}), VTEPMAC: backend.MAC{0xaa, 1, 0, 0, 0, byte(i)}}
		key := fmt.Sprint(i)
		peersOf(st)[key] = p
		f.apply(st, backend.Update{Peers: []backend.PeerChange{{Key: key, New: p}}})
	}
	delete(peersOf(st), "p2")
	f.apply(st, backend.Update{Peers: []backend.PeerChange{{Key: "p2", Old: p2}}})
	if n := settle(); n != 0 {
		t.Errorf("%d drift calls for the plane's own 21 incremental writes, want none", n)
	}

	// Not the plane's: a route outside the network, a neighbour on another device.
	ul := f.link("ul0")
	f.must(netlink.RouteAdd(&netlink.Route{LinkIndex: ul.Attrs().Index, Dst: ipNet(pfx("172.20.0.0/24")), Gw: net.ParseIP("192.168.50.9")}))
	f.must(netlink.NeighAdd(&netlink.Neigh{LinkIndex: ul.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
		IP: net.ParseIP("192.168.50.99"), HardwareAddr: mac("aa:bb:00:00:00:01").HardwareAddr()}))
	if n := settle(); n != 0 {
		t.Errorf("%d drift calls for changes that are not the plane's, want none", n)
	}

	vxl := f.link(vx)
	for what, change := range map[string]func() error{
		"a route deleted by hand": func() error {
			return netlink.RouteDel(&netlink.Route{Dst: ipNet(pfx("10.244.10.0/24"))})
		},
		"a neighbour deleted by hand": func() error {
			return netlink.NeighDel(&netlink.Neigh{LinkIndex: vxl.Attrs().Index, IP: net.ParseIP("10.244.11.0")})
		},
		"an FDB entry deleted by hand": func() error {
			return netlink.NeighDel(&netlink.Neigh{LinkIndex: vxl.Attrs().Index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
				IP: net.ParseIP("192.168.50.12"), HardwareAddr: backend.MAC{0xaa, 1, 0, 0, 0, 2}.HardwareAddr()})
		},
		"a stray route on the device": func() error {
			return netlink.RouteAdd(&netlink.Route{LinkIndex: vxl.Attrs().Index, Dst: ipNet(pfx("10.244.99.0/24")), Gw: net.ParseIP("10.244.99.0"), Flags: int(netlink.FLAG_ONLINK)})
		},
		"a stray permanent neighbour on the device": func() error {
			return netlink.NeighAdd(&netlink.Neigh{LinkIndex: vxl.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
				IP: net.ParseIP("10.244.98.0"), HardwareAddr: mac("aa:cc:00:00:00:01").HardwareAddr()})
		},
		"the device set down": func() error { return netlink.LinkSetDown(vxl) },
	} {
		f.must(change())
		if n := settle(); n == 0 {
			t.Errorf("%s: no drift call", what)
		}
		f.apply(st, backend.Update{Full: true})
		settle()
	}
	f.converged(st, "after the repairs")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch: %v", err)
	}
}

// keysOf is the union of the maps' keys.
func keysOf(a, b backend.PeerMap) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func waitFor(tb testing.TB, what string, ok func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			tb.Fatalf("no %s within 5s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSwitchToNexthops: a node whose peers have plain routes (flanneld's, or an older weftd's)
// moves them onto nexthop objects in place, each route replaced, never deleted; and back, on
// a kernel without them.
func TestSwitchToNexthops(t *testing.T) {
	f := newFixture(t, testLog(t))
	if !f.p.nexthops {
		t.Skip("this kernel has no nexthop objects")
	}
	st := testState(t, true)
	_, err := f.p.Prepare(t.Context(), st)
	f.must(err)
	for i := range 5 {
		p := backend.Peer{Subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(2 + i), 0}), 24),
			PublicIP: netip.AddrFrom4([4]byte{192, 168, 50, byte(2 + i)}), VTEPMAC: backend.MAC{0xaa, 0, 0, 0, 0, byte(2 + i)}}
		peersOf(st)[fmt.Sprint(i)] = p
	}
	f.p.nexthops = false
	f.apply(st, backend.Update{Full: true})
	plain := f.routes()

	f.p.nexthops = true
	if c := f.apply(st, backend.Update{Full: true}); c["nexthop"] != 5 || c["route"] != 5 || c["neighbor"]+c["fdb"] != 0 {
		t.Errorf("switching to nexthops wrote %v, want 5 nexthops and 5 routes replaced", c)
	}
	f.converged(st, "on nexthops")
	// ip-route shows the same gateway and device for a route through a nexthop object.
	checkList(t, "routes on nexthops", f.routes(), plain...)
	nhs, err := f.p.listNexthops(nil, 0)
	f.must(err)
	if len(nhs) != 5 {
		t.Errorf("%d nexthop objects, want 5", len(nhs))
	}

	f.p.nexthops = false
	if c := f.apply(st, backend.Update{Full: true}); c["nexthop"] != 5 || c["route"] != 5 {
		t.Errorf("switching back wrote %v, want 5 routes replaced and 5 nexthops deleted", c)
	}
	f.converged(st, "on plain routes again")
	checkList(t, "plain routes again", f.routes(), plain...)
}

// TestBlackholeRoute: --ip-blackhole-route's route to the node's own subnet, of both families
// on a dual-stack node, is there after a full Apply, its deletion by hand is drift (Watch's
// model, Diff) that the next full Apply repairs, and without the flag there is none.
func TestBlackholeRoute(t *testing.T) {
	f, p6 := dualFixture(t)
	conf := `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}`
	st4, st6 := dualStates(t, conf, dualPeer(2, true))
	planes := []struct {
		p   *Plane
		st  *backend.State
		dst string
	}{{f.p, st4, "10.244.1.0/24"}, {p6, st6, "fd00:10:244:1::/64"}}
	blackholes := func() []string {
		t.Helper()
		rs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Type: unix.RTN_BLACKHOLE}, netlink.RT_FILTER_TYPE)
		f.must(err)
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("blackhole %s metric %d", prefixOf(r.Dst), r.Priority))
		}
		return out
	}
	for _, c := range planes {
		_, err := c.p.Prepare(t.Context(), c.st)
		f.must(err)
		f.apply2(c.p, c.st)
	}
	checkList(t, "without the flag", blackholes())
	if got := routeString(Route{Dst: pfx("10.244.1.0/24"), Blackhole: true}); got != "blackhole 10.244.1.0/24" {
		t.Errorf("routeString of the blackhole = %q", got)
	}

	for _, c := range planes {
		c.p.SetBlackholeRoute(true)
		if ch := f.apply2(c.p, c.st); ch["route"] != 1 {
			t.Errorf("%s: %d routes written, want the blackhole", c.st.Family, ch["route"])
		}
		if ch := f.apply2(c.p, c.st); ch["route"] != 0 {
			t.Errorf("%s: a second full Apply wrote %d routes", c.st.Family, ch["route"])
		}
		r, err := c.p.Diff(c.st)
		f.must(err)
		if !r.Converged() {
			t.Errorf("%s: not converged with the blackhole:\n%s", c.st.Family, reportString(r))
		}
	}
	want := []string{"blackhole 10.244.1.0/24 metric 0", "blackhole fd00:10:244:1::/64 metric 1024"}
	checkList(t, "with the flag", blackholes(), want...)

	for _, c := range planes {
		if out, err := exec.Command("ip", "route", "del", "blackhole", c.dst).CombinedOutput(); err != nil {
			t.Fatalf("ip route del blackhole %s: %v\n%s", c.dst, err, out)
		}
		k := Route{Dst: pfx(c.dst), Blackhole: true}
		if !c.p.model.unexpectedRoute(routeNote{Del: true, Route: k}) {
			t.Errorf("%s: the blackhole's deletion is not drift to Watch's model", c.st.Family)
		}
		if c.p.model.unexpectedRoute(routeNote{Route: k}) {
			t.Errorf("%s: the blackhole's echo is drift to Watch's model", c.st.Family)
		}
		r, err := c.p.Diff(c.st)
		f.must(err)
		if len(r.Routes) != 1 || r.Routes[0].Want != k {
			t.Errorf("%s: Diff after the delete reports routes %+v, want the blackhole", c.st.Family, r.Routes)
		}
		if ch := f.apply2(c.p, c.st); ch["route"] != 1 {
			t.Errorf("%s: the repair wrote %d routes, want 1", c.st.Family, ch["route"])
		}
	}
	checkList(t, "repaired", blackholes(), want...)

	// Another blackhole (Calico's IPAM block) is never the plane's, with the flag or without.
	f.must(netlink.RouteAdd(&netlink.Route{Dst: ipNet(pfx("10.244.9.0/26")), Type: unix.RTN_BLACKHOLE}))
	f.apply2(f.p, st4)
	checkList(t, "beside another's", blackholes(), append(want, "blackhole 10.244.9.0/26 metric 0")...)
	if f.p.model.unexpectedRoute(routeNote{Del: true, Route: Route{Dst: pfx("10.244.9.0/26"), Blackhole: true}}) {
		t.Error("another's blackhole deleted is drift to Watch's model")
	}
}

func (f *fixture) apply2(p *Plane, st *backend.State) backend.Changes {
	f.tb.Helper()
	c, err := p.Apply(context.Background(), st, backend.Update{Full: true})
	if err != nil {
		f.tb.Fatalf("%s: full Apply: %v", st.Family, err)
	}
	return c
}

// TestStrayNexthopDeleted: a nexthop object with one of weft's IDs that no peer uses is
// deleted by a full Apply, a blackhole one (no device) too.
func TestStrayNexthopDeleted(t *testing.T) {
	f := newFixture(t, testLog(t))
	st := testState(t, false)
	id := fmt.Sprint(nexthopID(pfx("10.244.5.0/24"), pfx("10.244.0.0/16")))
	f.must(netlink.LinkSetUp(f.link("lo"))) // a blackhole nexthop wants it up
	if out, err := exec.Command("ip", "nexthop", "add", "id", id, "blackhole").CombinedOutput(); err != nil {
		t.Skipf("ip nexthop add blackhole: %v: %s", err, out)
	}
	if c := f.apply(st, backend.Update{Full: true}); c["nexthop"] != 1 {
		t.Errorf("full Apply wrote %v, want the stray nexthop deleted", c)
	}
	if out, err := exec.Command("ip", "nexthop", "show", "id", id).CombinedOutput(); err == nil {
		t.Errorf("nexthop %s still there: %s", id, out)
	}
}
