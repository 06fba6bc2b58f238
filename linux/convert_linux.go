package linux

import (
	"errors"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/backend"
)

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip) // the kernel sends 4 bytes for IPv4, so no unmapping
	return a
}

func prefixOf(n *net.IPNet) netip.Prefix {
	if n == nil {
		return netip.Prefix{}
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}
	}
	ones, bits := n.Mask.Size()
	if bits == 32 {
		a = a.Unmap() // the library writes default routes as net.IPv4zero, 16 bytes long
	}
	return netip.PrefixFrom(a, ones)
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func macOf(hw net.HardwareAddr) backend.MAC {
	var m backend.MAC
	if len(hw) == len(m) {
		copy(m[:], hw)
	}
	return m
}

func fromRoute(r netlink.Route, names map[int]string) kernelRoute {
	k := kernelRoute{
		Route: Route{
			Dst:    prefixOf(r.Dst),
			Gw:     addrOf(r.Gw),
			Onlink: r.Flags&int(netlink.FLAG_ONLINK) != 0,
		},
		Metric:      r.Priority,
		ProtoKernel: r.Protocol == unix.RTPROT_KERNEL,
	}
	if r.Type == unix.RTN_UNICAST && len(r.MultiPath) == 0 {
		k.Dev = names[r.LinkIndex]
	}
	k.Blackhole = r.Type == unix.RTN_BLACKHOLE
	return k
}

// familyOf is the address family of a.
func familyOf(a netip.Addr) int {
	if a.Is6() {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

// deleted reads the result of a delete: 1 when it removed the entry, 0 when the entry was
// already gone (deleted by hand, or rewritten in place by a replace just before).
func deleted(err error) (int, error) {
	switch {
	case err == nil:
		return 1, nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ESRCH), errors.Is(err, unix.EADDRNOTAVAIL):
		return 0, nil
	default:
		return 0, err
	}
}
