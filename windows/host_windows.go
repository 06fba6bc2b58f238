package windows

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"
	"unsafe"

	xwin "golang.org/x/sys/windows"
)

// IPHelper is the Host of a Windows machine, on the IP Helper API (iphlpapi.dll): never
// PowerShell or netsh. x/sys has the table reads; the writes it lacks are called through
// the lazily loaded DLL.
type IPHelper struct {
	initRoute, createRoute, deleteRoute, getInterface, setInterface *xwin.LazyProc
}

var _ Host = (*IPHelper)(nil)

// NewIPHelper returns the host's IP stack. Nothing is loaded until the first call.
func NewIPHelper() *IPHelper {
	dll := xwin.NewLazySystemDLL("iphlpapi.dll")
	return &IPHelper{
		initRoute:    dll.NewProc("InitializeIpForwardEntry"),
		createRoute:  dll.NewProc("CreateIpForwardEntry2"),
		deleteRoute:  dll.NewProc("DeleteIpForwardEntry2"),
		getInterface: dll.NewProc("GetIpInterfaceEntry"), // x/sys's panics where it is missing (Wine)
		setInterface: dll.NewProc("SetIpInterfaceEntry"),
	}
}

// addrOf reads an IPv4 or IPv6 SOCKADDR_INET; invalid for any other family. An IPv6 address
// keeps no scope: weft's routes and addresses are global ones.
func addrOf(s *xwin.RawSockaddrInet) netip.Addr {
	switch s.Family {
	case xwin.AF_INET:
		return netip.AddrFrom4((*xwin.RawSockaddrInet4)(unsafe.Pointer(s)).Addr)
	case xwin.AF_INET6:
		return netip.AddrFrom16((*xwin.RawSockaddrInet6)(unsafe.Pointer(s)).Addr)
	}
	return netip.Addr{}
}

// sockaddrOf writes an address as a SOCKADDR_INET of its family.
func sockaddrOf(a netip.Addr) xwin.RawSockaddrInet {
	var s xwin.RawSockaddrInet
	if a.Is6() {
		s6 := (*xwin.RawSockaddrInet6)(unsafe.Pointer(&s))
		s6.Family = xwin.AF_INET6
		s6.Addr = a.As16()
		return s
	}
	s4 := (*xwin.RawSockaddrInet4)(unsafe.Pointer(&s))
	s4.Family = xwin.AF_INET
	s4.Addr = a.As4()
	return s
}

// familyOf is the address family of v6.
func familyOf(v6 bool) uint16 {
	if v6 {
		return xwin.AF_INET6
	}
	return xwin.AF_INET
}

// call calls an iphlpapi function that takes one row and returns a NETIO_STATUS.
func call(p *xwin.LazyProc, row unsafe.Pointer, what string) error {
	if err := p.Find(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	r, _, _ := p.Call(uintptr(row))
	return status(r, what)
}

// status turns a NETIO_STATUS (a Win32 error code) into an error matching ErrExists or
// ErrNotFound where it means that.
func status(r uintptr, what string) error {
	switch errno := xwin.Errno(r); errno {
	case 0:
		return nil
	case xwin.ERROR_OBJECT_ALREADY_EXISTS:
		return fmt.Errorf("%s: %w: %w", what, ErrExists, errno)
	case xwin.ERROR_NOT_FOUND, xwin.ERROR_FILE_NOT_FOUND:
		return fmt.Errorf("%s: %w: %w", what, ErrNotFound, errno)
	default:
		return fmt.Errorf("%s: %w", what, errno)
	}
}

// Interfaces implements Host.
func (h *IPHelper) Interfaces() ([]Interface, error) {
	var table *xwin.MibUnicastIpAddressTable
	if err := xwin.GetUnicastIpAddressTable(xwin.AF_UNSPEC, &table); errors.Is(err, xwin.ERROR_NOT_FOUND) {
		return nil, nil // no address at all: Microsoft documents no table, ERROR_NOT_FOUND
	} else if err != nil {
		return nil, fmt.Errorf("GetUnicastIpAddressTable: %w", err)
	}
	defer xwin.FreeMibTable(unsafe.Pointer(table))
	var out []Interface
	for _, row := range unsafe.Slice(&table.Table[0], table.NumEntries) {
		a := addrOf((*xwin.RawSockaddrInet)(unsafe.Pointer(&row.Address)))
		if !a.IsValid() {
			continue
		}
		i := slices.IndexFunc(out, func(x Interface) bool { return x.Index == row.InterfaceIndex })
		if i < 0 {
			ifc := Interface{Index: row.InterfaceIndex}
			if ni, err := net.InterfaceByIndex(int(row.InterfaceIndex)); err == nil {
				ifc.Name = ni.Name
			}
			for _, v6 := range []bool{false, true} {
				ipif := xwin.MibIpInterfaceRow{Family: familyOf(v6), InterfaceIndex: row.InterfaceIndex}
				if call(h.getInterface, unsafe.Pointer(&ipif), "GetIpInterfaceEntry") == nil {
					if v6 {
						ifc.Forwarding6 = ipif.ForwardingEnabled != 0
					} else {
						ifc.Forwarding = ipif.ForwardingEnabled != 0
					}
				}
			}
			out = append(out, ifc)
			i = len(out) - 1
		}
		out[i].Prefixes = append(out[i].Prefixes, netip.PrefixFrom(a, int(row.OnLinkPrefixLength)))
	}
	return out, nil
}

// SetForwarding implements Host.
func (h *IPHelper) SetForwarding(index uint32, v6 bool) error {
	row := xwin.MibIpInterfaceRow{Family: familyOf(v6), InterfaceIndex: index}
	if err := call(h.getInterface, unsafe.Pointer(&row), fmt.Sprintf("reading interface %d", index)); err != nil {
		return err
	}
	row.ForwardingEnabled = 1
	if !v6 {
		row.SitePrefixLength = 0 // SetIpInterfaceEntry refuses an IPv4 row with one
	}
	return call(h.setInterface, unsafe.Pointer(&row), fmt.Sprintf("enabling forwarding on interface %d", index))
}

// Routes implements Host.
func (h *IPHelper) Routes() ([]HostRoute, error) {
	var table *xwin.MibIpForwardTable2
	if err := xwin.GetIpForwardTable2(xwin.AF_UNSPEC, &table); errors.Is(err, xwin.ERROR_NOT_FOUND) {
		return nil, nil // no route at all (as for the addresses)
	} else if err != nil {
		return nil, fmt.Errorf("GetIpForwardTable2: %w", err)
	}
	defer xwin.FreeMibTable(unsafe.Pointer(table))
	rows := table.Rows()
	out := make([]HostRoute, 0, len(rows))
	for i := range rows {
		out = append(out, routeOf(&rows[i]))
	}
	return out, nil
}

func routeOf(r *xwin.MibIpForwardRow2) HostRoute {
	return HostRoute{
		Dst:      netip.PrefixFrom(addrOf(&r.DestinationPrefix.Prefix), int(r.DestinationPrefix.PrefixLength)),
		NextHop:  addrOf(&r.NextHop),
		IfIndex:  r.InterfaceIndex,
		Metric:   r.Metric,
		Protocol: RouteProtocol(r.Protocol),
	}
}

// row is the MIB_IPFORWARD_ROW2 of r: defaults from InitializeIpForwardEntry (infinite
// lifetimes and the rest), then what the route is.
func (h *IPHelper) row(r HostRoute) (xwin.MibIpForwardRow2, error) {
	var row xwin.MibIpForwardRow2
	if err := h.initRoute.Find(); err != nil {
		return row, fmt.Errorf("InitializeIpForwardEntry: %w", err)
	}
	h.initRoute.Call(uintptr(unsafe.Pointer(&row))) // returns nothing
	fillRow(&row, r)
	return row, nil
}

func fillRow(row *xwin.MibIpForwardRow2, r HostRoute) {
	row.InterfaceIndex = r.IfIndex
	row.DestinationPrefix = xwin.IpAddressPrefix{Prefix: sockaddrOf(r.Dst.Masked().Addr()), PrefixLength: uint8(r.Dst.Bits())}
	row.NextHop = sockaddrOf(r.NextHop)
	row.Metric = r.Metric
	row.Protocol = xwin.MIB_IPPROTO_NETMGMT
}

// AddRoute implements Host.
func (h *IPHelper) AddRoute(r HostRoute) error {
	row, err := h.row(r)
	if err != nil {
		return err
	}
	return call(h.createRoute, unsafe.Pointer(&row), "adding route "+r.String())
}

// DeleteRoute implements Host.
func (h *IPHelper) DeleteRoute(r HostRoute) error {
	row, err := h.row(r)
	if err != nil {
		return err
	}
	return call(h.deleteRoute, unsafe.Pointer(&row), "deleting route "+r.String())
}

// HostReady waits until an interface holds a (Config.HostReady): after HNS makes a
// network the host's address moves to a new vNIC, and the host has no network until it is
// there.
func (h *IPHelper) HostReady(ctx context.Context, a netip.Addr) error {
	for {
		ifs, err := h.Interfaces()
		if err == nil && slices.ContainsFunc(ifs, func(i Interface) bool {
			return slices.ContainsFunc(i.Prefixes, func(p netip.Prefix) bool { return p.Addr() == a })
		}) {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("no interface holds %s: %w", a, ctx.Err()), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// DefaultRouteInterface is the name of the interface of the best IPv4 default route, the
// external interface when weftd is given no --iface.
func (h *IPHelper) DefaultRouteInterface() (string, error) {
	routes, err := h.Routes()
	if err != nil {
		return "", err
	}
	r, ok := defaultRoute(routes)
	if !ok {
		return "", fmt.Errorf("no IPv4 default route: %w", ErrNotFound)
	}
	ifc, err := net.InterfaceByIndex(int(r.IfIndex))
	if err != nil {
		return "", fmt.Errorf("interface %d of the default route: %w", r.IfIndex, err)
	}
	return ifc.Name, nil
}
