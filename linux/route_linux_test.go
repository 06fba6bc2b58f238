package linux

import (
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/netif"
)

// TestRouteToPicksInterface: in a namespace with two interfaces and a route of each family
// through the second, --iface-can-reach's lookup names the interface the kernel's route to
// an address leaves by, with its source, for either family, and netif.Pick takes it.
func TestRouteToPicksInterface(t *testing.T) {
	f := newFixture(t, testLog(t)) // ul0 192.168.50.1/24
	f.must(netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "ul2"}, PeerName: "ul3"}))
	f.must(netlink.LinkSetUp(f.link("ul3")))
	f.must(netlink.LinkSetUp(f.link("ul2")))
	for _, a := range []string{"10.77.0.2/24", "10.77.0.3/24", "fd77::2/64"} {
		f.must(netlink.AddrAdd(f.link("ul2"), &netlink.Addr{IPNet: ipNet(pfx(a)), Flags: unix.IFA_F_NODAD}))
	}
	for _, r := range []struct{ dst, gw, src string }{
		{"198.51.100.0/24", "10.77.0.1", "10.77.0.3"},
		{"2001:db8::/32", "fd77::1", ""},
	} {
		route := &netlink.Route{LinkIndex: f.link("ul2").Attrs().Index, Dst: ipNet(pfx(r.dst)), Gw: ip(r.gw).AsSlice()}
		if r.src != "" {
			route.Src = ip(r.src).AsSlice()
		}
		f.must(netlink.RouteAdd(route))
	}
	for _, c := range []struct{ dst, iface, src string }{
		{"198.51.100.9", "ul2", "10.77.0.3"},
		{"2001:db8:5::1", "ul2", "fd77::2"},
		{"192.168.50.7", "ul0", "192.168.50.1"},
	} {
		name, src, err := RouteTo(ip(c.dst))
		if err != nil || name != c.iface || src != ip(c.src) {
			t.Errorf("RouteTo(%s) = %s %s %v, want %s %s", c.dst, name, src, err, c.iface, c.src)
		}
	}
	if name, _, err := RouteTo(ip("203.0.113.1")); err == nil {
		t.Errorf("RouteTo(203.0.113.1) = %s with no route there", name)
	}

	ifs, err := netif.List()
	f.must(err)
	ext, err := netif.Pick(netif.Choice{CanReach: "198.51.100.9", RouteTo: RouteTo, IPv4: true, IPv6: true}, ifs,
		func() (string, error) { return "ul0", nil })
	if err != nil || ext.Name != "ul2" || ext.Addr != ip("10.77.0.3") || ext.Addr6 != ip("fd77::2") {
		t.Errorf("Pick(--iface-can-reach=198.51.100.9) = %+v, %v; want ul2 10.77.0.3 fd77::2", ext, err)
	}
}
