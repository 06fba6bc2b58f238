package subnet

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// flannelKey is a key of net-conf.json that flanneld v0.28 reads, with a value it takes, and
// what weft makes of it: got reports whether the value reached weft's Config (honoured); nil
// means weft refuses the key's backend type, naming it.
type flannelKey struct {
	typ   string // the Backend.Type whose backend reads the key; "" the top level, "*" every type
	key   string
	value string // JSON
	rest  string // the config's other keys, top level only
	got   func(*Config) bool
}

// conf is the config that sets the key, spelt name, to its value.
func (k flannelKey) conf(name string) string {
	kv := strconv.Quote(name) + ":" + k.value
	switch k.typ {
	case "":
		return "{" + kv + "," + k.rest + "}"
	case "*":
		return `{"Network":"10.244.0.0/16","Backend":{` + kv + `}}`
	}
	return fmt.Sprintf(`{"Network":"10.244.0.0/16","Backend":{"Type":%q,%s}}`, k.typ, kv)
}

// flannelKeys is every key flanneld v0.28.10 reads from net-conf.json: the fields of its
// subnet.Config, the Type every backend is looked up by, and the keys each registered backend
// decodes from the Backend object on Linux or Windows. TestFlannelSource checks the list
// against flannel's source.
func flannelKeys() []flannelKey {
	const v4 = `"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}`
	const v6 = `"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}`
	pfx, addr := netip.MustParsePrefix, netip.MustParseAddr
	ks := []flannelKey{
		{"", "EnableIPv4", `false`, `"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}`,
			func(c *Config) bool { return !c.EnableIPv4 && !c.Network.IsValid() && c.EnableIPv6 }},
		{"", "EnableIPv6", `true`, `"Network":"10.244.0.0/16","IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}`,
			func(c *Config) bool { return c.EnableIPv4 && c.EnableIPv6 && c.IPv6SubnetLen == 64 }},
		{"", "EnableNFTables", `true`, v4, func(c *Config) bool { return c.EnableNFTables }},
		{"", "Network", `"10.12.0.0/16"`, `"Backend":{"Type":"vxlan"}`,
			func(c *Config) bool { return c.Network == pfx("10.12.0.0/16") && c.SubnetLen == 24 }},
		{"", "SubnetLen", `26`, v4, func(c *Config) bool { return c.SubnetLen == 26 }},
		{"", "SubnetMin", `"10.244.5.0"`, v4, func(c *Config) bool { return c.SubnetMin == addr("10.244.5.0") }},
		{"", "SubnetMax", `"10.244.9.0"`, v4, func(c *Config) bool { return c.SubnetMax == addr("10.244.9.0") }},
		{"", "IPv6Network", `"fd00:12::/48"`, `"Network":"10.244.0.0/16","EnableIPv6":true,"Backend":{"Type":"vxlan"}`,
			func(c *Config) bool { return c.IPv6Network == pfx("fd00:12::/48") }},
		{"", "IPv6SubnetLen", `72`, v6, func(c *Config) bool { return c.IPv6SubnetLen == 72 }},
		{"", "IPv6SubnetMin", `"fd00:10:244:5::"`, v6, func(c *Config) bool { return c.IPv6SubnetMin == addr("fd00:10:244:5::") }},
		{"", "IPv6SubnetMax", `"fd00:10:244:9::"`, v6, func(c *Config) bool { return c.IPv6SubnetMax == addr("fd00:10:244:9::") }},
		{"", "Backend", `{"Type":"host-gw"}`, `"Network":"10.244.0.0/16"`,
			func(c *Config) bool { return c.Backend.Type == BackendHostGW }},
		// flanneld looks the type up lower-cased.
		{"*", "Type", `"Host-GW"`, "", func(c *Config) bool { return c.Backend.Type == BackendHostGW }},

		{"vxlan", "VNI", `4096`, "", func(c *Config) bool { return vni(c.Backend) == 4096 }},
		{"vxlan", "Port", `4789`, "", func(c *Config) bool { return c.Backend.Port == 4789 }},
		{"vxlan", "MTU", `1400`, "", func(c *Config) bool { return c.Backend.MTU == 1400 }},
		{"vxlan", "GBP", `true`, "", func(c *Config) bool { return c.Backend.GBP }},
		{"vxlan", "Learning", `true`, "", func(c *Config) bool { return c.Backend.Learning }},
		{"vxlan", "DirectRouting", `true`, "", func(c *Config) bool { return c.Backend.DirectRouting }},
		{"vxlan", "MacPrefix", `"0E-2B"`, "", func(c *Config) bool { return c.Backend.MacPrefix == "0E-2B" }},
		{"vxlan", "Name", `"vxlan0"`, "", func(c *Config) bool { return c.Backend.Name == "vxlan0" }},
		{"host-gw", "Name", `"cbr1"`, "", func(c *Config) bool { return c.Backend.Name == "cbr1" }},
		{"wireguard", "ListenPort", `51900`, "", func(c *Config) bool { return c.Backend.ListenPort == 51900 && c.Backend.ListenPortV6 == 51821 }},
		{"wireguard", "ListenPortV6", `51901`, "", func(c *Config) bool { return c.Backend.ListenPortV6 == 51901 && c.Backend.ListenPort == 51820 }},
		{"wireguard", "MTU", `1420`, "", func(c *Config) bool { return c.Backend.MTU == 1420 }},
		{"wireguard", "PSK", `"` + testPSK + `"`, "", func(c *Config) bool { return c.Backend.PSK == testPSK }},
		{"wireguard", "PersistentKeepaliveInterval", `25`, "", func(c *Config) bool { return c.Backend.PersistentKeepalive == 25*time.Second }},
		{"wireguard", "Mode", `"auto"`, "", func(c *Config) bool { return c.Backend.Mode == WGAuto }},
		{"host-gw", "DNSServerList", `"10.96.0.10,10.96.0.11"`, "",
			func(c *Config) bool { return c.Backend.DNSServerList == "10.96.0.10,10.96.0.11" }},
	}
	// The backends weft does not have, with the keys flanneld's read: refused by type.
	for typ, keys := range map[string]map[string]string{
		"udp":         {"Port": `8285`},
		"ipip":        {"DirectRouting": `true`},
		"ipsec":       {"UDPEncap": `true`, "ESPProposal": `"aes128gcm16-prfsha256-ecp256"`, "PSK": `"a very long secret for ipsec"`},
		"extension":   {"PreStartupCommand": `"true"`, "PostStartupCommand": `"true"`, "SubnetAddCommand": `"true"`, "SubnetRemoveCommand": `"true"`},
		"tencent-vpc": {"AccessKeyID": `"id"`, "AccessKeySecret": `"secret"`},
		"alloc":       nil,
	} {
		if len(keys) == 0 {
			ks = append(ks, flannelKey{typ: typ}) // refused by its type alone
		}
		for key, value := range keys {
			ks = append(ks, flannelKey{typ: typ, key: key, value: value})
		}
	}
	return ks
}

// TestFlannelKeys: every key flanneld reads is honoured, its value reaching weft's Config
// however its name is cased (flanneld's encoding/json matches names case-insensitively), or
// refused with an error naming the backend type weft does not have.
func TestFlannelKeys(t *testing.T) {
	for _, k := range flannelKeys() {
		if k.key == "" {
			k.key, k.value = "Type", strconv.Quote(k.typ)
		}
		names := []string{k.key, strings.ToLower(k.key), strings.ToUpper(k.key)}
		for _, name := range names {
			t.Run(k.typ+"/"+name, func(t *testing.T) {
				conf := k.conf(name)
				c, err := ParseConfig([]byte(conf))
				if k.got == nil {
					var ce *ConfigError
					if !errors.As(err, &ce) || ce.Key != "Backend.Type" || ce.Value != k.typ {
						t.Fatalf("%s: %v, want the backend type %q refused", conf, err, k.typ)
					}
					if want := "Backend.Type=" + k.typ + ": "; !strings.Contains(err.Error(), want) || len(ce.Reason) < 20 {
						t.Errorf("%s: %q does not say %q and why", conf, err, want)
					}
					return
				}
				if err != nil {
					t.Fatalf("%s: %v", conf, err)
				}
				if len(c.Ignored) > 0 {
					t.Errorf("%s: keys ignored: %v", conf, c.Ignored)
				}
				if !k.got(c) {
					t.Errorf("%s: the value did not reach the config: %+v", conf, c)
				}
			})
		}
	}
}

// testPSK is a preshared key as wg genpsk writes it.
const testPSK = "FpCyhws9cxwWoV4xELtfJvjJN+zQVRPISllRWgeopVE="

// TestWireGuardConfig: a wireguard config without options gets flanneld's defaults; values
// flanneld would take but that leave the peers unable to reach the node, or that it stops on,
// are refused by key.
func TestWireGuardConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"Network":"10.42.0.0/16","Backend":{"Type":"WireGuard"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := BackendConfig{Type: BackendWireGuard, Mode: WGSeparate, ListenPort: 51820, ListenPortV6: 51821}
	if c.Backend.Type != want.Type || c.Backend.Mode != want.Mode || c.Backend.ListenPort != want.ListenPort ||
		c.Backend.ListenPortV6 != want.ListenPortV6 || c.Backend.PSK != "" || c.Backend.PersistentKeepalive != 0 {
		t.Errorf("defaults: %+v, want %+v", c.Backend, want)
	}
	for _, tc := range []struct{ backend, key, value string }{
		{`"Mode":"Auto"`, "Backend.Mode", "Auto"},
		{`"Mode":"both"`, "Backend.Mode", "both"},
		{`"ListenPort":0`, "Backend.ListenPort", "0"},
		{`"ListenPortV6":65536`, "Backend.ListenPortV6", "65536"},
		{`"PSK":"c2VjcmV0"`, "Backend.PSK", ""},
		{`"PersistentKeepaliveInterval":-1`, "Backend.PersistentKeepaliveInterval", "-1"},
		{`"MTU":100`, "Backend.MTU", "100"},
	} {
		conf := `{"Network":"10.42.0.0/16","Backend":{"Type":"wireguard",` + tc.backend + `}}`
		_, err := ParseConfig([]byte(conf))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != tc.key || ce.Value != tc.value {
			t.Errorf("%s: %v, want %s=%s refused", conf, err, tc.key, tc.value)
		}
	}
}

// TestParseConfigIgnored: keys flanneld does not read, whatever their values, are ignored as
// flanneld ignores them and listed; those of another backend type among them.
func TestParseConfigIgnored(t *testing.T) {
	for _, tc := range []struct {
		conf    string
		ignored []string
	}{
		{`{"Network":"10.0.0.0/16","Netwrok":"10.1.0.0/16","Backend":{"Type":"vxlan"}}`, []string{"Netwrok"}},
		// flanneld v0.28 reads one network a family: Networks is no key of it.
		{`{"Network":"10.0.0.0/16","Networks":["10.1.0.0/16"],"IPv6Networks":null,"Backend":{"Type":"vxlan"}}`, []string{"IPv6Networks", "Networks"}},
		// flanneld's subnet.Config has a BackendType field that JSON never sets.
		{`{"Network":"10.0.0.0/16","BackendType":"udp","Backend":{"Type":"vxlan"}}`, []string{"BackendType"}},
		{`{"Network":"10.0.0.0/16","":1,"Backend":{"Type":"host-gw","VNI":"one","Port":[],"Foo":{}}}`, []string{"", "Backend.Foo", "Backend.Port", "Backend.VNI"}},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","DNSServerList":"10.0.0.10","PSK":"x"}}`, []string{"Backend.DNSServerList", "Backend.PSK"}},
		{`{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","Vni":1,"VNI":2}}`, nil},
	} {
		c, err := ParseConfig([]byte(tc.conf))
		if err != nil {
			t.Errorf("%s: %v", tc.conf, err)
			continue
		}
		if !slices.Equal(c.Ignored, tc.ignored) {
			t.Errorf("%s: ignored %q, want %q", tc.conf, c.Ignored, tc.ignored)
		}
	}
	// Of two spellings of one key the last wins, as in flanneld's encoding/json.
	c := mustConfig(t, `{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","Vni":1,"VNI":2,"vni":3}}`)
	if vni(c.Backend) != 3 {
		t.Errorf("VNI %d, want the last one's, 3", vni(c.Backend))
	}
}
