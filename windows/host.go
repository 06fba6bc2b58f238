package windows

import (
	"fmt"
	"net/netip"
)

// Host is the host's IP stack as host-gw needs it: interfaces, forwarding and the route
// table, of both families. On Windows it is the IP Helper API (host_windows.go); hnstest.Host
// stands in for tests.
type Host interface {
	Interfaces() ([]Interface, error)
	// SetForwarding enables forwarding of the family (IPv6 if v6) on an interface: Windows
	// keeps it per interface and family.
	SetForwarding(index uint32, v6 bool) error
	// Routes lists the routes of both families.
	Routes() ([]HostRoute, error)
	AddRoute(r HostRoute) error
	// DeleteRoute deletes the route with r's destination, next hop and interface.
	DeleteRoute(r HostRoute) error
}

// Interface is one interface of the host.
type Interface struct {
	Index       uint32
	Name        string
	Prefixes    []netip.Prefix // addresses of both families with their on-link prefix length
	Forwarding  bool           // IPv4 forwarding
	Forwarding6 bool           // IPv6 forwarding
}

// forwards reports whether the interface forwards the family (IPv6 if v6).
func (i Interface) forwards(v6 bool) bool {
	if v6 {
		return i.Forwarding6
	}
	return i.Forwarding
}

// RouteProtocol says who made a route (MIB_IPFORWARD_ROW2's Protocol).
type RouteProtocol uint32

// ProtoNetMgmt is a static route: what CreateIpForwardEntry2 makes, and what weft owns.
const ProtoNetMgmt RouteProtocol = 3

// HostRoute is a route of the host, of either family.
type HostRoute struct {
	Dst      netip.Prefix
	NextHop  netip.Addr // 0.0.0.0 or :: for on-link routes
	IfIndex  uint32
	Metric   uint32
	Protocol RouteProtocol
}

func (r HostRoute) String() string {
	return fmt.Sprintf("%s via %s if %d", r.Dst, r.NextHop, r.IfIndex)
}

// same reports whether two routes are the same entry of the table (Windows keys routes by
// destination, next hop and interface).
func (r HostRoute) same(o HostRoute) bool {
	return r.Dst == o.Dst && r.NextHop == o.NextHop && r.IfIndex == o.IfIndex
}

// defaultRoute is the IPv4 default route with the lowest metric.
func defaultRoute(routes []HostRoute) (HostRoute, bool) {
	var best HostRoute
	found := false
	for _, r := range routes {
		if r.Dst.Bits() == 0 && r.Dst.Addr().Is4() && (!found || r.Metric < best.Metric) {
			best, found = r, true
		}
	}
	return best, found
}
