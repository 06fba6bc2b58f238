package hnssim

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"unsafe"

	xwin "golang.org/x/sys/windows"
)

// bytesOf is the memory of v, as a DLL receives it from a Go caller.
func bytesOf[T any](v *T, n int) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(v)), n) }

// TestMIBLayouts: the rows the service decodes are laid out as golang.org/x/sys/windows's
// types, which weftd passes to iphlpapi.dll: a row x/sys filled decodes to the same values,
// and a row the service encodes reads back through x/sys. (x/sys declares
// MIB_IPINTERFACE_ROW's TransmitOffload and ReceiveOffload as ULONGs, 176 bytes; in
// netioapi.h they are NL_INTERFACE_OFFLOAD_ROD, a byte of bit fields, 168 bytes, as
// mingw-w64's headers have it too: the service's row ends where Windows' does.)
func TestMIBLayouts(t *testing.T) {
	if n := binary.Size(ipInterfaceRow{}); n != 168 || unsafe.Offsetof(xwin.MibIpInterfaceRow{}.TransmitOffload) != 164 {
		t.Errorf("MIB_IPINTERFACE_ROW: %d bytes, x/sys's TransmitOffload at %d; want 168 and 164",
			n, unsafe.Offsetof(xwin.MibIpInterfaceRow{}.TransmitOffload))
	}
	x := xwin.MibIpInterfaceRow{Family: xwin.AF_INET6, InterfaceLuid: 0x0006000004000000, InterfaceIndex: 4, ForwardingEnabled: 1,
		SitePrefixLength: 48, Metric: 25, NlMtu: 1500, Connected: 1, ReachableTime: 30000, RouterDiscoveryBehavior: 2}
	x.ZoneIndices[15] = 7
	row, err := decodeRow[ipInterfaceRow](bytesOf(&x, 168))
	if err != nil || row.Family != afInet6 || row.InterfaceLuid != x.InterfaceLuid || row.InterfaceIndex != 4 || row.ForwardingEnabled != 1 ||
		row.SitePrefixLength != 48 || row.Metric != 25 || row.NlMtu != 1500 || row.Connected != 1 || row.ReachableTime != 30000 ||
		row.RouterDiscoveryBehavior != 2 || row.ZoneIndices[15] != 7 {
		t.Errorf("MIB_IPINTERFACE_ROW from x/sys read as %+v (%v)", row, err)
	}
	var back xwin.MibIpInterfaceRow
	copy(bytesOf(&back, 168), encode(row))
	if back.InterfaceLuid != x.InterfaceLuid || back.ForwardingEnabled != 1 || back.SitePrefixLength != 48 || back.ReachableTime != 30000 {
		t.Errorf("MIB_IPINTERFACE_ROW back through x/sys: %+v", back)
	}

	if n := binary.Size(forwardRow{}); n != int(unsafe.Sizeof(xwin.MibIpForwardRow2{})) {
		t.Errorf("MIB_IPFORWARD_ROW2: %d bytes, x/sys's %d", n, unsafe.Sizeof(xwin.MibIpForwardRow2{}))
	}
	f := xwin.MibIpForwardRow2{InterfaceLuid: 9, InterfaceIndex: 4, SitePrefixLength: 3, Metric: 7, Protocol: xwin.MIB_IPPROTO_NETMGMT,
		ValidLifetime: 11, PreferredLifetime: 10, Immortal: 1, Age: 5, Origin: 2}
	f.DestinationPrefix.PrefixLength = 64
	dst := (*xwin.RawSockaddrInet6)(unsafe.Pointer(&f.DestinationPrefix.Prefix))
	dst.Family, dst.Addr = xwin.AF_INET6, netip.MustParseAddr("fd00:10:244:2::").As16()
	hop := (*xwin.RawSockaddrInet4)(unsafe.Pointer(&f.NextHop))
	hop.Family, hop.Addr = xwin.AF_INET, [4]byte{192, 0, 2, 11}
	fr, err := decodeRow[forwardRow](bytesOf(&f, binary.Size(forwardRow{})))
	if err != nil || fr.InterfaceLuid != 9 || fr.InterfaceIndex != 4 || fr.DestinationPrefix.addr() != netip.MustParseAddr("fd00:10:244:2::") ||
		fr.DestinationPrefixLen != 64 || fr.NextHop.addr() != netip.MustParseAddr("192.0.2.11") || fr.SitePrefixLength != 3 ||
		fr.ValidLifetime != 11 || fr.PreferredLifetime != 10 || fr.Metric != 7 || fr.Protocol != 3 || fr.Immortal != 1 || fr.Age != 5 || fr.Origin != 2 {
		t.Errorf("MIB_IPFORWARD_ROW2 from x/sys read as %+v (%v)", fr, err)
	}

	if n := binary.Size(unicastRow{}); n != int(unsafe.Sizeof(xwin.MibUnicastIpAddressRow{})) {
		t.Errorf("MIB_UNICASTIPADDRESS_ROW: %d bytes, x/sys's %d", n, unsafe.Sizeof(xwin.MibUnicastIpAddressRow{}))
	}
	u := unicastRow{Address: sockaddrOf(netip.MustParseAddr("192.0.2.10")), InterfaceLuid: 8, InterfaceIndex: 4, PrefixOrigin: 1,
		SuffixOrigin: 1, ValidLifetime: infinite, OnLinkPrefixLength: 24, DadState: dadStatePreferred, ScopeID: 3, CreationTimeStamp: 99}
	var xu xwin.MibUnicastIpAddressRow
	copy(bytesOf(&xu, binary.Size(u)), encode(u))
	a4 := (*xwin.RawSockaddrInet4)(unsafe.Pointer(&xu.Address))
	if a4.Family != xwin.AF_INET || a4.Addr != [4]byte{192, 0, 2, 10} || xu.InterfaceLuid != 8 || xu.InterfaceIndex != 4 ||
		xu.OnLinkPrefixLength != 24 || xu.DadState != dadStatePreferred || xu.ScopeId != 3 || xu.CreationTimeStamp.LowDateTime != 99 {
		t.Errorf("MIB_UNICASTIPADDRESS_ROW through x/sys: %+v", xu)
	}
}
