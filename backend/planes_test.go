package backend_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/linux"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows"
)

// TestPlaneCapabilities: what each data plane declares, side by side, through its effect on
// configs and backends: the configs the netlink plane carries and the HNS plane refuses (with
// the key and flanneld's Windows rules), the defaults each gives a config that names none,
// the MTU left by each family's encapsulation, and which plane runs the overlay probes.
func TestPlaneCapabilities(t *testing.T) {
	planes := []struct {
		name string
		caps backend.Capabilities
	}{{"linux", linux.Capabilities()}, {"windows", windows.Capabilities()}}
	const (
		v4     = `"Network":"10.244.0.0/16",`
		dual   = `"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10::/56",`
		v6only = `"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10::/56",`
	)
	for _, c := range []struct {
		conf string
		// refused: the key each plane refuses the config with, "" when it carries it.
		linux, windows string
	}{
		{`{` + v4 + `"Backend":{"Type":"vxlan"}}`, "", ""},
		{`{` + v4 + `"Backend":{"Type":"vxlan","VNI":1}}`, "", "Backend.VNI"},
		{`{` + v4 + `"Backend":{"Type":"vxlan","VNI":0}}`, "", "Backend.VNI"},
		{`{` + v4 + `"Backend":{"Type":"vxlan","VNI":4095}}`, "", "Backend.VNI"},
		{`{` + v4 + `"Backend":{"Type":"vxlan","VNI":4096}}`, "", ""},
		{`{` + v4 + `"Backend":{"Type":"vxlan","VNI":65535}}`, "", ""},
		{`{` + v4 + `"Backend":{"Type":"vxlan","VNI":65536}}`, "", "Backend.VNI"},
		{`{` + v4 + `"Backend":{"Type":"vxlan","VNI":16777215}}`, "", "Backend.VNI"},
		{`{` + v4 + `"Backend":{"Type":"vxlan","Port":8472}}`, "", "Backend.Port"},
		{`{` + v4 + `"Backend":{"Type":"vxlan","Port":4789}}`, "", ""},
		{`{` + v4 + `"Backend":{"Type":"vxlan","DirectRouting":true}}`, "", "Backend.DirectRouting"},
		{`{` + v4 + `"Backend":{"Type":"vxlan","GBP":true}}`, "", "Backend.GBP"},
		{`{` + dual + `"Backend":{"Type":"vxlan"}}`, "", "EnableIPv6"},
		{`{` + v6only + `"Backend":{"Type":"vxlan"}}`, "", "EnableIPv6"},
		{`{` + v4 + `"Backend":{"Type":"host-gw"}}`, "", ""},
		{`{` + dual + `"Backend":{"Type":"host-gw"}}`, "", ""},
		{`{` + v6only + `"Backend":{"Type":"host-gw"}}`, "", ""},
	} {
		cfg, err := subnet.ParseConfig([]byte(c.conf))
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []string{c.linux, c.windows} {
			err := planes[i].caps.Check(cfg)
			var key string
			var ce *subnet.ConfigError
			if errors.As(err, &ce) {
				key = ce.Key
			} else if err != nil {
				key = "not a ConfigError: " + err.Error()
			}
			if key != want {
				t.Errorf("%s on %s: %v; want the key %q refused", c.conf, planes[i].name, err, want)
			}
		}
	}

	// The messages users see name the key, the value and the reason.
	for conf, want := range map[string]string{
		`{` + v4 + `"Backend":{"Type":"vxlan","VNI":1}}`:              "net-conf.json: Backend.VNI=1: Windows needs a VNI from 4096 to 65535 (HNS takes Overlay VSIDs from 4096 and keeps them in 16 bits)",
		`{` + v4 + `"Backend":{"Type":"vxlan","Port":8472}}`:          "net-conf.json: Backend.Port=8472: Windows only carries VXLAN on UDP port 4789",
		`{` + dual + `"Backend":{"Type":"vxlan","VNI":4096}}`:         "net-conf.json: EnableIPv6=true: not available with vxlan on Windows: HNS Overlay networks cannot carry IPv6 between pods (host-gw, an L2Bridge network, can)",
		`{` + v4 + `"Backend":{"Type":"vxlan","DirectRouting":true}}`: "net-conf.json: Backend.DirectRouting=true: not available on Windows: HNS overlay networks always encapsulate",
		`{` + v4 + `"Backend":{"Type":"vxlan","GBP":true}}`:           "net-conf.json: Backend.GBP=true: not available on Windows: flanneld refuses it on Windows too",
	} {
		cfg, err := subnet.ParseConfig([]byte(conf))
		if err != nil {
			t.Fatal(err)
		}
		if err := windows.Capabilities().Check(cfg); err == nil || err.Error() != want {
			t.Errorf("%s on windows:\n got %v\nwant %s", conf, err, want)
		}
	}

	node := backend.Node{Underlay: "eth0", MTU: 1500, Addr: netip.MustParseAddr("192.0.2.10"), PublicIP: netip.MustParseAddr("192.0.2.10"),
		Addr6: netip.MustParseAddr("fd77::10"), PublicIPv6: netip.MustParseAddr("fd77::10")}
	for i, want := range []struct {
		vni               uint32
		port              uint16
		mtu, mtu6, hostgw int
		probes            bool
	}{
		{vni: 1, port: 8472, mtu: 1450, mtu6: 1430, hostgw: 1500, probes: true}, // flannel's Linux defaults, the kernel's port
		{vni: 4096, port: 4789, mtu: 1450, hostgw: 1500, probes: false},         // flanneld's Windows defaults; no IPv6 overlay
	} {
		p := planes[i]
		for _, c := range []struct {
			conf string
			f    backend.Family
			mtu  int
		}{
			{`{` + v4 + `"Backend":{"Type":"vxlan"}}`, backend.IPv4, want.mtu},
			{`{` + dual + `"Backend":{"Type":"vxlan"}}`, backend.IPv6, want.mtu6},
			{`{` + dual + `"Backend":{"Type":"host-gw"}}`, backend.IPv4, want.hostgw},
			{`{` + dual + `"Backend":{"Type":"host-gw"}}`, backend.IPv6, want.hostgw},
		} {
			cfg, err := subnet.ParseConfig([]byte(c.conf))
			if err != nil {
				t.Fatal(err)
			}
			if p.caps.Check(cfg) != nil {
				continue // tested above
			}
			b, err := backend.NewFor(cfg, node, p.caps, c.f)
			if err != nil {
				t.Fatalf("%s: %s %s: %v", p.name, c.conf, c.f, err)
			}
			if b.MTU() != c.mtu {
				t.Errorf("%s: %s %s: MTU %d, want %d", p.name, c.conf, c.f, b.MTU(), c.mtu)
			}
			dev := b.State(netip.Prefix{}, false).Device
			if dev != nil && (dev.VNI != want.vni || p.caps.Port(cfg.Backend) != want.port) {
				t.Errorf("%s: %s: VNI %d port %d, want the defaults %d and %d", p.name, c.conf, dev.VNI, p.caps.Port(cfg.Backend), want.vni, want.port)
			}
		}
		if p.caps.Probes != want.probes {
			t.Errorf("%s: probes %v, want %v", p.name, p.caps.Probes, want.probes)
		}
	}
}
