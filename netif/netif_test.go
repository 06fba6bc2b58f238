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
