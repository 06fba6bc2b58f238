package subnet

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseConfigDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, conf   string
		subnetLen    int
		min, max     string
		backend      string
		v6Len        int
		v6Min, v6Max string
	}{
		{name: "a /16 gets /24s, first skipped", conf: `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`,
			subnetLen: 24, min: "10.244.1.0", max: "10.244.255.0", backend: "vxlan"},
		{name: "/22 is the smallest network with /24s", conf: `{"Network":"10.0.0.0/22","Backend":{"Type":"host-gw"}}`,
			subnetLen: 24, min: "10.0.1.0", max: "10.0.3.0", backend: "host-gw"},
		{name: "/23 is split in four", conf: `{"Network":"10.0.0.0/23","Backend":{"Type":"vxlan"}}`,
			subnetLen: 25, min: "10.0.0.128", max: "10.0.1.128", backend: "vxlan"},
		{name: "/28 is the smallest network", conf: `{"Network":"10.0.0.0/28","Backend":{"Type":"vxlan"}}`,
			subnetLen: 30, min: "10.0.0.4", max: "10.0.0.12", backend: "vxlan"},
		{name: "explicit SubnetLen and bounds", conf: `{"Network":"10.0.0.0/8","SubnetLen":20,"SubnetMin":"10.0.0.0","SubnetMax":"10.1.0.0","Backend":{"Type":"vxlan"}}`,
			subnetLen: 20, min: "10.0.0.0", max: "10.1.0.0", backend: "vxlan"},
		{name: "0.0.0.0 bounds mean default", conf: `{"Network":"10.5.0.0/16","SubnetMin":"0.0.0.0","SubnetMax":"","Backend":{"Type":"vxlan"}}`,
			subnetLen: 24, min: "10.5.1.0", max: "10.5.255.0", backend: "vxlan"},
		{name: "dual stack", conf: `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}`,
			subnetLen: 24, min: "10.244.1.0", max: "10.244.255.0", backend: "vxlan",
			v6Len: 64, v6Min: "fd00:10:244:1::", v6Max: "fd00:10:244:ff::"},
		{name: "small IPv6 network", conf: `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00::/120","Backend":{"Type":"vxlan"}}`,
			backend: "vxlan", v6Len: 122, v6Min: "fd00::40", v6Max: "fd00::c0"},
		{name: "huge IPv6 network", conf: `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00::/8","Backend":{"Type":"vxlan"}}`,
			backend: "vxlan", v6Len: 64, v6Min: "fd00:0:0:1::", v6Max: "fdff:ffff:ffff:ffff::"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.conf))
			if err != nil {
				t.Fatal(err)
			}
			if tc.min != "" && (c.SubnetLen != tc.subnetLen || c.SubnetMin.String() != tc.min || c.SubnetMax.String() != tc.max) {
				t.Errorf("IPv4: /%d %s..%s, want /%d %s..%s", c.SubnetLen, c.SubnetMin, c.SubnetMax, tc.subnetLen, tc.min, tc.max)
			}
			if tc.v6Min != "" && (c.IPv6SubnetLen != tc.v6Len || c.IPv6SubnetMin.String() != tc.v6Min || c.IPv6SubnetMax.String() != tc.v6Max) {
				t.Errorf("IPv6: /%d %s..%s, want /%d %s..%s", c.IPv6SubnetLen, c.IPv6SubnetMin, c.IPv6SubnetMax, tc.v6Len, tc.v6Min, tc.v6Max)
			}
			if c.EnableIPv4 != (tc.min != "") || c.EnableIPv6 != (tc.v6Min != "") {
				t.Errorf("families v4=%v v6=%v", c.EnableIPv4, c.EnableIPv6)
			}
			if c.Backend.Type != tc.backend {
				t.Errorf("backend %q, want %q", c.Backend.Type, tc.backend)
			}
		})
	}
}

func TestParseConfigBackend(t *testing.T) {
	c, err := ParseConfig([]byte(`{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789,"MTU":1400,"GBP":true,"DirectRouting":true,"Learning":false,"Name":"vxlan0","MacPrefix":"0E-2A"}}`))
	if err != nil {
		t.Fatal(err)
	}
	b := c.Backend
	if vni(b) != 4096 || b.Port != 4789 || b.MTU != 1400 || !b.GBP || !b.DirectRouting || b.Learning || b.Name != "vxlan0" || b.MacPrefix != "0E-2A" {
		t.Errorf("backend %+v", b)
	}
	d, err := ParseConfig([]byte(`{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if vni(d.Backend) != -1 || d.Backend.Port != 0 {
		t.Errorf("defaults: VNI %d port %d; want none given (the data plane's defaults)", vni(d.Backend), d.Backend.Port)
	}
	z, err := ParseConfig([]byte(`{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","VNI":0}}`))
	if err != nil {
		t.Fatal(err)
	}
	if vni(z.Backend) != 0 {
		t.Errorf("explicit VNI 0 became %d", vni(z.Backend))
	}
}

// vni is the configured VNI, -1 for none.
func vni(b BackendConfig) int64 {
	if b.VNI == nil {
		return -1
	}
	return int64(*b.VNI)
}

// TestParseConfigErrors checks that each bad config is refused with the key named.
func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		conf, key, value string
	}{
		{`{}`, "Network", ""},
		{`{"Network":"10.0.0.0/33"}`, "Network", "10.0.0.0/33"},
		{`{"Network":"10.0.0.1/16"}`, "Network", "10.0.0.1/16"},
		{`{"Network":"fd00::/16"}`, "Network", "fd00::/16"},
		{`{"Network":"10.0.0.0/29"}`, "Network", "10.0.0.0/29"},
		{`{"Network":16}`, "Network", ""},
		{`{"Network":"10.0.0.0/16","SubnetLen":31}`, "SubnetLen", "31"},
		{`{"Network":"10.0.0.0/16","SubnetLen":16}`, "SubnetLen", "16"},
		{`{"Network":"10.0.0.0/16","SubnetLen":8}`, "SubnetLen", "8"},
		{`{"Network":"10.0.0.0/16","SubnetLen":17}`, "SubnetLen", "17"},
		{`{"Network":"10.0.0.0/16","SubnetLen":"24"}`, "SubnetLen", ""},
		{`{"Network":"10.0.0.0/16","SubnetMin":"10.0.1.5"}`, "SubnetMin", "10.0.1.5"},
		{`{"Network":"10.0.0.0/16","SubnetMax":"10.0.2.128"}`, "SubnetMax", "10.0.2.128"},
		{`{"Network":"10.0.0.0/16","SubnetMin":"10.1.0.0"}`, "SubnetMin", "10.1.0.0"},
		{`{"Network":"10.0.0.0/16","SubnetMin":"10.0.5.0","SubnetMax":"10.0.4.0"}`, "SubnetMax", "10.0.4.0"},
		{`{"Network":"10.0.0.0/16","SubnetMin":"fd00::"}`, "SubnetMin", "fd00::"},
		{`{"Network":"10.0.0.0/16","SubnetMin":"ten"}`, "SubnetMin", "ten"},
		{`{"EnableIPv4":false}`, "EnableIPv4", "false"},
		{`{"EnableIPv4":false,"EnableIPv6":true}`, "IPv6Network", ""},
		{`{"EnableIPv6":true,"Network":"10.0.0.0/16","IPv6Network":"10.1.0.0/16"}`, "IPv6Network", "10.1.0.0/16"},
		{`{"EnableIPv6":true,"Network":"10.0.0.0/16","IPv6Network":"fd00::/125"}`, "IPv6Network", "fd00::/125"},
		{`{"EnableIPv6":true,"Network":"10.0.0.0/16","IPv6Network":"fd00::/56","IPv6SubnetLen":127}`, "IPv6SubnetLen", "127"},
		{`{"EnableIPv6":true,"Network":"10.0.0.0/16","IPv6Network":"fd00::/56","IPv6SubnetMin":"fd00::1"}`, "IPv6SubnetMin", "fd00::1"},
		{`{"EnableIPv6":true,"Network":"10.0.0.0/16","IPv6Network":"fd00::/8","IPv6SubnetLen":120}`, "IPv6SubnetLen", "120"},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":"udp"}}`, "Backend.Type", "udp"},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":"IPIP"}}`, "Backend.Type", "IPIP"},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan-gbp"}}`, "Backend.Type", "vxlan-gbp"},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":1}}`, "Backend.Type", ""},
		{`{"Network":"10.0.0.0/16"}`, "Backend", ""},
		{`{"Network":"10.0.0.0/16","Backend":null}`, "Backend", "null"},
		{`{"Network":"10.0.0.0/16","backend":null}`, "Backend", "null"},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","vni":"1"}}`, "Backend.VNI", ""},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":"host-gw","dnsserverlist":"x"}}`, "Backend.DNSServerList", "x"},
		{`{"Network":"10.0.0.0/16","Backend":{}}`, "Backend.Type", ""},
		{`{"Network":"10.0.0.0/16","Backend":"vxlan"}`, "Backend", ""},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","VNI":16777216}}`, "Backend.VNI", "16777216"},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","VNI":-1}}`, "Backend.VNI", "-1"},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","VNI":1.5}}`, "Backend.VNI", ""},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","Port":65536}}`, "Backend.Port", "65536"},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","MTU":40}}`, "Backend.MTU", "40"},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","MTU":100}}`, "Backend.MTU", "100"},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":"host-gw","DNSServerList":"10.0.0.10,bad"}}`, "Backend.DNSServerList", "10.0.0.10,bad"},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","MacPrefix":"0E2A"}}`, "Backend.MacPrefix", "0E2A"},
	} {
		t.Run(tc.conf, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.conf))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a ConfigError", err)
			}
			if ce.Key != tc.key || ce.Value != tc.value {
				t.Errorf("error names %s=%q, want %s=%q (%v)", ce.Key, ce.Value, tc.key, tc.value, err)
			}
			if !strings.Contains(err.Error(), tc.key) {
				t.Errorf("message %q does not name %s", err, tc.key)
			}
		})
	}
}

func TestParseConfigSyntax(t *testing.T) {
	for _, conf := range []string{``, `{`, `{"Network":"10.0.0.0/16"} {}`, `{"Network":"10.0.0.0/16"}x`, `[]`, `null`} {
		if _, err := ParseConfig([]byte(conf)); err == nil {
			t.Errorf("%q accepted", conf)
		}
	}
}

func TestCompatible(t *testing.T) {
	c, err := ParseConfig([]byte(`{"Network":"10.0.0.0/16","Backend":{"Type":"host-gw"}}`))
	if err != nil {
		t.Fatal(err)
	}
	p := netip.MustParsePrefix
	for sn, want := range map[string]bool{"10.0.5.0/24": true, "10.0.0.0/24": true, "10.1.5.0/24": false, "10.0.5.0/25": false} {
		if got := c.Compatible(p(sn), netip.Prefix{}); got != want {
			t.Errorf("Compatible(%s) = %v", sn, got)
		}
	}
	if c.Compatible(p("10.0.5.0/24"), p("fd00::/64")) {
		t.Error("an IPv6 subnet fits an IPv4-only config")
	}
}
