package windows_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	xwin "golang.org/x/sys/windows"

	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

// TestIPHelperThroughSimulatedHost: weftd's host code (windows.IPHelper) calls the simulated
// iphlpapi.dll (tools/wine/iphlpapi), which hands each row to the simulated HNS service and
// its host: what it reads is that host, what HNS does to that host shows through it, and
// what it changes there is that host's, refusals included. It skips where iphlpapi.dll is
// not the simulation (Windows; Wine without tools/wine/exec.sh's override).
func TestIPHelperThroughSimulatedHost(t *testing.T) {
	if err := xwin.NewLazySystemDLL("iphlpapi.dll").NewProc("WeftSimulatedHost").Find(); err != nil {
		t.Skipf("iphlpapi.dll is not the simulated one (run under Wine: make wine): %v", err)
	}
	pfx := netip.MustParsePrefix
	mgmt := netip.MustParseAddr("192.0.2.10")
	host := hnstest.NewHost(
		windows.Interface{Index: 1, Name: "Loopback Pseudo-Interface 1", Prefixes: []netip.Prefix{pfx("127.0.0.1/8"), pfx("::1/128")}},
		windows.Interface{Index: 4, Name: "Ethernet", Prefixes: []netip.Prefix{pfx("192.0.2.10/24"), pfx("fd77:77::10/64")}})
	hns, _ := simulatedHNS(t, hnstest.Options{ManagementIP: mgmt, Host: host})
	h := windows.NewIPHelper()
	// No route at all is no table (ERROR_NOT_FOUND), which is no error.
	if routes, err := h.Routes(); err != nil || len(routes) != 0 {
		t.Errorf("routes of a host without any: %v %v", routes, err)
	}
	if err := host.AddRoute(windows.HostRoute{Dst: pfx("127.0.0.0/8"), NextHop: netip.IPv4Unspecified(), IfIndex: 1, Metric: 256}); err != nil {
		t.Fatal(err)
	}

	// same compares what IPHelper reads with the host (names aside: IPHelper names interfaces
	// by Go's net package, which asks Wine's own iphlpapi).
	same := func(what string) []windows.Interface {
		t.Helper()
		got, err := h.Interfaces()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		want, _ := host.Interfaces()
		// IP Helper lists interfaces by their addresses: the adapter behind a vSwitch has none.
		want = slices.DeleteFunc(want, func(i windows.Interface) bool { return len(i.Prefixes) == 0 })
		for i := range got {
			got[i].Name = ""
		}
		for i := range want {
			want[i].Name = ""
		}
		if !slices.EqualFunc(got, want, func(a, b windows.Interface) bool {
			return a.Index == b.Index && slices.Equal(a.Prefixes, b.Prefixes) && a.Forwarding == b.Forwarding && a.Forwarding6 == b.Forwarding6
		}) {
			t.Errorf("%s: IPHelper reads %+v, the host has %+v", what, got, want)
		}
		routes, err := h.Routes()
		hostRoutes, _ := host.Routes()
		if err != nil || !slices.Equal(routes, hostRoutes) {
			t.Errorf("%s: IPHelper reads routes %v (%v), the host has %v", what, routes, err, hostRoutes)
		}
		return got
	}
	same("at start")

	// HNS makes a network on the adapter: its addresses move to a vSwitch vNIC, which the
	// host's wait for the management IP sees.
	n, err := hns.CreateNetwork(&windows.HostComputeNetwork{Name: "cbr0", Type: windows.NetworkL2Bridge,
		Policies: []windows.Policy{windows.NetAdapterNamePolicy("Ethernet")},
		Ipams: []windows.Ipam{{Type: "Static", Subnets: []windows.Subnet{{IPAddressPrefix: "10.244.1.0/24",
			Routes: []windows.Route{{NextHop: "10.244.1.1", DestinationPrefix: "0.0.0.0/0"}}}}}},
		SchemaVersion: windows.SchemaV2()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := h.HostReady(ctx, n.ManagementIP()); err != nil {
		t.Fatal(err)
	}
	ifs := same("after the vSwitch")
	vnic := ifs[slices.IndexFunc(ifs, func(i windows.Interface) bool { return slices.Contains(i.Prefixes, pfx("192.0.2.10/24")) })].Index
	if vnic == 4 {
		t.Fatalf("the management IP is still on the adapter: %+v", ifs)
	}

	// Forwarding, both families, as the plane turns it on.
	for _, v6 := range []bool{false, true} {
		if err := h.SetForwarding(vnic, v6); err != nil {
			t.Fatalf("forwarding (IPv6 %t): %v", v6, err)
		}
	}
	if ifs := same("forwarding on"); !slices.ContainsFunc(ifs, func(i windows.Interface) bool { return i.Index == vnic && i.Forwarding && i.Forwarding6 }) {
		t.Errorf("no forwarding on the vNIC: %+v", ifs)
	}
	if err := h.SetForwarding(77, false); !errors.Is(err, windows.ErrNotFound) {
		t.Errorf("forwarding on an interface the host lacks: %v", err)
	}

	// Peer routes of both families: added, refused twice, deleted, not deleted twice.
	peer := windows.HostRoute{Dst: pfx("10.244.2.0/24"), NextHop: netip.MustParseAddr("192.0.2.11"), IfIndex: vnic, Metric: 5, Protocol: windows.ProtoNetMgmt}
	peer6 := windows.HostRoute{Dst: pfx("fd00:10:244:2::/64"), NextHop: netip.MustParseAddr("fd77:77::11"), IfIndex: vnic, Protocol: windows.ProtoNetMgmt}
	for _, r := range []windows.HostRoute{peer, peer6} {
		if err := h.AddRoute(r); err != nil {
			t.Fatalf("adding %s: %v", r, err)
		}
	}
	if err := h.AddRoute(peer); !errors.Is(err, windows.ErrExists) {
		t.Errorf("adding %s again: %v, want ErrExists", peer, err)
	}
	if err := h.AddRoute(windows.HostRoute{Dst: pfx("10.244.3.0/24"), NextHop: netip.MustParseAddr("192.0.2.12"), IfIndex: 77}); !errors.Is(err, windows.ErrNotFound) {
		t.Errorf("a route out of an interface the host lacks: %v, want ErrNotFound", err)
	}
	same("routes added")
	if err := h.DeleteRoute(peer); err != nil {
		t.Fatal(err)
	}
	if err := h.DeleteRoute(peer); !errors.Is(err, windows.ErrNotFound) {
		t.Errorf("deleting %s again: %v, want ErrNotFound", peer, err)
	}
	if routes := same("a route deleted"); len(routes) == 0 {
		t.Error("no interfaces")
	}
	if r, _ := host.Routes(); !slices.Contains(r, peer6) || slices.ContainsFunc(r, func(x windows.HostRoute) bool { return x.Dst == peer.Dst }) {
		t.Errorf("host routes %v, want %s alone of the peers'", r, peer6)
	}
}
