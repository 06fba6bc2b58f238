package linux

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/internal/netnstest"
)

type fixture struct {
	tb testing.TB
	p  *Plane
}

// newFixture: a namespace with a veth pair as the underlay (ul0 192.168.50.1/24, its peer
// ul1 up so ul0 has a carrier) and a Plane created inside it.
func newFixture(tb testing.TB, log *slog.Logger) *fixture {
	netnstest.Enter(tb)
	f := &fixture{tb: tb}
	f.must(netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "ul0"}, PeerName: "ul1"}))
	f.must(netlink.LinkSetUp(f.link("ul1")))
	f.must(netlink.LinkSetUp(f.link("ul0")))
	f.must(netlink.AddrAdd(f.link("ul0"), &netlink.Addr{IPNet: ipNet(pfx("192.168.50.1/24"))}))
	p, err := New(log)
	f.must(err)
	tb.Cleanup(func() { p.Close() })
	f.p = p
	return f
}

func testLog(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (f *fixture) must(err error) {
	f.tb.Helper()
	if err != nil {
		f.tb.Fatal(err)
	}
}

func (f *fixture) link(name string) netlink.Link {
	f.tb.Helper()
	l, err := netlink.LinkByName(name)
	f.must(err)
	return l
}

func (f *fixture) reconcile(st Want, own Ownership, want Changes) {
	f.tb.Helper()
	got, err := f.p.reconcile(st, own)
	if err != nil {
		f.tb.Fatalf("Reconcile: %v", err)
	}
	if got != want {
		f.tb.Fatalf("Reconcile changed %v\n                  want %v", got, want)
	}
}

func testDevice() backend.VXLANDevice {
	return backend.VXLANDevice{
		Name: vx, VNI: 1, Local: ip("192.168.50.1"), Underlay: "ul0", MTU: 1450,
	}
}

type peer struct {
	subnet, subnet6 string // subnet6 optional
	public          string
	mac             string
}

// vxlanState is what the vxlan backend asks for: per peer a route, a neighbour per family
// and one FDB entry.
func vxlanState(dev backend.VXLANDevice, peers ...peer) Want {
	st := Want{Device: dev.Name, Addrs: []netip.Prefix{pfx("10.244.1.0/32"), pfx("fd00:10:244:1::/128")}}
	for _, p := range peers {
		for _, s := range []string{p.subnet, p.subnet6} {
			if s == "" {
				continue
			}
			r := vxRoute(s)
			st.Routes = append(st.Routes, r)
			st.Neighbors = append(st.Neighbors, Neighbor{IP: r.Gw, MAC: mac(p.mac), Dev: vx})
		}
		st.FDB = append(st.FDB, FDBEntry{MAC: mac(p.mac), Dst: ip(p.public), Dev: vx})
	}
	return st
}

// routes lists the main table like ip-route does, leaving out the kernel's own link-local
// and connected routes, which no test is about.
func (f *fixture) routes() []string {
	f.tb.Helper()
	rs, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
	f.must(err)
	var out []string
	for _, r := range rs {
		dst := prefixOf(r.Dst)
		if r.Protocol == unix.RTPROT_KERNEL && !within(dst, testOwn().Networks) {
			continue
		}
		s := dst.String()
		if r.Gw != nil {
			s += " via " + r.Gw.String()
		}
		s += " dev " + f.nameOf(r.LinkIndex)
		if r.Flags&int(netlink.FLAG_ONLINK) != 0 {
			s += " onlink"
		}
		if r.Protocol != unix.RTPROT_BOOT {
			s += " proto " + r.Protocol.String()
		}
		if r.Priority != defaultMetric(dst) {
			s += fmt.Sprintf(" metric %d", r.Priority)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func (f *fixture) nameOf(index int) string {
	l, err := netlink.LinkByIndex(index)
	if err != nil {
		return fmt.Sprint(index)
	}
	return l.Attrs().Name
}

// neighbors lists the permanent neighbours of dev.
func (f *fixture) neighbors(dev string) []string {
	f.tb.Helper()
	ns, err := netlink.NeighList(f.link(dev).Attrs().Index, netlink.FAMILY_ALL)
	f.must(err)
	var out []string
	for _, n := range ns {
		if n.State&netlink.NUD_PERMANENT != 0 {
			out = append(out, n.IP.String()+" lladdr "+n.HardwareAddr.String())
		}
	}
	slices.Sort(out)
	return out
}

// fdb lists the FDB entries of dev that have a destination.
func (f *fixture) fdb(dev string) []string {
	f.tb.Helper()
	ns, err := netlink.NeighList(f.link(dev).Attrs().Index, unix.AF_BRIDGE)
	f.must(err)
	var out []string
	for _, n := range ns {
		if n.IP == nil {
			continue
		}
		s := n.HardwareAddr.String() + " dst " + n.IP.String()
		if n.State&netlink.NUD_PERMANENT != 0 {
			s += " permanent"
		}
		if n.Flags&netlink.NTF_SELF != 0 {
			s += " self"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func (f *fixture) addrs(dev string) []string {
	f.tb.Helper()
	as, err := netlink.AddrList(f.link(dev), netlink.FAMILY_ALL)
	f.must(err)
	var out []string
	for _, a := range as {
		if !a.IP.IsLinkLocalUnicast() {
			out = append(out, a.IPNet.String())
		}
	}
	slices.Sort(out)
	return out
}

func checkList(tb testing.TB, what string, got []string, want ...string) {
	tb.Helper()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		tb.Errorf("%s:\n got %s\nwant %s", what, strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}

func TestEnsureVXLAN(t *testing.T) {
	f := newFixture(t, testLog(t))
	dev := testDevice()

	mac1, err := f.p.EnsureVXLAN(dev)
	f.must(err)
	l := f.link(vx)
	v, ok := l.(*netlink.Vxlan)
	if !ok {
		t.Fatalf("%s is a %s device", vx, l.Type())
	}
	switch {
	case v.VxlanId != 1, v.Port != defaultVXLANPort, v.Learning, v.GBP, v.MTU != 1450,
		!v.SrcAddr.Equal(net.ParseIP("192.168.50.1")), v.VtepDevIndex != f.link("ul0").Attrs().Index:
		t.Errorf("created %+v", v)
	case v.Flags&net.FlagUp == 0:
		t.Errorf("%s is not up", vx)
	case macOf(v.HardwareAddr) != mac1 || !mac1.IsUsable() || mac1[0]&0x02 == 0:
		t.Errorf("MAC %s returned, device has %s; want a locally administered unicast one", mac1, v.HardwareAddr)
	}
	index := v.Index

	adopted := func(wantMTU int) {
		t.Helper()
		mac, err := f.p.EnsureVXLAN(dev)
		f.must(err)
		l := f.link(vx)
		if l.Attrs().Index != index || mac != mac1 {
			t.Fatalf("device recreated: ifindex %d mac %s, was %d %s", l.Attrs().Index, mac, index, mac1)
		}
		if l.Attrs().MTU != wantMTU || l.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("adopted device: MTU %d, flags %v; want MTU %d, up", l.Attrs().MTU, l.Attrs().Flags, wantMTU)
		}
	}
	adopted(1450)

	// A restarted daemon (a new Plane) adopts the device too, and publishes the same MAC.
	restarted, err := New(testLog(t))
	f.must(err)
	mac, err := restarted.EnsureVXLAN(dev)
	restarted.Close()
	if err != nil || mac != mac1 || f.link(vx).Attrs().Index != index {
		t.Fatalf("after a restart: MAC %s, ifindex %d, %v; want %s, %d", mac, f.link(vx).Attrs().Index, err, mac1, index)
	}

	// Down and with another MTU, by hand: fixed in place.
	f.must(netlink.LinkSetDown(l))
	f.must(netlink.LinkSetMTU(l, 1400))
	adopted(1450)
	dev.MTU = 1380
	adopted(1380)

	replaced := func(why string) {
		t.Helper()
		mac, err := f.p.EnsureVXLAN(dev)
		if err != nil {
			t.Fatalf("%s: %v", why, err)
		}
		l := f.link(vx)
		if l.Attrs().Index == index {
			t.Fatalf("%s: device kept (ifindex %d), want it replaced", why, index)
		}
		if macOf(l.Attrs().HardwareAddr) != mac {
			t.Fatalf("%s: EnsureVXLAN returned MAC %s, the device has %s", why, mac, l.Attrs().HardwareAddr)
		}
		index, mac1 = l.Attrs().Index, mac
	}
	dev.VNI = 2
	replaced("other VNI")
	if v := f.link(vx).(*netlink.Vxlan); v.VxlanId != 2 {
		t.Errorf("VNI %d after replace, want 2", v.VxlanId)
	}
	dev.Port = 4789
	replaced("other port")
	dev.Learning = true
	replaced("learning")
	adopted(1380)

	f.must(netlink.LinkDel(f.link(vx)))
	f.must(netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: vx}}))
	index = f.link(vx).Attrs().Index
	replaced("a bridge of that name")
	if _, ok := f.link(vx).(*netlink.Vxlan); !ok {
		t.Errorf("%s is still not vxlan", vx)
	}
}

// TestEnsureVXLANAdoptsFlanneld: the device flanneld leaves behind on a node that migrates
// (port not given, kernel's MAC, down after a crash) is adopted, not recreated.
func TestEnsureVXLANAdoptsFlanneld(t *testing.T) {
	f := newFixture(t, testLog(t))
	f.must(netlink.LinkAdd(&netlink.Vxlan{
		LinkAttrs: netlink.LinkAttrs{Name: vx, MTU: 1450}, VxlanId: 1,
		SrcAddr: net.ParseIP("192.168.50.1"), VtepDevIndex: f.link("ul0").Attrs().Index,
	}))
	before := f.link(vx).Attrs()
	mac, err := f.p.EnsureVXLAN(testDevice())
	f.must(err)
	after := f.link(vx).Attrs()
	if after.Index != before.Index || mac != macOf(before.HardwareAddr) {
		t.Errorf("flanneld's device (ifindex %d, MAC %s) not adopted: now ifindex %d, MAC %s",
			before.Index, before.HardwareAddr, after.Index, mac)
	}
	if after.Flags&net.FlagUp == 0 {
		t.Errorf("adopted device left down")
	}
}

func TestReconcileVXLAN(t *testing.T) {
	f := newFixture(t, testLog(t))
	dev := testDevice()
	_, err := f.p.EnsureVXLAN(dev)
	f.must(err)
	own := testOwn()
	vxl, ul0 := f.link(vx), f.link("ul0")

	// Not ours, whatever Reconcile does: the CNI bridge with its connected route to the own
	// subnet, routes outside the cluster network, a kernel route on the VXLAN device, a
	// neighbour on another device, the VXLAN flooding default.
	f.must(netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "cni0"}}))
	f.must(netlink.AddrAdd(f.link("cni0"), &netlink.Addr{IPNet: ipNet(pfx("10.244.1.1/24"))}))
	f.must(netlink.LinkSetUp(f.link("cni0")))
	f.must(netlink.RouteAdd(&netlink.Route{LinkIndex: vxl.Attrs().Index, Dst: ipNet(pfx("172.16.0.0/16")), Scope: netlink.SCOPE_LINK}))
	f.must(netlink.RouteAdd(&netlink.Route{LinkIndex: ul0.Attrs().Index, Dst: ipNet(pfx("10.99.0.0/16")), Gw: net.ParseIP("192.168.50.2")}))
	f.must(netlink.RouteAdd(&netlink.Route{LinkIndex: vxl.Attrs().Index, Dst: ipNet(pfx("10.244.77.0/24")), Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_KERNEL}))
	f.must(netlink.NeighSet(&netlink.Neigh{LinkIndex: ul0.Attrs().Index, State: netlink.NUD_PERMANENT, IP: net.ParseIP("192.168.50.9"), HardwareAddr: mac("aa:00:00:00:09:09").HardwareAddr()}))
	f.must(netlink.NeighAppend(&netlink.Neigh{LinkIndex: vxl.Attrs().Index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF, State: netlink.NUD_PERMANENT, IP: net.ParseIP("192.168.50.77"), HardwareAddr: make(net.HardwareAddr, 6)}))
	unrelatedRoutes := []string{
		"10.244.1.0/24 dev cni0 proto kernel",
		"10.244.77.0/24 dev flannel.1 proto kernel",
		"10.99.0.0/16 via 192.168.50.2 dev ul0",
		"172.16.0.0/16 dev flannel.1",
		"fd00:10:244:1::/128 dev flannel.1 proto kernel metric 256", // IPv6 gives even a /128 its prefix route
	}
	const flood = "00:00:00:00:00:00 dst 192.168.50.77 permanent self"

	p2 := peer{subnet: "10.244.2.0/24", subnet6: "fd00:10:244:2::/64", public: "192.168.50.2", mac: "aa:00:00:00:00:02"}
	p3 := peer{subnet: "10.244.3.0/24", public: "192.168.50.3", mac: "aa:00:00:00:00:03"}
	p4 := peer{subnet: "10.244.4.0/24", public: "192.168.50.4", mac: "aa:00:00:00:00:04"}
	st := vxlanState(dev, p2, p3, p4)
	f.reconcile(st, own, Changes{RoutesAdded: 4, NeighborsAdded: 4, FDBAdded: 3, AddrsAdded: 2})
	checkList(t, "routes", f.routes(), append(slices.Clone(unrelatedRoutes),
		"10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink",
		"10.244.3.0/24 via 10.244.3.0 dev flannel.1 onlink",
		"10.244.4.0/24 via 10.244.4.0 dev flannel.1 onlink",
		"fd00:10:244:2::/64 via fd00:10:244:2:: dev flannel.1 onlink",
	)...)
	checkList(t, "neighbours", f.neighbors(vx),
		"10.244.2.0 lladdr aa:00:00:00:00:02", "fd00:10:244:2:: lladdr aa:00:00:00:00:02",
		"10.244.3.0 lladdr aa:00:00:00:00:03", "10.244.4.0 lladdr aa:00:00:00:00:04")
	checkList(t, "FDB", f.fdb(vx), flood,
		"aa:00:00:00:00:02 dst 192.168.50.2 permanent self",
		"aa:00:00:00:00:03 dst 192.168.50.3 permanent self",
		"aa:00:00:00:00:04 dst 192.168.50.4 permanent self")
	checkList(t, "addresses", f.addrs(vx), "10.244.1.0/32", "fd00:10:244:1::/128")
	checkList(t, "ul0 neighbours", f.neighbors("ul0"), "192.168.50.9 lladdr aa:00:00:00:09:09")

	f.reconcile(st, own, Changes{})

	// Peer 4 leaves: exactly its entries go.
	st = vxlanState(dev, p2, p3)
	f.reconcile(st, own, Changes{RoutesRemoved: 1, NeighborsRemoved: 1, FDBRemoved: 1})
	checkList(t, "routes after peer 4 left", f.routes(), append(slices.Clone(unrelatedRoutes),
		"10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink",
		"10.244.3.0/24 via 10.244.3.0 dev flannel.1 onlink",
		"fd00:10:244:2::/64 via fd00:10:244:2:: dev flannel.1 onlink",
	)...)
	checkList(t, "FDB after peer 4 left", f.fdb(vx), flood,
		"aa:00:00:00:00:02 dst 192.168.50.2 permanent self",
		"aa:00:00:00:00:03 dst 192.168.50.3 permanent self")
	checkList(t, "ul0 neighbours", f.neighbors("ul0"), "192.168.50.9 lladdr aa:00:00:00:09:09")

	// Peer 3 moves to another public IP: its FDB entry is rewritten in place.
	p3.public = "192.168.50.33"
	st = vxlanState(dev, p2, p3)
	f.reconcile(st, own, Changes{FDBAdded: 1})
	// Peer 3 gets a new VtepMAC: neighbour replaced, FDB entry of the old MAC removed.
	p3.mac = "aa:00:00:00:00:33"
	st = vxlanState(dev, p2, p3)
	f.reconcile(st, own, Changes{NeighborsAdded: 1, FDBAdded: 1, FDBRemoved: 1})
	checkList(t, "FDB after peer 3 moved", f.fdb(vx), flood,
		"aa:00:00:00:00:02 dst 192.168.50.2 permanent self",
		"aa:00:00:00:00:33 dst 192.168.50.33 permanent self")

	// Deleted by hand: restored. Changed by hand: replaced in place, one route per Dst.
	f.must(netlink.RouteDel(&netlink.Route{LinkIndex: vxl.Attrs().Index, Dst: ipNet(pfx("10.244.2.0/24"))}))
	f.must(netlink.NeighDel(&netlink.Neigh{LinkIndex: vxl.Attrs().Index, IP: net.ParseIP("fd00:10:244:2::")}))
	f.must(netlink.NeighDel(&netlink.Neigh{LinkIndex: vxl.Attrs().Index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
		IP: net.ParseIP("192.168.50.2"), HardwareAddr: mac(p2.mac).HardwareAddr()}))
	f.must(netlink.RouteReplace(&netlink.Route{LinkIndex: vxl.Attrs().Index, Dst: ipNet(pfx("10.244.3.0/24")),
		Gw: net.ParseIP("10.244.3.9"), Flags: int(netlink.FLAG_ONLINK)}))
	f.reconcile(st, own, Changes{RoutesAdded: 2, NeighborsAdded: 1, FDBAdded: 1})

	// Left by an older daemon: stale routes (any protocol, any metric), neighbours, FDB
	// entries and addresses that look like ours go.
	f.must(netlink.RouteAdd(&netlink.Route{LinkIndex: vxl.Attrs().Index, Dst: ipNet(pfx("10.244.9.0/24")),
		Gw: net.ParseIP("10.244.9.0"), Flags: int(netlink.FLAG_ONLINK), Protocol: unix.RTPROT_STATIC}))
	f.must(netlink.RouteAdd(&netlink.Route{LinkIndex: vxl.Attrs().Index, Dst: ipNet(pfx("fd00:10:244:9::/64")),
		Gw: net.ParseIP("fd00:10:244:9::"), Flags: int(netlink.FLAG_ONLINK), Priority: 100}))
	f.must(netlink.NeighSet(&netlink.Neigh{LinkIndex: vxl.Attrs().Index, State: netlink.NUD_PERMANENT,
		IP: net.ParseIP("10.244.9.0"), HardwareAddr: mac("aa:00:00:00:00:09").HardwareAddr()}))
	f.must(netlink.NeighSet(&netlink.Neigh{LinkIndex: vxl.Attrs().Index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
		State: netlink.NUD_PERMANENT, IP: net.ParseIP("192.168.50.9"), HardwareAddr: mac("aa:00:00:00:00:09").HardwareAddr()}))
	f.must(netlink.AddrAdd(vxl, &netlink.Addr{IPNet: ipNet(pfx("10.244.9.0/32"))}))
	f.reconcile(st, own, Changes{RoutesRemoved: 2, NeighborsRemoved: 1, FDBRemoved: 1, AddrsRemoved: 1})
	checkList(t, "routes at the end", f.routes(), append(slices.Clone(unrelatedRoutes),
		"10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink",
		"10.244.3.0/24 via 10.244.3.0 dev flannel.1 onlink",
		"fd00:10:244:2::/64 via fd00:10:244:2:: dev flannel.1 onlink",
	)...)
	checkList(t, "neighbours at the end", f.neighbors(vx),
		"10.244.2.0 lladdr aa:00:00:00:00:02", "fd00:10:244:2:: lladdr aa:00:00:00:00:02",
		"10.244.3.0 lladdr aa:00:00:00:00:33")
	checkList(t, "addresses at the end", f.addrs(vx), "10.244.1.0/32", "fd00:10:244:1::/128")
	f.reconcile(st, own, Changes{})

	// Set down by hand, the device loses its routes, its neighbours (permanent ones too) and
	// its IPv6 address, but keeps its permanent FDB entries and IPv4 address. Reconcile sets
	// it up and restores the rest.
	f.must(netlink.LinkSetDown(vxl))
	f.reconcile(st, own, Changes{RoutesAdded: 3, NeighborsAdded: 3, AddrsAdded: 1})
	f.reconcile(st, own, Changes{})
}

func TestReconcileHostGW(t *testing.T) {
	f := newFixture(t, testLog(t))
	own := testOwn()
	own.Devices = []string{"ul0"}
	ul0 := f.link("ul0")
	f.must(netlink.RouteAdd(&netlink.Route{LinkIndex: ul0.Attrs().Index, Dst: ipNet(pfx("10.99.0.0/16")), Gw: net.ParseIP("192.168.50.2")}))

	st := Want{Routes: []Route{
		hgRoute("10.244.2.0/24", "192.168.50.2"), hgRoute("10.244.3.0/24", "192.168.50.3"), hgRoute("10.244.4.0/24", "192.168.50.4"),
	}}
	for i := range st.Routes {
		st.Routes[i].Dev = "ul0"
	}
	f.reconcile(st, own, Changes{RoutesAdded: 3})
	checkList(t, "routes", f.routes(),
		"10.99.0.0/16 via 192.168.50.2 dev ul0",
		"10.244.2.0/24 via 192.168.50.2 dev ul0",
		"10.244.3.0/24 via 192.168.50.3 dev ul0",
		"10.244.4.0/24 via 192.168.50.4 dev ul0")
	f.reconcile(st, own, Changes{})

	st.Routes[0].Gw = ip("192.168.50.22")
	f.reconcile(st, own, Changes{RoutesAdded: 1})
	checkList(t, "routes after a peer moved", f.routes(),
		"10.99.0.0/16 via 192.168.50.2 dev ul0",
		"10.244.2.0/24 via 192.168.50.22 dev ul0",
		"10.244.3.0/24 via 192.168.50.3 dev ul0",
		"10.244.4.0/24 via 192.168.50.4 dev ul0")

	f.reconcile(Want{}, own, Changes{RoutesRemoved: 3})
	checkList(t, "routes after every peer left", f.routes(), "10.99.0.0/16 via 192.168.50.2 dev ul0")
}

func TestReconcileErrors(t *testing.T) {
	f := newFixture(t, testLog(t))
	dev := testDevice()

	_, err := f.p.reconcile(vxlanState(dev), testOwn())
	var missing *backend.MissingDeviceError
	if !errors.As(err, &missing) || missing.Name != vx {
		t.Fatalf("Reconcile without the device: %v, want a backend.MissingDeviceError for %s", err, vx)
	}

	// A peer routed through a device that does not exist fails alone.
	st := Want{Routes: []Route{
		{Dst: pfx("10.244.2.0/24"), Gw: ip("192.168.50.2"), Dev: "nope0"},
		{Dst: pfx("10.244.3.0/24"), Gw: ip("192.168.50.3"), Dev: "ul0"},
	}}
	c, err := f.p.reconcile(st, testOwn())
	if err == nil || !strings.Contains(err.Error(), "nope0") || !strings.Contains(err.Error(), "10.244.2.0/24") {
		t.Errorf("Reconcile error %v, want one naming the route and nope0", err)
	}
	if c != (Changes{RoutesAdded: 1}) {
		t.Errorf("Reconcile changed %v, want the other peer's route added", c)
	}
}

func TestWatch(t *testing.T) {
	f := newFixture(t, testLog(t))
	dev := testDevice()
	_, err := f.p.EnsureVXLAN(dev)
	f.must(err)
	st := testState(t, true)
	peersOf(st)["p2"] = backend.Peer{Subnet: pfx("10.244.2.0/24"), PublicIP: ip("192.168.50.2"), VTEPMAC: mac("aa:00:00:00:00:02")}
	f.apply(st, backend.Update{Full: true})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	calls := make(chan struct{}, 1000)
	var inCall, overlapped atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- f.p.Watch(ctx, func() {
			if inCall.Add(1) > 1 {
				overlapped.Add(1)
			}
			time.Sleep(20 * time.Millisecond) // so that changes pile up and must be coalesced
			inCall.Add(-1)
			calls <- struct{}{}
		})
	}()
	waitCall := func(what string) {
		t.Helper()
		select {
		case <-calls:
		case err := <-done:
			t.Fatalf("Watch returned %v while waiting for %s", err, what)
		case <-time.After(5 * time.Second):
			t.Fatalf("no call within 5s after %s", what)
		}
	}
	waitCall("subscribing")
	drain := func() {
		for {
			select {
			case <-calls:
			case <-time.After(200 * time.Millisecond):
				return
			}
		}
	}
	drain()

	vxl := f.link(vx)
	f.must(netlink.RouteDel(&netlink.Route{Dst: ipNet(pfx("10.244.2.0/24"))}))
	waitCall("a route deleted by hand")
	if c := f.apply(st, backend.Update{Full: true}); c["route"] != 1 {
		t.Errorf("repair wrote %v, want the route", c)
	}
	drain()

	f.must(netlink.NeighDel(&netlink.Neigh{LinkIndex: vxl.Attrs().Index, IP: net.ParseIP("10.244.2.0")}))
	waitCall("a neighbour deleted by hand")
	drain()

	// A burst of changes is coalesced: far fewer calls than changes, never two at once.
	for i := range 100 {
		f.must(netlink.RouteAdd(&netlink.Route{LinkIndex: vxl.Attrs().Index, Dst: ipNet(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(100 + i), 0}), 24)), Scope: netlink.SCOPE_LINK}))
	}
	waitCall("a burst of 100 routes")
	time.Sleep(300 * time.Millisecond)
	if n := len(calls) + 1; n > 10 {
		t.Errorf("%d calls for a burst of 100 changes, want them coalesced", n)
	}
	if overlapped.Load() != 0 {
		t.Errorf("changed ran concurrently with itself")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Watch returned %v after cancel, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return within 5s of cancel")
	}
}

func TestDumpRetriesInterrupted(t *testing.T) {
	calls := 0
	interruptedTwice := func() ([]int, error) {
		calls++
		if calls <= 2 {
			return []int{1}, netlink.ErrDumpInterrupted // partial
		}
		return []int{1, 2}, nil
	}
	got, err := dump("things", interruptedTwice)
	if err != nil || !slices.Equal(got, []int{1, 2}) || calls != 3 {
		t.Errorf("dump = %v, %v after %d calls; want the third, complete result", got, err, calls)
	}

	calls = 0
	_, err = dump("things", func() ([]int, error) { calls++; return nil, netlink.ErrDumpInterrupted })
	if !errors.Is(err, netlink.ErrDumpInterrupted) || calls != dumpAttempts || !strings.Contains(err.Error(), "things") {
		t.Errorf("always interrupted: %v after %d calls; want ErrDumpInterrupted naming the dump after %d", err, calls, dumpAttempts)
	}

	calls = 0
	_, err = dump("things", func() ([]int, error) { calls++; return nil, unix.EPERM })
	if !errors.Is(err, unix.EPERM) || calls != 1 {
		t.Errorf("other error: %v after %d calls; want EPERM at once", err, calls)
	}
}

// BenchmarkReconcileNoop: the periodic resync of a converged node with 200 peers, the cost
// every netlink notification and every resync interval pays.
func BenchmarkReconcileNoop(b *testing.B) {
	f := newFixture(b, slog.New(slog.DiscardHandler))
	dev := testDevice()
	_, err := f.p.EnsureVXLAN(dev)
	f.must(err)
	var peers []peer
	for i := range 200 {
		n := i + 2
		peers = append(peers, peer{
			subnet: fmt.Sprintf("10.244.%d.0/24", n),
			public: fmt.Sprintf("192.168.50.%d", n),
			mac:    fmt.Sprintf("aa:00:00:00:%02x:%02x", n>>8, n&0xff),
		})
	}
	st := vxlanState(dev, peers...)
	own := testOwn()
	if _, err := f.p.reconcile(st, own); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		c, err := f.p.reconcile(st, own)
		if err != nil || c != (Changes{}) {
			b.Fatalf("Reconcile of a converged state: %v, %v", c, err)
		}
	}
}
