package netif

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestPick(t *testing.T) {
	p := netip.MustParsePrefix
	ifs := []Interface{
		{Name: "lo", MTU: 65536, Up: true, Prefix: []netip.Prefix{p("127.0.0.1/8"), p("::1/128")}},
		{Name: "eth0", MTU: 1500, Up: true, Prefix: []netip.Prefix{p("fe80::1/64"), p("192.0.2.10/24"), p("198.51.100.7/25")}},
		{Name: "eth1", MTU: 9000, Up: true, Prefix: []netip.Prefix{p("203.0.113.5/24")}},
		{Name: "eth2", MTU: 1500, Up: false, Prefix: []netip.Prefix{p("203.0.114.5/24")}},
		{Name: "eth3", MTU: 1500, Up: true},
	}
	def := func() (string, error) { return "eth1", nil }
	for _, tc := range []struct {
		c          Choice
		name, addr string
		public     string
	}{
		{Choice{}, "eth1", "203.0.113.5", "203.0.113.5"},
		{Choice{Ifaces: []string{"eth0"}}, "eth0", "192.0.2.10", "192.0.2.10"},
		{Choice{Ifaces: []string{"198.51.100.7"}}, "eth0", "198.51.100.7", "198.51.100.7"},
		{Choice{Ifaces: []string{"nope", "eth2", "eth3", "eth1"}}, "eth1", "203.0.113.5", "203.0.113.5"},
		{Choice{Regexps: []string{"^198\\.51\\."}}, "eth0", "198.51.100.7", "198.51.100.7"},
		{Choice{Regexps: []string{"^eth[01]$"}, PublicIP: "192.0.2.99"}, "eth0", "192.0.2.10", "192.0.2.99"},
	} {
		ext, err := Pick(tc.c, ifs, def)
		if err != nil {
			t.Errorf("%+v: %v", tc.c, err)
			continue
		}
		if ext.Name != tc.name || ext.Addr.String() != tc.addr || ext.PublicIP.String() != tc.public {
			t.Errorf("%+v: got %s %s %s, want %s %s %s", tc.c, ext.Name, ext.Addr, ext.PublicIP, tc.name, tc.addr, tc.public)
		}
	}
	if ext, _ := Pick(Choice{Ifaces: []string{"eth0"}}, ifs, def); len(ext.Connected) != 2 {
		t.Errorf("eth0 connected networks %v, want its two IPv4 networks", ext.Connected)
	}
	for _, tc := range []struct {
		c    Choice
		want string
	}{
		{Choice{Ifaces: []string{"eth2"}}, "eth2 is down"},
		{Choice{Ifaces: []string{"eth3"}}, "eth3 has no IPv4 address"},
		{Choice{Ifaces: []string{"nope"}}, "no usable interface"},
		{Choice{Regexps: []string{"^wlan"}}, "no usable interface"},
		{Choice{Regexps: []string{"("}}, `--iface-regex="("`},
		{Choice{PublicIP: "fd00::1"}, `--public-ip="fd00::1"`},
	} {
		if ext, err := Pick(tc.c, ifs, def); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: picked %q, error %v, want one saying %q", tc.c, ext.Name, err, tc.want)
		}
	}
	noRoute := func() (string, error) { return "", errors.New("no default route") }
	if _, err := Pick(Choice{}, ifs, noRoute); err == nil || !strings.Contains(err.Error(), "no default route") {
		t.Errorf("without a default route: error %v", err)
	}
}

// TestList: the loopback interface is on every machine the tests run on, with its address.
func TestList(t *testing.T) {
	ifs, err := List()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		for _, p := range i.Prefix {
			if p.Addr().IsLoopback() && p.Addr().Is4() {
				return
			}
		}
	}
	t.Errorf("no interface holds an IPv4 loopback address: %+v", ifs)
}

// TestPickIPv6: with IPv6 enabled the interface needs a global IPv6 address (link-local ones
// do not count), chosen as flanneld chooses it: the one --iface names, else the first;
// --public-ipv6 replaces the published one; IPv6 alone needs no IPv4 address.
func TestPickIPv6(t *testing.T) {
	p := netip.MustParsePrefix
	ifs := []Interface{
		{Name: "eth0", MTU: 1500, Up: true, Prefix: []netip.Prefix{p("fe80::1/64"), p("192.0.2.10/24"), p("fd77:77::10/64"), p("2001:db8::10/64")}},
		{Name: "eth1", MTU: 1500, Up: true, Prefix: []netip.Prefix{p("fe80::2/64"), p("203.0.113.5/24")}},
		{Name: "eth2", MTU: 1500, Up: true, Prefix: []netip.Prefix{p("fd77:78::5/64")}},
	}
	def := func() (string, error) { return "eth0", nil }
	for _, tc := range []struct {
		c                 Choice
		name, addr, addr6 string
		public, public6   string
		connected         int
	}{
		{Choice{IPv4: true, IPv6: true}, "eth0", "192.0.2.10", "fd77:77::10", "192.0.2.10", "fd77:77::10", 3},
		{Choice{IPv4: true, IPv6: true, Ifaces: []string{"2001:db8::10"}}, "eth0", "192.0.2.10", "2001:db8::10", "192.0.2.10", "2001:db8::10", 3},
		{Choice{IPv4: true, IPv6: true, PublicIPv6: "2001:db8::99"}, "eth0", "192.0.2.10", "fd77:77::10", "192.0.2.10", "2001:db8::99", 3},
		{Choice{IPv6: true, Ifaces: []string{"eth2"}}, "eth2", "invalid IP", "fd77:78::5", "invalid IP", "fd77:78::5", 1},
		{Choice{IPv6: true, Regexps: []string{"^fd77:78:"}}, "eth2", "invalid IP", "fd77:78::5", "invalid IP", "fd77:78::5", 1},
		{Choice{IPv4: true, IPv6: true, Ifaces: []string{"eth1", "eth0"}}, "eth0", "192.0.2.10", "fd77:77::10", "192.0.2.10", "fd77:77::10", 3},
	} {
		ext, err := Pick(tc.c, ifs, def)
		if err != nil {
			t.Errorf("%+v: %v", tc.c, err)
			continue
		}
		if ext.Name != tc.name || ext.Addr.String() != tc.addr || ext.Addr6.String() != tc.addr6 ||
			ext.PublicIP.String() != tc.public || ext.PublicIPv6.String() != tc.public6 || len(ext.Connected) != tc.connected {
			t.Errorf("%+v: got %s %s %s %s %s %v", tc.c, ext.Name, ext.Addr, ext.Addr6, ext.PublicIP, ext.PublicIPv6, ext.Connected)
		}
	}
	for _, tc := range []struct {
		c    Choice
		want string
	}{
		{Choice{IPv4: true, IPv6: true, Ifaces: []string{"eth1"}}, "interface eth1 has no global IPv6 address"},
		{Choice{IPv4: true, IPv6: true, Ifaces: []string{"eth2"}}, "interface eth2 has no IPv4 address"},
		{Choice{IPv4: true, IPv6: true, PublicIPv6: "192.0.2.1"}, `--public-ipv6="192.0.2.1": not an IPv6 address`},
		{Choice{IPv4: true, IPv6: true, PublicIPv6: "fe80::1%eth0"}, `--public-ipv6="fe80::1%eth0": not an IPv6 address`},
		{Choice{IPv4: true, PublicIP: "fd77::1"}, `--public-ip="fd77::1": not an IPv4 address`},
	} {
		if _, err := Pick(tc.c, ifs, def); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.c, err, tc.want)
		}
	}
}

// TestPickCanReach: --iface-can-reach takes the interface of the route to the address, of
// either family, with the route's source as that family's address; it comes after --iface
// and --iface-regex, before the default route, as in flanneld.
func TestPickCanReach(t *testing.T) {
	p := netip.MustParsePrefix
	ifs := []Interface{
		{Name: "eth0", MTU: 1500, Up: true, Prefix: []netip.Prefix{p("192.0.2.10/24"), p("fd77:77::10/64")}},
		{Name: "eth1", MTU: 9000, Up: true, Prefix: []netip.Prefix{p("203.0.113.5/24"), p("203.0.113.6/24"), p("2001:db8::5/64"), p("2001:db8::6/64")}},
	}
	def := func() (string, error) { return "eth0", nil }
	var asked []netip.Addr
	routes := map[netip.Addr]struct {
		iface string
		src   netip.Addr
	}{
		netip.MustParseAddr("198.51.100.1"):  {"eth1", netip.MustParseAddr("203.0.113.6")},
		netip.MustParseAddr("2001:db8:1::1"): {"eth1", netip.MustParseAddr("2001:db8::6")},
		netip.MustParseAddr("192.0.2.77"):    {"eth9", netip.Addr{}},
	}
	routeTo := func(a netip.Addr) (string, netip.Addr, error) {
		asked = append(asked, a)
		r, ok := routes[a]
		if !ok {
			return "", netip.Addr{}, errors.New("network is unreachable")
		}
		return r.iface, r.src, nil
	}
	for _, tc := range []struct {
		c           Choice
		name, addr  string
		addr6       string
		wantAsked   int
		description string
	}{
		{Choice{CanReach: "198.51.100.1"}, "eth1", "203.0.113.6", "invalid IP", 1, "IPv4: the route's source"},
		{Choice{CanReach: "::ffff:198.51.100.1"}, "eth1", "203.0.113.6", "invalid IP", 1, "an IPv4-mapped address is IPv4"},
		{Choice{CanReach: "2001:db8:1::1", IPv4: true, IPv6: true}, "eth1", "203.0.113.5", "2001:db8::6", 1, "IPv6, dual-stack: the IPv4 address is the first"},
		{Choice{CanReach: "198.51.100.1", IPv4: true, IPv6: true}, "eth1", "203.0.113.6", "2001:db8::5", 1, "IPv4, dual-stack"},
		{Choice{CanReach: "2001:db8:1::1"}, "eth1", "203.0.113.5", "invalid IP", 1, "IPv6 target, IPv4 network: the interface's IPv4 address"},
		{Choice{CanReach: "198.51.100.1", Ifaces: []string{"eth0"}}, "eth0", "192.0.2.10", "invalid IP", 0, "--iface first"},
		{Choice{CanReach: "198.51.100.1", Ifaces: []string{"eth7"}}, "eth1", "203.0.113.6", "invalid IP", 1, "after --iface that matches none"},
	} {
		asked = nil
		tc.c.RouteTo = routeTo
		ext, err := Pick(tc.c, ifs, def)
		if err != nil {
			t.Errorf("%s: %v", tc.description, err)
			continue
		}
		if ext.Name != tc.name || ext.Addr.String() != tc.addr || ext.Addr6.String() != tc.addr6 || len(asked) != tc.wantAsked {
			t.Errorf("%s: got %s %s %s after %d lookups, want %s %s %s after %d", tc.description, ext.Name, ext.Addr, ext.Addr6, len(asked),
				tc.name, tc.addr, tc.addr6, tc.wantAsked)
		}
	}
	for _, tc := range []struct {
		c    Choice
		want string
	}{
		{Choice{CanReach: "eth0", RouteTo: routeTo}, `--iface-can-reach="eth0": not an IP address`},
		{Choice{CanReach: "203.0.114.1", RouteTo: routeTo}, "network is unreachable"},
		{Choice{CanReach: "192.0.2.77", RouteTo: routeTo}, "interface eth9 of the route to --iface-can-reach=192.0.2.77 not found"},
		{Choice{CanReach: "198.51.100.1"}, "has no route lookup"},
	} {
		if ext, err := Pick(tc.c, ifs, def); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: picked %q, error %v, want %q", tc.c.CanReach, ext.Name, err, tc.want)
		}
	}
}
