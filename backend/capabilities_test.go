package backend

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/weftnet/weft/subnet"
)

// fullCaps are a data plane that carries all either backend can do, with flannel's Linux
// defaults.
func fullCaps() Capabilities {
	return Capabilities{
		OS: "Testix",
		VXLAN: VXLANCapabilities{DefaultVNI: 1, MinVNI: 0, MaxVNI: subnet.MaxVNI, DefaultPort: 8472,
			IPv6: Feature{Has: true}, DirectRouting: Feature{Has: true}, GBP: Feature{Has: true},
			Overhead: VXLANOverhead, Overhead6: VXLAN6Overhead},
		HostGW: HostGWCapabilities{IPv6: Feature{Has: true}},
		Probes: true,
	}
}

func parse(t *testing.T, conf string) *subnet.Config {
	t.Helper()
	cfg, err := subnet.ParseConfig([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestCheckEachCapability: for each capability, a plane that has it accepts the config that
// asks for it, and one that lacks it refuses that config with the key, the value and the
// plane's reason; a lack in one backend does not touch the other.
func TestCheckEachCapability(t *testing.T) {
	const (
		v4     = `"Network":"10.244.0.0/16",`
		dual   = `"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10::/56",`
		v6only = `"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10::/56",`
	)
	for _, c := range []struct {
		name string
		conf string
		lack func(*Capabilities)
		want string // the error of the plane that lacks it
	}{
		{"VNI below the range", `{` + v4 + `"Backend":{"Type":"vxlan","VNI":4095}}`,
			func(c *Capabilities) { c.VXLAN.MinVNI, c.VXLAN.VNIWhy = 4096, "its switch says so" },
			"net-conf.json: Backend.VNI=4095: Testix needs a VNI from 4096 to 16777215 (its switch says so)"},
		{"VNI above the range", `{` + v4 + `"Backend":{"Type":"vxlan","VNI":65536}}`,
			func(c *Capabilities) { c.VXLAN.MaxVNI = 65535 },
			"net-conf.json: Backend.VNI=65536: Testix needs a VNI from 0 to 65535"},
		{"default VNI outside the range", `{` + v4 + `"Backend":{"Type":"vxlan"}}`,
			func(c *Capabilities) { c.VXLAN.MinVNI = 2 },
			"net-conf.json: Backend.VNI=1: Testix needs a VNI from 2 to 16777215"},
		{"a port other than the only one", `{` + v4 + `"Backend":{"Type":"vxlan","Port":8472}}`,
			func(c *Capabilities) { c.VXLAN.DefaultPort, c.VXLAN.OnlyPort = 4789, true },
			"net-conf.json: Backend.Port=8472: Testix only carries VXLAN on UDP port 4789"},
		{"IPv6 over vxlan, dual-stack", `{` + dual + `"Backend":{"Type":"vxlan"}}`,
			func(c *Capabilities) { c.VXLAN.IPv6 = Feature{Why: "its tunnels are IPv4's"} },
			"net-conf.json: EnableIPv6=true: not available with vxlan on Testix: its tunnels are IPv4's"},
		{"IPv6 over vxlan, IPv6 only", `{` + v6only + `"Backend":{"Type":"vxlan"}}`,
			func(c *Capabilities) { c.VXLAN.IPv6 = Feature{} },
			"net-conf.json: EnableIPv6=true: not available with vxlan on Testix"},
		{"IPv6 over host-gw", `{` + dual + `"Backend":{"Type":"host-gw"}}`,
			func(c *Capabilities) { c.HostGW.IPv6 = Feature{Why: "no IPv6 routes"} },
			"net-conf.json: EnableIPv6=true: not available with host-gw on Testix: no IPv6 routes"},
		{"DirectRouting", `{` + v4 + `"Backend":{"Type":"vxlan","DirectRouting":true}}`,
			func(c *Capabilities) { c.VXLAN.DirectRouting = Feature{Why: "it always encapsulates"} },
			"net-conf.json: Backend.DirectRouting=true: not available on Testix: it always encapsulates"},
		{"GBP", `{` + v4 + `"Backend":{"Type":"vxlan","GBP":true}}`,
			func(c *Capabilities) { c.VXLAN.GBP = Feature{} },
			"net-conf.json: Backend.GBP=true: not available on Testix"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := parse(t, c.conf)
			if err := fullCaps().Check(cfg); err != nil {
				t.Errorf("refused by a plane that has it all: %v", err)
			}
			lacking := fullCaps()
			c.lack(&lacking)
			err := lacking.Check(cfg)
			var ce *subnet.ConfigError
			if !errors.As(err, &ce) || err.Error() != c.want {
				t.Errorf("refused with %v\nwant          %s", err, c.want)
			}
		})
	}

	// What the vxlan backend lacks does not refuse host-gw, and the reverse.
	noVXLAN := fullCaps()
	noVXLAN.VXLAN = VXLANCapabilities{DefaultVNI: 7, MinVNI: 1, MaxVNI: 2, OnlyPort: true, DefaultPort: 4789}
	if err := noVXLAN.Check(parse(t, `{`+dual+`"Backend":{"Type":"host-gw"}}`)); err != nil {
		t.Errorf("host-gw refused for what vxlan lacks: %v", err)
	}
	noHostGW6 := fullCaps()
	noHostGW6.HostGW.IPv6 = Feature{}
	if err := noHostGW6.Check(parse(t, `{`+dual+`"Backend":{"Type":"vxlan","Port":4789}}`)); err != nil {
		t.Errorf("vxlan refused for what host-gw lacks: %v", err)
	}
	// The only port is also the one a config without a port gets.
	only := fullCaps()
	only.VXLAN.DefaultPort, only.VXLAN.OnlyPort = 4789, true
	for _, port := range []string{``, `,"Port":0`, `,"Port":4789`} {
		if err := only.Check(parse(t, `{`+v4+`"Backend":{"Type":"vxlan"`+port+`}}`)); err != nil {
			t.Errorf("port %q refused by a plane whose only port is 4789: %v", port, err)
		}
	}
}

// TestBackendTakesCapabilities: the device gets the plane's default VNI unless the config
// names one; the pods' MTU is the underlay's less the plane's overhead for the family, none
// for host-gw; Port says what a config without a port gets.
func TestBackendTakesCapabilities(t *testing.T) {
	caps := fullCaps()
	caps.VXLAN.DefaultVNI, caps.VXLAN.DefaultPort = 77, 4242
	caps.VXLAN.Overhead, caps.VXLAN.Overhead6 = 60, 90
	node := Node{Underlay: "eth0", MTU: 1500, Addr: netip.MustParseAddr("192.0.2.10"), PublicIP: netip.MustParseAddr("192.0.2.10"),
		Addr6: netip.MustParseAddr("fd77::10"), PublicIPv6: netip.MustParseAddr("fd77::10")}
	dual := `"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10::/56"`
	for _, c := range []struct {
		conf          string
		f             Family
		vni           uint32 // 0: no device
		port          uint16 // caps.Port
		mtu, overhead int
	}{
		{`{` + dual + `,"Backend":{"Type":"vxlan"}}`, IPv4, 77, 4242, 1440, 60},
		{`{` + dual + `,"Backend":{"Type":"vxlan"}}`, IPv6, 77, 4242, 1410, 90},
		{`{` + dual + `,"Backend":{"Type":"vxlan","VNI":5,"Port":9999,"MTU":1400}}`, IPv4, 5, 9999, 1340, 60},
		{`{` + dual + `,"Backend":{"Type":"host-gw"}}`, IPv4, 0, 0, 1500, 0},
		{`{` + dual + `,"Backend":{"Type":"host-gw"}}`, IPv6, 0, 0, 1500, 0},
	} {
		cfg := parse(t, c.conf)
		b, err := NewFor(cfg, node, caps, c.f)
		if err != nil {
			t.Fatalf("%s %s: %v", c.conf, c.f, err)
		}
		st := b.State(netip.Prefix{}, false)
		vni := uint32(0)
		if st.Device != nil {
			vni = st.Device.VNI
		}
		port := uint16(0)
		if cfg.Backend.Type == subnet.BackendVXLAN {
			port = caps.Port(cfg.Backend)
		}
		if vni != c.vni || port != c.port || b.MTU() != c.mtu || b.Overhead() != c.overhead {
			t.Errorf("%s %s: VNI %d port %d MTU %d overhead %d; want %d %d %d %d", c.conf, c.f, vni, port, b.MTU(), b.Overhead(), c.vni, c.port, c.mtu, c.overhead)
		}
		if vni == 0 {
			continue
		}
		a := b.Attrs(MAC{0x0e, 1})
		data := a.BackendData
		if c.f == IPv6 {
			data = a.BackendV6Data
		}
		if d, err := DecodeVXLANData(data); err != nil || d.VNI != vni {
			t.Errorf("%s %s: the lease publishes %s (%v), want VNI %d", c.conf, c.f, data, err, vni)
		}
	}
}
