package windows

import (
	"errors"
	"net/netip"
	"testing"
	"unsafe"

	xwin "golang.org/x/sys/windows"
)

// TestRouteRow: a HostRoute survives the trip into a MIB_IPFORWARD_ROW2 and back, in the
// C layout (104 bytes on amd64) iphlpapi reads.
func TestRouteRow(t *testing.T) {
	if got := unsafe.Sizeof(xwin.MibIpForwardRow2{}); unsafe.Sizeof(uintptr(0)) == 8 && got != 104 {
		t.Errorf("MIB_IPFORWARD_ROW2 is %d bytes, want 104", got)
	}
	for _, r := range []HostRoute{
		{Dst: netip.MustParsePrefix("10.244.2.0/24"), NextHop: netip.MustParseAddr("192.168.1.11"), IfIndex: 7, Metric: 5, Protocol: ProtoNetMgmt},
		{Dst: netip.MustParsePrefix("fd00:10:244:2::/64"), NextHop: netip.MustParseAddr("fd77:77::11"), IfIndex: 7, Metric: 5, Protocol: ProtoNetMgmt},
	} {
		var row xwin.MibIpForwardRow2
		fillRow(&row, r)
		if got := routeOf(&row); got != r {
			t.Errorf("round trip %+v, want %+v", got, r)
		}
	}
	if got := addrOf(&xwin.RawSockaddrInet{Family: xwin.AF_UNSPEC}); got.IsValid() {
		t.Errorf("a sockaddr of no family read as %s", got)
	}
	if err := status(uintptr(xwin.ERROR_OBJECT_ALREADY_EXISTS), "x"); !errors.Is(err, ErrExists) {
		t.Errorf("ERROR_OBJECT_ALREADY_EXISTS gave %v", err)
	}
	if err := status(uintptr(xwin.ERROR_NOT_FOUND), "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("ERROR_NOT_FOUND gave %v", err)
	}
}

// TestIPHelperReads: the route and address tables of the machine (Windows, or Wine's view
// of the Linux host) read, and every route's interface is one Interfaces knows or the
// loopback.
func TestIPHelperReads(t *testing.T) {
	if xwin.NewLazySystemDLL("iphlpapi.dll").NewProc("WeftSimulatedHost").Find() == nil {
		t.Skip("iphlpapi.dll is the simulated one (Wine: tools/wine/iphlpapi): TestIPHelperThroughSimulatedHost runs")
	}
	h := NewIPHelper()
	// Wine 8's iphlpapi has the tables but neither GetIpInterfaceEntry nor
	// InitializeIpForwardEntry; say so rather than pass for nothing.
	if err := h.getInterface.Find(); err != nil {
		t.Logf("forwarding state unreadable here: %v", err)
	}
	ifs, err := h.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	routes, err := h.Routes()
	if err != nil {
		t.Fatal(err)
	}
	if len(ifs) == 0 || len(routes) == 0 {
		t.Fatalf("%d interfaces, %d routes", len(ifs), len(routes))
	}
	for _, r := range routes {
		if !r.Dst.IsValid() {
			t.Errorf("route with no destination: %+v", r)
		}
	}
	if name, err := h.DefaultRouteInterface(); err != nil {
		t.Errorf("default route interface: %v", err)
	} else {
		t.Logf("default route via %s", name)
	}
	t.Logf("interfaces %+v", ifs)
	t.Logf("%d routes, first %s", len(routes), routes[0])
}
