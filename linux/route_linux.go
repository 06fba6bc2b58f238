package linux

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DefaultRouteInterface is the interface of the main table's IPv4 default route with the
// lowest metric: the external interface when none is configured.
func DefaultRouteInterface() (string, error) {
	routes, err := dump("routes", func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return "", err
	}
	best, idx := -1, 0
	for _, r := range routes {
		if (r.Dst == nil || prefixOf(r.Dst).Bits() == 0) && r.LinkIndex > 0 && (best < 0 || r.Priority < best) {
			best, idx = r.Priority, r.LinkIndex
		}
	}
	if best < 0 {
		return "", errors.New("no IPv4 default route")
	}
	link, err := netlink.LinkByIndex(idx)
	if err != nil {
		return "", fmt.Errorf("interface %d of the default route: %w", idx, err)
	}
	return link.Attrs().Name, nil
}

// RouteTo is the interface the kernel's route to dst leaves by, and the source address it
// picks for it (`ip route get dst`): --iface-can-reach's choice.
func RouteTo(dst netip.Addr) (string, netip.Addr, error) {
	routes, err := netlink.RouteGet(net.IP(dst.AsSlice()))
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("route to %s: %w", dst, err)
	}
	for _, r := range routes {
		if r.LinkIndex <= 0 {
			continue
		}
		link, err := netlink.LinkByIndex(r.LinkIndex)
		if err != nil {
			return "", netip.Addr{}, fmt.Errorf("interface %d of the route to %s: %w", r.LinkIndex, dst, err)
		}
		src, _ := netip.AddrFromSlice(r.Src)
		return link.Attrs().Name, src.Unmap(), nil
	}
	return "", netip.Addr{}, fmt.Errorf("route to %s: leaves by no interface", dst)
}
