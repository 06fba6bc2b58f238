package cni

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows/hnsfile"
)

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(`{"cniVersion":"1.1.0","name":"cbr0","type":"weft","subnetFile":"","prevResult":null,"args":{"x":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.SubnetFile != DefaultSubnetFile || c.DataDir != DefaultDataDir || c.Name != "cbr0" || c.CNIVersion != "1.1.0" ||
		c.Delegate != nil || c.IPAM != nil || c.RuntimeConfig != nil || c.PrevResult != nil {
		t.Errorf("ParseConfig = %+v; want flannel's defaults and nothing else", c)
	}
	c, err = ParseConfig([]byte(`{"name":"n","subnetFile":"/a/subnet.env","dataDir":"/b","prevResult":{"cniVersion":"1.0.0"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.SubnetFile != "/a/subnet.env" || c.DataDir != "/b" || string(c.PrevResult) != `{"cniVersion":"1.0.0"}` {
		t.Errorf("ParseConfig = %+v", c)
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		conf string
		code uint
		want string // in the message
	}{
		{`{`, types.ErrDecodingFailure, "not a JSON object"},
		{`null`, types.ErrDecodingFailure, "not a JSON object"},
		{`[1]`, types.ErrDecodingFailure, "not a JSON object"},
		{`{"type":"weft"}`, types.ErrInvalidNetworkConfig, "name: missing"},
		{`{"name":""}`, types.ErrInvalidNetworkConfig, "name: missing"},
		{`{"name":7}`, types.ErrInvalidNetworkConfig, "name: want a string, got 7"},
		{`{"name":"n","subnetFile":true}`, types.ErrInvalidNetworkConfig, "subnetFile: want a string"},
		{`{"name":"n","dataDir":{}}`, types.ErrInvalidNetworkConfig, "dataDir: want a string"},
		{`{"name":"n","cniVersion":1}`, types.ErrInvalidNetworkConfig, "cniVersion: want a string"},
		{`{"name":"n","delegate":"bridge"}`, types.ErrInvalidNetworkConfig, `delegate: want an object, got "bridge"`},
		{`{"name":"n","delegate":{"type":5}}`, types.ErrInvalidNetworkConfig, "delegate.type: want a string, got 5"},
		{`{"name":"n","delegate":{"type":""}}`, types.ErrInvalidNetworkConfig, "delegate.type: empty"},
		{`{"name":"n","delegate":{"type":null}}`, types.ErrInvalidNetworkConfig, "delegate.type: empty"},
		{`{"name":"n","delegate":{"name":"x"}}`, types.ErrInvalidNetworkConfig, "delegate.name: must not be set"},
		{`{"name":"n","delegate":{"ipam":{}}}`, types.ErrInvalidNetworkConfig, "delegate.ipam: must not be set"},
		{`{"name":"n","ipam":[]}`, types.ErrInvalidNetworkConfig, "ipam: want an object"},
		{`{"name":"n","ipam":{"type":1}}`, types.ErrInvalidNetworkConfig, "ipam.type: want a string"},
		{`{"name":"n","ipam":{"type":""}}`, types.ErrInvalidNetworkConfig, "ipam.type: empty"},
		{`{"name":"n","ipam":{"routes":{}}}`, types.ErrInvalidNetworkConfig, "ipam.routes: want a list"},
		{`{"name":"n","ipam":{"routes":[{"gw":"10.0.0.1"}]}}`, types.ErrInvalidNetworkConfig, "ipam.routes[0]: want an object with a dst"},
		{`{"name":"n","ipam":{"routes":[{"dst":"0.0.0.0/0"},null]}}`, types.ErrInvalidNetworkConfig, "ipam.routes[1]"},
		{`{"name":"n","ipam":{"routes":[{"dst":"10.0.0.0"}]}}`, types.ErrInvalidNetworkConfig, "ipam.routes[0].dst"},
		{`{"name":"n","runtimeConfig":"x"}`, types.ErrInvalidNetworkConfig, "runtimeConfig: want an object"},
	} {
		_, err := ParseConfig([]byte(tc.conf))
		ce := ToCNI(err)
		if ce == nil || ce.Code != tc.code || !strings.Contains(ce.Msg, tc.want) {
			t.Errorf("ParseConfig(%s) = %#v; want code %d and %q", tc.conf, ce, tc.code, tc.want)
		}
	}
}

// FuzzParseConfig: ParseConfig never panics, and every configuration it accepts makes a
// delegate on both systems: a JSON object named after the network, with a plugin type and
// an IPAM object of some type. A configuration that fails only in the delegate would fail
// every pod on the node, with a less clear error.
func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{
		`{"cniVersion":"0.3.1","name":"cbr0","type":"weft","delegate":{"hairpinMode":true,"isDefaultGateway":true}}`,
		`{"name":"n","ipam":{"type":"host-local","routes":[{"dst":"0.0.0.0/0"}],"dataDir":"/x"},"runtimeConfig":{"a":[1]}}`,
		`{"name":"n","delegate":{"type":"win-overlay","policies":[]},"capabilities":{"dns":true}}`,
		`{"name":"n","delegate":{"type":null}}`,
		`{"name":"n","delegate":{"isGateway":null,"mtu":"x"},"ipam":null,"prevResult":{"ips":[]}}`,
		`{"name":"\u0000","subnetFile":"","dataDir":""}`,
		`{"name":"n","name":"m","delegate":{},"delegate":{"type":"x"}}`,
		`{"name":"n","ipam":{"routes":[{"dst":"::/0","gw":"fe80::1"}]}}`,
		`[]`, `null`, `"x"`, `{"name":1e400}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		conf, err := ParseConfig(data)
		if err != nil {
			if ToCNI(err).Code == types.ErrInternal {
				t.Fatalf("ParseConfig(%q): error without a CNI code: %v", data, err)
			}
			return
		}
		if conf.Name == "" || conf.SubnetFile == "" || conf.DataDir == "" {
			t.Fatalf("ParseConfig(%q) = %+v: empty name, subnetFile or dataDir", data, conf)
		}
		for _, goos := range []OS{Linux, Windows} {
			for _, ev := range []subnet.Env{env(true), dualEnv(), v6Env()} {
				d, err := BuildDelegate(goos, conf, ev, hnsfile.Network{})
				if err != nil {
					t.Fatalf("%s: ParseConfig accepted %q, but BuildDelegate fails: %v", goos, data, err)
				}
				var out struct {
					Name string
					Type string
					IPAM struct {
						Type string
					}
				}
				if err := json.Unmarshal(d.Config, &out); err != nil {
					t.Fatalf("%s: delegate config of %q: %v: %s", goos, data, err, d.Config)
				}
				if out.Name != conf.Name || out.Type == "" || out.Type != d.Type || out.IPAM.Type == "" {
					t.Fatalf("%s: delegate config of %q: %s; want name %q, a type, an ipam type", goos, data, d.Config, conf.Name)
				}
			}
		}
	})
}
