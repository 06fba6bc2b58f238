package linux

import (
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/backend"
)

// TestPlaneDiff: Diff reports what Reconcile would write, as Reconcile then writes it, and
// writes nothing itself.
func TestPlaneDiff(t *testing.T) {
	f := newFixture(t, testLog(t))
	dev := testDevice()
	own := testOwn()
	p2 := peer{subnet: "10.244.2.0/24", public: "192.168.50.2", mac: "aa:00:00:00:00:02"}
	p3 := peer{subnet: "10.244.3.0/24", public: "192.168.50.3", mac: "aa:00:00:00:00:03"}
	st := vxlanState(dev, p2, p3)
	stDev := &dev

	diffNow := func() Report {
		t.Helper()
		r, err := f.p.diffWant(st, own, stDev)
		f.must(err)
		return r
	}
	check := func(what string, got, want Report) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Diff:\n got %s\nwant %s", what, reportString(got), reportString(want))
		}
	}

	// No device yet: missing, and with it everything that lives on it.
	check("before the device exists", diffNow(), Report{
		Device: &DeviceReport{Name: vx, Missing: true},
		Routes: []Change[Route]{{Want: vxRoute("10.244.2.0/24")}, {Want: vxRoute("10.244.3.0/24")}},
		Neighbors: []Change[Neighbor]{
			{Want: Neighbor{IP: ip("10.244.2.0"), MAC: mac(p2.mac), Dev: vx}},
			{Want: Neighbor{IP: ip("10.244.3.0"), MAC: mac(p3.mac), Dev: vx}},
		},
		FDB: []Change[FDBEntry]{
			{Want: FDBEntry{MAC: mac(p2.mac), Dst: ip(p2.public), Dev: vx}},
			{Want: FDBEntry{MAC: mac(p3.mac), Dst: ip(p3.public), Dev: vx}},
		},
		Addrs: []Change[netip.Prefix]{{Want: pfx("10.244.1.0/32")}, {Want: pfx("fd00:10:244:1::/128")}},
	})

	devMAC, err := f.p.EnsureVXLAN(dev)
	f.must(err)
	f.reconcile(st, own, Changes{RoutesAdded: 2, NeighborsAdded: 2, FDBAdded: 2, AddrsAdded: 2})
	converged := diffNow()
	check("converged", converged, Report{Device: &DeviceReport{Name: vx, Up: true, MTU: dev.MTU, MAC: devMAC}})
	if !converged.Converged() {
		t.Errorf("Converged() = false for %+v", converged)
	}

	// Drift of every kind: a route deleted, one pointed elsewhere, a neighbour with a wrong
	// MAC, an FDB entry moved, a stale route left by a gone peer, the MTU changed.
	vxl := f.link(vx)
	f.must(netlink.RouteDel(&netlink.Route{LinkIndex: vxl.Attrs().Index, Dst: ipNet(pfx("10.244.2.0/24"))}))
	f.must(netlink.RouteReplace(&netlink.Route{LinkIndex: vxl.Attrs().Index, Dst: ipNet(pfx("10.244.3.0/24")),
		Gw: net.ParseIP("10.244.3.9"), Flags: int(netlink.FLAG_ONLINK)}))
	f.must(netlink.NeighSet(&netlink.Neigh{LinkIndex: vxl.Attrs().Index, State: netlink.NUD_PERMANENT,
		IP: net.ParseIP("10.244.2.0"), HardwareAddr: mac("aa:00:00:00:00:99").HardwareAddr()}))
	f.must(netlink.NeighSet(&netlink.Neigh{LinkIndex: vxl.Attrs().Index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
		State: netlink.NUD_PERMANENT, IP: net.ParseIP("192.168.50.33"), HardwareAddr: mac(p3.mac).HardwareAddr()}))
	f.must(netlink.RouteAdd(&netlink.Route{LinkIndex: vxl.Attrs().Index, Dst: ipNet(pfx("10.244.9.0/24")),
		Gw: net.ParseIP("10.244.9.0"), Flags: int(netlink.FLAG_ONLINK)}))
	f.must(netlink.LinkSetMTU(vxl, 1400))

	want := Report{
		Device: &DeviceReport{Name: vx, Up: true, MTU: 1400, MAC: devMAC},
		Routes: []Change[Route]{
			{Want: vxRoute("10.244.2.0/24")},
			{Want: vxRoute("10.244.3.0/24"), Have: Route{Dst: pfx("10.244.3.0/24"), Gw: ip("10.244.3.9"), Dev: vx, Onlink: true}},
			{Have: vxRoute("10.244.9.0/24")},
		},
		Neighbors: []Change[Neighbor]{{
			Want: Neighbor{IP: ip("10.244.2.0"), MAC: mac(p2.mac), Dev: vx},
			Have: Neighbor{IP: ip("10.244.2.0"), MAC: mac("aa:00:00:00:00:99"), Dev: vx},
		}},
		FDB: []Change[FDBEntry]{{
			Want: FDBEntry{MAC: mac(p3.mac), Dst: ip(p3.public), Dev: vx},
			Have: FDBEntry{MAC: mac(p3.mac), Dst: ip("192.168.50.33"), Dev: vx},
		}},
	}
	drifted := diffNow()
	check("drifted", drifted, want)
	if drifted.Converged() {
		t.Error("Converged() = true with drift")
	}
	check("drifted, asked again", diffNow(), want) // Diff wrote nothing

	// What Diff reported is what Reconcile writes (the MTU is EnsureVXLAN's business).
	f.reconcile(st, own, Changes{RoutesAdded: 2, RoutesRemoved: 1, NeighborsAdded: 1, FDBAdded: 1})
	check("repaired", diffNow(), Report{Device: &DeviceReport{Name: vx, Up: true, MTU: 1400, MAC: devMAC}})

	// A device EnsureVXLAN would replace, and one set down.
	other := dev
	other.VNI = 2
	stDev = &other
	if got := diffNow().Device; got.Incompatible != "VNI 1, want 2" {
		t.Errorf("device of another VNI: Incompatible %q, want %q", got.Incompatible, "VNI 1, want 2")
	}
	stDev = &dev
	f.must(netlink.LinkSetDown(vxl))
	if got := diffNow(); got.Device.Up || got.Converged() {
		t.Errorf("device set down: %+v, Converged %t; want Up false, not converged", got.Device, got.Converged())
	}
}

// TestPlaneDiffHostGW: without a device, only routes are compared, on the devices owned names.
func TestPlaneDiffHostGW(t *testing.T) {
	f := newFixture(t, testLog(t))
	own := testOwn()
	own.Devices = []string{"ul0"}
	st := Want{Routes: []Route{{Dst: pfx("10.244.2.0/24"), Gw: ip("192.168.50.2"), Dev: "ul0"}}}
	var stDev *backend.VXLANDevice
	r, err := f.p.diffWant(st, own, stDev)
	f.must(err)
	if want := (Report{Routes: []Change[Route]{{Want: st.Routes[0]}}}); !reflect.DeepEqual(r, want) {
		t.Errorf("Diff:\n got %s\nwant %s", reportString(r), reportString(want))
	}
	f.reconcile(st, own, Changes{RoutesAdded: 1})
	if r, err = f.p.diffWant(st, own, stDev); err != nil || !r.Converged() {
		t.Errorf("after Reconcile: Diff %+v, %v; want converged", r, err)
	}
}

func reportString(r Report) string {
	s := "device "
	if r.Device != nil {
		s += fmt.Sprintf("%+v", *r.Device)
	}
	s += fmt.Sprintf("\n     nexthops %v", r.Nexthops)
	return s + fmt.Sprintf("\n     routes %+v\n     neighbours %+v\n     fdb %+v\n     addrs %+v", r.Routes, r.Neighbors, r.FDB, r.Addrs)
}
