package hnssim

import (
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

// ipHelperServer is a service whose HNS plays on a host with an adapter (index 4) and the
// loopback (index 1).
func ipHelperServer(t *testing.T) (*Server, *hnstest.Host) {
	t.Helper()
	pfx := netip.MustParsePrefix
	host := hnstest.NewHost(
		windows.Interface{Index: 1, Name: "Loopback Pseudo-Interface 1", Prefixes: []netip.Prefix{pfx("127.0.0.1/8")}},
		windows.Interface{Index: 4, Name: "Ethernet", Prefixes: []netip.Prefix{pfx("192.0.2.10/24"), pfx("fd77:77::10/64")}})
	hns := hnstest.New(hnstest.Options{ManagementIP: netip.MustParseAddr("192.0.2.10"), Host: host})
	return New(hns, slog.New(slog.NewTextHandler(io.Discard, nil))), host
}

// ipCall makes one IP Helper call with arg (a row, or a family) and returns the status and
// the bytes answered.
func ipCall(t *testing.T, s *Server, call string, arg any) (uint32, []byte) {
	t.Helper()
	r := request{call: call}
	switch a := arg.(type) {
	case int:
		r.a = strconv.Itoa(a)
	case nil:
	default:
		r.a = hex.EncodeToString(encode(a))
	}
	ans := s.Call(r)
	b, err := hex.DecodeString(ans.result)
	if err != nil {
		t.Fatalf("%s answered %q: %v", call, ans.result, err)
	}
	return ans.hr, b
}

func TestIPHelperTables(t *testing.T) {
	s, _ := ipHelperServer(t)
	st, b := ipCall(t, s, "GetUnicastIpAddressTable", afUnspec)
	if st != 0 || len(b) != 8+3*80 {
		t.Fatalf("unicast table: status %d, %d bytes, want 3 rows", st, len(b))
	}
	var got []string
	for i := range 3 {
		row, err := decodeRow[unicastRow](b[8+80*i : 8+80*(i+1)])
		if err != nil {
			t.Fatal(err)
		}
		if row.InterfaceLuid != luidOf(row.InterfaceIndex) || row.ValidLifetime != infinite || row.DadState != dadStatePreferred {
			t.Errorf("row %+v", row)
		}
		got = append(got, netip.PrefixFrom(row.Address.addr(), int(row.OnLinkPrefixLength)).String()+" if "+strconv.Itoa(int(row.InterfaceIndex)))
	}
	if want := "[127.0.0.1/8 if 1 192.0.2.10/24 if 4 fd77:77::10/64 if 4]"; fmt.Sprint(got) != want {
		t.Errorf("addresses %s, want %s", fmt.Sprint(got), want)
	}
	if st, b := ipCall(t, s, "GetUnicastIpAddressTable", afInet6); st != 0 || len(b) != 8+80 {
		t.Errorf("IPv6 addresses: status %d, %d bytes, want one row", st, len(b))
	}
	if st, _ := ipCall(t, s, "GetUnicastIpAddressTable", 99); st != errorInvalidParam {
		t.Errorf("family 99: status %d, want ERROR_INVALID_PARAMETER", st)
	}
	// No route yet: ERROR_NOT_FOUND, as Windows answers an empty table.
	if st, _ := ipCall(t, s, "GetIpForwardTable2", afUnspec); st != errorNotFound {
		t.Errorf("routes of an empty table: status %d, want ERROR_NOT_FOUND", st)
	}
}

// TestIPHelperInterface: GetIpInterfaceEntry and SetIpInterfaceEntry as weftd's
// SetForwarding uses them, and their refusals.
func TestIPHelperInterface(t *testing.T) {
	s, host := ipHelperServer(t)
	st, b := ipCall(t, s, "GetIpInterfaceEntry", ipInterfaceRow{Family: afInet, InterfaceIndex: 4})
	if st != 0 {
		t.Fatalf("status %d", st)
	}
	row, err := decodeRow[ipInterfaceRow](b)
	if err != nil || row.InterfaceLuid != luidOf(4) || row.ForwardingEnabled != 0 || row.SitePrefixLength == 0 {
		t.Fatalf("row %+v %v: want the LUID filled, forwarding off, a site prefix length", row, err)
	}
	if st, b := ipCall(t, s, "GetIpInterfaceEntry", ipInterfaceRow{Family: afInet6, InterfaceLuid: luidOf(4)}); st != 0 || len(b) != 168 {
		t.Errorf("by LUID: status %d", st)
	}
	for _, c := range []struct {
		what string
		row  ipInterfaceRow
		want uint32
	}{
		{"no family", ipInterfaceRow{InterfaceIndex: 4}, errorInvalidParam},
		{"no interface named", ipInterfaceRow{Family: afInet}, errorInvalidParam},
		{"an unknown index", ipInterfaceRow{Family: afInet, InterfaceIndex: 9}, errorFileNotFound},
	} {
		if st, _ := ipCall(t, s, "GetIpInterfaceEntry", c.row); st != c.want {
			t.Errorf("%s: status %d, want %d", c.what, st, c.want)
		}
	}

	row.ForwardingEnabled = 1
	if st, _ := ipCall(t, s, "SetIpInterfaceEntry", row); st != errorInvalidParam {
		t.Errorf("IPv4 with a site prefix length: status %d, want ERROR_INVALID_PARAMETER", st)
	}
	row.SitePrefixLength = 0
	_, b6 := ipCall(t, s, "GetIpInterfaceEntry", ipInterfaceRow{Family: afInet6, InterfaceIndex: 4})
	row6, err := decodeRow[ipInterfaceRow](b6)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := ipCall(t, s, "SetIpInterfaceEntry", row6); st != 0 {
		t.Errorf("an IPv6 row as Get reports it: status %d", st)
	}
	row6.SitePrefixLength = 129
	if st, _ := ipCall(t, s, "SetIpInterfaceEntry", row6); st != errorInvalidParam {
		t.Errorf("IPv6 with a site prefix length of 129: status %d, want ERROR_INVALID_PARAMETER", st)
	}
	row6.SitePrefixLength = 48
	if st, _ := ipCall(t, s, "SetIpInterfaceEntry", row6); st != errorNotSupported {
		t.Errorf("IPv6 with another site prefix length: status %d, want ERROR_NOT_SUPPORTED (not modelled)", st)
	}
	metric := row
	metric.Metric = 5
	if st, _ := ipCall(t, s, "SetIpInterfaceEntry", metric); st != errorNotSupported {
		t.Errorf("a metric: status %d, want ERROR_NOT_SUPPORTED (the host models forwarding alone)", st)
	}
	row.InterfaceLuid = 0 // found by index, the LUID filled in
	st, b = ipCall(t, s, "SetIpInterfaceEntry", row)
	if st != 0 {
		t.Fatalf("enabling forwarding: status %d", st)
	}
	if set, _ := decodeRow[ipInterfaceRow](b); set.InterfaceLuid != luidOf(4) {
		t.Errorf("the row set: LUID %x, want it filled in", set.InterfaceLuid)
	}
	ifs, _ := host.Interfaces()
	if ifs[1].Index != 4 || !ifs[1].Forwarding || ifs[1].Forwarding6 {
		t.Errorf("host interfaces %+v: want IPv4 forwarding on Ethernet alone", ifs)
	}
	row.ForwardingEnabled = 0
	if st, _ := ipCall(t, s, "SetIpInterfaceEntry", row); st != 0 {
		t.Fatal(st)
	}
	if ifs, _ = host.Interfaces(); ifs[1].Forwarding {
		t.Error("forwarding still on after a row turning it off")
	}
}

// TestIPHelperRoutes: routes made from InitializeIpForwardEntry's row, as weftd makes them,
// listed, refused twice, deleted.
func TestIPHelperRoutes(t *testing.T) {
	s, host := ipHelperServer(t)
	st, b := ipCall(t, s, "InitializeIpForwardEntry", nil)
	if st != 0 {
		t.Fatal(st)
	}
	init, err := decodeRow[forwardRow](b)
	if err != nil || init.ValidLifetime != infinite || init.Immortal != 1 || init.Protocol != unsetProtocol || init.InterfaceIndex != 0 {
		t.Fatalf("initialized row %+v %v", init, err)
	}
	route := func(dst, hop string, index uint32) forwardRow {
		r := init
		p := netip.MustParsePrefix(dst)
		r.InterfaceIndex, r.DestinationPrefix, r.DestinationPrefixLen = index, sockaddrOf(p.Addr()), uint8(p.Bits())
		r.NextHop = sockaddrOf(netip.MustParseAddr(hop))
		return r
	}
	peer := route("10.244.2.0/24", "192.0.2.11", 4)
	peer.Metric, peer.Protocol = 7, mibIPProtoNetMgmt
	if st, _ := ipCall(t, s, "CreateIpForwardEntry2", peer); st != 0 {
		t.Fatalf("adding a route: status %d", st)
	}
	if st, _ := ipCall(t, s, "CreateIpForwardEntry2", route("fd00:10:244:2::/64", "fd77:77::11", 4)); st != 0 {
		t.Fatalf("adding an IPv6 route with the initialized metric and protocol: status %d", st)
	}
	if got := host.Render(); !strings.Contains(got, "route 10.244.2.0/24 via 192.0.2.11 if 4 proto 3") || !strings.Contains(got, "route fd00:10:244:2::/64 via fd77:77::11 if 4 proto 3") {
		t.Errorf("host:\n%s", got)
	}
	for _, c := range []struct {
		what string
		row  forwardRow
		want uint32
	}{
		{"the same route", peer, errorObjectExists},
		{"an unknown interface", route("10.244.3.0/24", "192.0.2.12", 9), errorNotFound},
		{"no interface", route("10.244.3.0/24", "192.0.2.12", 0), errorInvalidParam},
		{"families mixed", route("10.244.3.0/24", "fd77:77::12", 4), errorInvalidParam},
		{"no next hop", func() forwardRow { r := route("10.244.3.0/24", "192.0.2.12", 4); r.NextHop = sockaddrInet{}; return r }(), errorInvalidParam},
		{"a site prefix longer than the destination's", func() forwardRow { r := route("10.244.3.0/24", "192.0.2.12", 4); r.SitePrefixLength = 25; return r }(), errorInvalidParam},
	} {
		if st, _ := ipCall(t, s, "CreateIpForwardEntry2", c.row); st != c.want {
			t.Errorf("%s: status %d, want %d", c.what, st, c.want)
		}
	}

	st, b = ipCall(t, s, "GetIpForwardTable2", afInet)
	if st != 0 || len(b) != 8+104 {
		t.Fatalf("IPv4 routes: status %d, %d bytes, want one row", st, len(b))
	}
	listed, _ := decodeRow[forwardRow](b[8:])
	if listed.DestinationPrefix.addr() != netip.MustParseAddr("10.244.2.0") || listed.DestinationPrefixLen != 24 || listed.Metric != 7 ||
		listed.NextHop.addr() != netip.MustParseAddr("192.0.2.11") || listed.InterfaceLuid != luidOf(4) {
		t.Errorf("listed %+v", listed)
	}

	if st, _ := ipCall(t, s, "DeleteIpForwardEntry2", peer); st != 0 {
		t.Fatalf("deleting: status %d", st)
	}
	if st, _ := ipCall(t, s, "DeleteIpForwardEntry2", peer); st != errorNotFound {
		t.Errorf("deleting it again: status %d, want ERROR_NOT_FOUND", st)
	}
}

// TestIPHelperWithoutHost: an HNS made without a host answers ERROR_NOT_SUPPORTED.
func TestIPHelperWithoutHost(t *testing.T) {
	s := New(hnstest.New(hnstest.Options{}), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if st, _ := ipCall(t, s, "GetIpForwardTable2", afUnspec); st != errorNotSupported {
		t.Errorf("status %d, want ERROR_NOT_SUPPORTED", st)
	}
}
