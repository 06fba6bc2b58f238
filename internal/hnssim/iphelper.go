package hnssim

import (
	"encoding/hex"
	"errors"
	"net/netip"
	"slices"
	"strconv"

	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

// The IP Helper functions the simulated iphlpapi.dll (tools/wine/iphlpapi) hands over: the
// node's IP stack as weftd's host code uses it (windows/host_windows.go), played on the
// simulated host of the HNS this service serves (hnstest.Options.Host), the host whose
// addresses its HNS moves when it makes a vSwitch or attaches an endpoint. Each answers with
// the Win32 status Microsoft documents for the function (learn.microsoft.com, the
// netioapi.h pages of each function), in the HRESULT field of the answer, and the rows as
// the caller's bytes, in hex.

// Win32 statuses (winerror.h).
const (
	errorSuccess      = 0
	errorFileNotFound = 2
	errorGenFailure   = 31
	errorInvalidParam = 87
	errorNotSupported = 50
	errorNotFound     = 1168
	errorObjectExists = 5010
	infinite          = 0xFFFFFFFF
	mibIPProtoNetMgmt = 3 // MIB_IPPROTO_NETMGMT: a static route
	ifTypeEthernet    = 6 // IF_TYPE_ETHERNET_CSMACD
	dadStatePreferred = 4 // IpDadStatePreferred
	originManual      = 1 // IpPrefixOriginManual, IpSuffixOriginManual
)

// Values InitializeIpForwardEntry gives SitePrefixLength, Metric and Protocol: Microsoft
// documents them as "illegal values", not which; CreateIpForwardEntry2 takes them as not
// given, as Windows does for wireguard-windows' routes, made without setting SitePrefixLength
// or Protocol (tunnel/winipcfg/luid.go, AddRoute).
const (
	unsetSitePrefix = 0xFF
	unsetMetric     = infinite
	unsetProtocol   = infinite
)

// ipHelper answers an IP Helper call, and reports whether r was one.
func (s *Server) ipHelper(r request) (answer, bool) {
	var do func(h *hnstest.Host, arg string) (uint32, []byte)
	switch r.call {
	case "GetUnicastIpAddressTable":
		do = unicastTable
	case "GetIpForwardTable2":
		do = forwardTable
	case "GetIpInterfaceEntry":
		do = getInterface
	case "SetIpInterfaceEntry":
		do = setInterface
	case "InitializeIpForwardEntry":
		do = initForward
	case "CreateIpForwardEntry2":
		do = createForward
	case "DeleteIpForwardEntry2":
		do = deleteForward
	default:
		return answer{}, false
	}
	h := s.hns.Host()
	if h == nil {
		s.log.Warn("hnssim: an IP Helper call, and the HNS has no simulated host", "call", r.call)
		return answer{hr: errorNotSupported}, true
	}
	st, out := do(h, r.a)
	return answer{hr: st, result: hex.EncodeToString(out)}, true
}

// luidOf is the simulated LUID of interface index: an Ethernet interface's (NET_LUID's
// IfType in its top 16 bits) with the index as its NetLuidIndex (the 24 bits below). The
// host models no other kind.
func luidOf(index uint32) uint64 { return ifTypeEthernet<<48 | uint64(index&0xFFFFFF)<<24 }

// lookup finds the interface a row names: by LUID if it has one, else by index (the order
// Microsoft documents for every function taking a row). Neither is ERROR_INVALID_PARAMETER,
// an interface the host lacks the status missing.
func lookup(h *hnstest.Host, luid uint64, index uint32, missing uint32) (windows.Interface, uint32) {
	if luid == 0 && index == 0 {
		return windows.Interface{}, errorInvalidParam
	}
	ifs, _ := h.Interfaces() // the in-memory host cannot fail
	i := slices.IndexFunc(ifs, func(i windows.Interface) bool {
		if luid != 0 {
			return luidOf(i.Index) == luid
		}
		return i.Index == index
	})
	if i < 0 {
		return windows.Interface{}, missing
	}
	return ifs[i], errorSuccess
}

// familyOf reads a table call's family: AF_UNSPEC, AF_INET or AF_INET6.
func familyOf(arg string) (uint16, bool) {
	f, err := strconv.ParseUint(arg, 10, 16)
	return uint16(f), err == nil && (f == afUnspec || f == afInet || f == afInet6)
}

func wants(family uint16, a netip.Addr) bool {
	return family == afUnspec || family == afInet && a.Is4() || family == afInet6 && a.Is6()
}

// unicastTable is GetUnicastIpAddressTable: every address of the family (both for
// AF_UNSPEC), ERROR_NOT_FOUND if there is none. Origins are manual, lifetimes infinite, DAD
// done: the host models static addresses alone.
func unicastTable(h *hnstest.Host, arg string) (uint32, []byte) {
	family, ok := familyOf(arg)
	if !ok {
		return errorInvalidParam, nil
	}
	ifs, _ := h.Interfaces()
	var rows []unicastRow
	for _, i := range ifs {
		for _, p := range i.Prefixes {
			if wants(family, p.Addr()) {
				rows = append(rows, unicastRow{Address: sockaddrOf(p.Addr()), InterfaceLuid: luidOf(i.Index), InterfaceIndex: i.Index,
					PrefixOrigin: originManual, SuffixOrigin: originManual, ValidLifetime: infinite, PreferredLifetime: infinite,
					OnLinkPrefixLength: uint8(p.Bits()), DadState: dadStatePreferred})
			}
		}
	}
	if len(rows) == 0 {
		return errorNotFound, nil
	}
	return errorSuccess, table(rows)
}

// forwardTable is GetIpForwardTable2: every route of the family, ERROR_NOT_FOUND if there
// is none.
func forwardTable(h *hnstest.Host, arg string) (uint32, []byte) {
	family, ok := familyOf(arg)
	if !ok {
		return errorInvalidParam, nil
	}
	routes, _ := h.Routes()
	var rows []forwardRow
	for _, r := range routes {
		if wants(family, r.Dst.Addr()) {
			rows = append(rows, forwardRow{InterfaceLuid: luidOf(r.IfIndex), InterfaceIndex: r.IfIndex,
				DestinationPrefix: sockaddrOf(r.Dst.Addr()), DestinationPrefixLen: uint8(r.Dst.Bits()), NextHop: sockaddrOf(r.NextHop),
				ValidLifetime: infinite, PreferredLifetime: infinite, Metric: r.Metric, Protocol: uint32(r.Protocol), Immortal: 1})
		}
	}
	if len(rows) == 0 {
		return errorNotFound, nil
	}
	return errorSuccess, table(rows)
}

// interfaceRow is what GetIpInterfaceEntry answers for an interface and family. The host
// models forwarding alone; the rest is the simulation's: connected, automatic metric, a site
// prefix length of 64 (Windows reports one over 32 for IPv4, which SetIpInterfaceEntry then
// refuses, as wireguard-windows' patch for it shows, tunnel/winipcfg/types.go; the value is
// unverified), zero elsewhere.
func interfaceRow(i windows.Interface, family uint16) ipInterfaceRow {
	row := ipInterfaceRow{Family: family, InterfaceLuid: luidOf(i.Index), InterfaceIndex: i.Index,
		UseAutomaticMetric: 1, SitePrefixLength: 64, Connected: 1}
	if family == afInet6 && i.Forwarding6 || family == afInet && i.Forwarding {
		row.ForwardingEnabled = 1
	}
	return row
}

// interfaceArg reads a MIB_IPINTERFACE_ROW and finds its interface: a family of AF_INET or
// AF_INET6 and a LUID or an index are required (ERROR_INVALID_PARAMETER), an interface the
// host lacks is ERROR_FILE_NOT_FOUND. Every interface has both families (Windows binds IPv4
// and IPv6 to each adapter by default: unverified for HNS's vNICs).
func interfaceArg(h *hnstest.Host, arg string) (ipInterfaceRow, windows.Interface, uint32) {
	b, err := hex.DecodeString(arg)
	if err != nil {
		return ipInterfaceRow{}, windows.Interface{}, errorInvalidParam
	}
	row, err := decodeRow[ipInterfaceRow](b)
	if err != nil || row.Family != afInet && row.Family != afInet6 {
		return row, windows.Interface{}, errorInvalidParam
	}
	i, st := lookup(h, row.InterfaceLuid, row.InterfaceIndex, errorFileNotFound)
	return row, i, st
}

// getInterface is GetIpInterfaceEntry.
func getInterface(h *hnstest.Host, arg string) (uint32, []byte) {
	row, i, st := interfaceArg(h, arg)
	if st != errorSuccess {
		return st, nil
	}
	return errorSuccess, encode(interfaceRow(i, row.Family))
}

// setInterface is SetIpInterfaceEntry. For IPv4 the row's SitePrefixLength must be 0
// (Microsoft's remarks), for IPv6 at most 128: else ERROR_INVALID_PARAMETER, the Stack
// Overflow question 54857292 wireguard-windows' patch cites (tunnel/winipcfg/types.go; the
// IPv6 bound is read from that patch). The members Microsoft says Windows ignores on a set
// are ignored; of the rest, the host models forwarding alone: a row changing anything else is
// refused with ERROR_NOT_SUPPORTED, so that a client asking for what the simulation cannot
// play learns it.
func setInterface(h *hnstest.Host, arg string) (uint32, []byte) {
	row, i, st := interfaceArg(h, arg)
	if st != errorSuccess {
		return st, nil
	}
	if row.Family == afInet && row.SitePrefixLength != 0 || row.SitePrefixLength > 128 {
		return errorInvalidParam, nil
	}
	have := interfaceRow(i, row.Family)
	got := row
	if row.Family == afInet {
		got.SitePrefixLength = have.SitePrefixLength // the 0 a set must carry for what Get reports
	}
	for _, r := range []*ipInterfaceRow{&have, &got} {
		r.InterfaceLuid, r.ForwardingEnabled = have.InterfaceLuid, 0
		r.MaxReassemblySize, r.MinRouterAdvertisementInterval, r.MaxRouterAdvertisementInterval = 0, 0, 0
		r.Connected, r.SupportsWakeUpPatterns, r.SupportsNeighborDiscovery, r.SupportsRouterDiscovery = 0, 0, 0, 0
		r.ReachableTime, r.TransmitOffload, r.ReceiveOffload = 0, 0, 0
	}
	if got != have {
		return errorNotSupported, nil
	}
	if err := h.Forward(i.Index, row.Family == afInet6, row.ForwardingEnabled != 0); err != nil {
		return errorFileNotFound, nil
	}
	row.InterfaceLuid = luidOf(i.Index)
	return errorSuccess, encode(row)
}

// initForward is InitializeIpForwardEntry: lifetimes infinite, Loopback,
// AutoconfigureAddress, Publish and Immortal true, SitePrefixLength, Metric and Protocol an
// illegal value, zero elsewhere (Microsoft's remarks).
func initForward(*hnstest.Host, string) (uint32, []byte) {
	return errorSuccess, encode(forwardRow{ValidLifetime: infinite, PreferredLifetime: infinite, Loopback: 1,
		AutoconfigureAddress: 1, Publish: 1, Immortal: 1, SitePrefixLength: unsetSitePrefix, Metric: unsetMetric, Protocol: unsetProtocol})
}

// routeOf reads the route a MIB_IPFORWARD_ROW2 stands for, with the checks Microsoft
// documents for CreateIpForwardEntry2 and DeleteIpForwardEntry2: a destination prefix and a
// next hop of one family (ERROR_INVALID_PARAMETER; that mixed families are refused so is
// unverified), a LUID or an index, a preferred lifetime within the valid one, a site prefix no
// longer than the destination's; an interface the host lacks is ERROR_NOT_FOUND. The prefix
// is kept masked (unverified).
func routeOf(h *hnstest.Host, arg string) (windows.HostRoute, forwardRow, uint32) {
	b, err := hex.DecodeString(arg)
	if err != nil {
		return windows.HostRoute{}, forwardRow{}, errorInvalidParam
	}
	row, err := decodeRow[forwardRow](b)
	if err != nil {
		return windows.HostRoute{}, row, errorInvalidParam
	}
	dst, hop := row.DestinationPrefix.addr(), row.NextHop.addr()
	prefix, err := dst.Prefix(int(row.DestinationPrefixLen))
	switch {
	case !dst.IsValid() || !hop.IsValid() || dst.Is4() != hop.Is4() || err != nil,
		row.PreferredLifetime > row.ValidLifetime,
		row.SitePrefixLength != unsetSitePrefix && int(row.SitePrefixLength) > prefix.Bits():
		return windows.HostRoute{}, row, errorInvalidParam
	}
	i, st := lookup(h, row.InterfaceLuid, row.InterfaceIndex, errorNotFound)
	if st != errorSuccess {
		return windows.HostRoute{}, row, st
	}
	return windows.HostRoute{Dst: prefix, NextHop: hop, IfIndex: i.Index, Metric: row.Metric, Protocol: windows.RouteProtocol(row.Protocol)}, row, errorSuccess
}

// createForward is CreateIpForwardEntry2: the route on the host, ERROR_OBJECT_ALREADY_EXISTS
// if the host has one of its destination, next hop and interface. A metric or protocol left
// as InitializeIpForwardEntry set it is taken as 0 and MIB_IPPROTO_NETMGMT.
func createForward(h *hnstest.Host, arg string) (uint32, []byte) {
	r, row, st := routeOf(h, arg)
	if st != errorSuccess {
		return st, nil
	}
	if row.Metric == unsetMetric {
		r.Metric = 0
	}
	if row.Protocol == unsetProtocol {
		r.Protocol = mibIPProtoNetMgmt
	}
	return statusOf(h.AddRoute(r)), nil
}

// deleteForward is DeleteIpForwardEntry2: ERROR_NOT_FOUND for a route the host lacks.
func deleteForward(h *hnstest.Host, arg string) (uint32, []byte) {
	r, _, st := routeOf(h, arg)
	if st != errorSuccess {
		return st, nil
	}
	return statusOf(h.DeleteRoute(r)), nil
}

// statusOf is the Win32 status of the in-memory host's answer.
func statusOf(err error) uint32 {
	switch {
	case err == nil:
		return errorSuccess
	case errors.Is(err, windows.ErrExists):
		return errorObjectExists
	case errors.Is(err, windows.ErrNotFound):
		return errorNotFound
	}
	return errorGenFailure
}
