package cni

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows/hnsfile"
)

// env is a subnet.env as weftd writes it for 10.244.1.0/24 of 10.244.0.0/16.
func env(ipMasq bool) subnet.Env {
	return subnet.NewEnv(netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.244.1.0/24"),
		netip.Prefix{}, netip.Prefix{}, 1450, ipMasq)
}

func dualEnv() subnet.Env {
	return subnet.NewEnv(netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.244.1.0/24"),
		netip.MustParsePrefix("fd00:10:244::/56"), netip.MustParsePrefix("fd00:10:244:1::/64"), 1450, true)
}

func v6Env() subnet.Env {
	return subnet.NewEnv(netip.Prefix{}, netip.Prefix{},
		netip.MustParsePrefix("fd00:10:244::/56"), netip.MustParsePrefix("fd00:10:244:1::/64"), 1400, false)
}

// sameJSON compares two JSON documents by value.
func sameJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("result is not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want JSON: %v: %s", err, want)
	}
	if !reflect.DeepEqual(g, w) {
		gs, _ := json.Marshal(g) // sorted keys, for a readable comparison
		ws, _ := json.Marshal(w)
		t.Errorf("delegate config:\n got %s\nwant %s", gs, ws)
	}
}

// TestFlannelCompatLinux: flannel configurations with only their type changed give the
// delegate flannel's plugin (flannel-io/cni-plugin, flannel_linux.go) builds: every want below
// is what it would write to dataDir/<container ID> for the same input.
func TestFlannelCompatLinux(t *testing.T) {
	for _, tc := range []struct {
		name string
		conf string
		env  subnet.Env
		want string
	}{{
		// kube-flannel.yml's conflist entry, as libcni hands it over.
		name: "kube-flannel",
		conf: `{"cniVersion":"0.3.1","name":"cbr0","type":"weft","delegate":{"hairpinMode":true,"isDefaultGateway":true}}`,
		env:  env(true),
		want: `{"cniVersion":"0.3.1","name":"cbr0","type":"bridge","hairpinMode":true,"isDefaultGateway":true,
			"ipMasq":false,"mtu":1450,"isGateway":true,
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.1.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}]}}`,
	}, {
		// No cniVersion: none is given to the delegate. No --ip-masq on weftd: the bridge
		// masquerades.
		name: "minimal",
		conf: `{"name":"n","type":"weft"}`,
		env:  env(false),
		want: `{"name":"n","type":"bridge","ipMasq":true,"mtu":1450,"isGateway":true,
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.1.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}]}}`,
	}, {
		// The top-level ipam is the base: its keys stay, its routes come first.
		name: "ipam and dual stack",
		conf: `{"cniVersion":"1.0.0","name":"n","type":"weft","subnetFile":"/x/subnet.env","dataDir":"/x/data",
			"ipam":{"dataDir":"/x/ipam","routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.244.1.1"}]},
			"delegate":{"bridge":"cni1","isDefaultGateway":true}}`,
		env: dualEnv(),
		want: `{"cniVersion":"1.0.0","name":"n","type":"bridge","bridge":"cni1","isDefaultGateway":true,
			"ipMasq":false,"mtu":1450,"isGateway":true,
			"ipam":{"type":"host-local","dataDir":"/x/ipam",
				"ranges":[[{"subnet":"10.244.1.0/24"}],[{"subnet":"fd00:10:244:1::/64"}]],
				"routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.244.1.1"},
					{"dst":"10.244.0.0/16"},{"dst":"fd00:10:244::/56"}]}}`,
	}, {
		// Keys the delegate sets win; isGateway is only a bridge's; a cniVersion in the
		// delegate gives way to the configuration's.
		name: "other delegate",
		conf: `{"cniVersion":"1.0.0","name":"n","type":"weft",
			"delegate":{"type":"ipvlan","master":"eth0","mtu":1400,"ipMasq":true,"cniVersion":"0.3.1"}}`,
		env: env(true),
		want: `{"cniVersion":"1.0.0","name":"n","type":"ipvlan","master":"eth0","mtu":1400,"ipMasq":true,
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.1.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}]}}`,
	}, {
		// A key present as null counts as set, as in flannel.
		name: "null keys",
		conf: `{"name":"n","type":"weft","delegate":{"isGateway":null,"ipMasq":null},"ipam":{"type":"static"}}`,
		env:  env(true),
		want: `{"name":"n","type":"bridge","isGateway":null,"ipMasq":null,"mtu":1450,
			"ipam":{"type":"static","ranges":[[{"subnet":"10.244.1.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}]}}`,
	}, {
		// The runtime's runtimeConfig replaces the delegate's; capabilities stay with the
		// runtime, which filled runtimeConfig from them.
		name: "runtimeConfig",
		conf: `{"cniVersion":"1.0.0","name":"n","type":"weft","capabilities":{"portMappings":true},
			"runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]},
			"delegate":{"runtimeConfig":{"old":1}}}`,
		env: env(true),
		want: `{"cniVersion":"1.0.0","name":"n","type":"bridge","ipMasq":false,"mtu":1450,"isGateway":true,
			"runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]},
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.1.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}]}}`,
	}, {
		name: "IPv6 only",
		conf: `{"cniVersion":"1.0.0","name":"n","type":"weft"}`,
		env:  v6Env(),
		want: `{"cniVersion":"1.0.0","name":"n","type":"bridge","ipMasq":true,"mtu":1400,"isGateway":true,
			"ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:10:244:1::/64"}]],"routes":[{"dst":"fd00:10:244::/56"}]}}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			conf, err := ParseConfig([]byte(tc.conf))
			if err != nil {
				t.Fatal(err)
			}
			d, err := BuildDelegate(Linux, conf, tc.env, hnsfile.Network{})
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, d.Config, tc.want)
			var typ struct{ Type string }
			_ = json.Unmarshal(d.Config, &typ)
			if d.Type != typ.Type {
				t.Errorf("Delegate.Type %q, config type %q", d.Type, typ.Type)
			}
		})
	}
}

// TestDelegateWindows: without weftd's files the delegate is flannel's (flannel_windows.go)
// but for win-bridge's host endpoint (.2), which weft keeps out of the pods' addresses; with
// them weft names the HNS network, picks the plugin for its type, and keeps the source VIP
// out too.
func TestDelegateWindows(t *testing.T) {
	for _, tc := range []struct {
		name string
		conf string
		env  subnet.Env
		hns  hnsfile.Network
		want string
	}{{
		// sig-windows-tools' flannel configuration for vxlan.
		name: "flannel overlay",
		conf: `{"cniVersion":"0.2.0","name":"flannel.4096","type":"weft","capabilities":{"portMappings":true,"dns":true},
			"runtimeConfig":{"portMappings":[]},
			"delegate":{"type":"win-overlay","policies":[{"Name":"EndpointPolicy","Value":{"Type":"OutBoundNAT"}}]}}`,
		env: env(true),
		want: `{"cniVersion":"0.2.0","name":"flannel.4096","type":"win-overlay",
			"policies":[{"Name":"EndpointPolicy","Value":{"Type":"OutBoundNAT"}}],
			"ipMasq":true,"ipMasqNetwork":"10.244.0.0/16","runtimeConfig":{"portMappings":[]},
			"ipam":{"type":"host-local","subnet":"10.244.1.0/24"}}`,
	}, {
		// flannel forces ipMasq and ignores the top-level ipam on Windows; no cniVersion
		// means 0.2.0.
		name: "flannel forced keys",
		conf: `{"name":"vxlan0","type":"weft","ipam":{"type":"static"},"delegate":{"type":"win-overlay","ipMasq":true}}`,
		env:  env(false),
		want: `{"cniVersion":"0.2.0","name":"vxlan0","type":"win-overlay","ipMasq":false,"ipMasqNetwork":"10.244.0.0/16",
			"ipam":{"type":"host-local","subnet":"10.244.1.0/24"}}`,
	}, {
		name: "default win-bridge keeps .2 free",
		conf: `{"cniVersion":"1.0.0","name":"cbr0","type":"weft"}`,
		env:  env(true),
		want: `{"cniVersion":"1.0.0","name":"cbr0","type":"win-bridge","ipMasq":true,"ipMasqNetwork":"10.244.0.0/16",
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.1.0/24","rangeStart":"10.244.1.3"}]]}}`,
	}, {
		// weftd's source VIP file alone: the network is an overlay, named as configured.
		name: "overlay from the source VIP",
		conf: `{"cniVersion":"1.0.0","name":"flannel.4096","type":"weft"}`,
		env:  env(false),
		hns:  hnsfile.Network{SourceVIP: netip.MustParseAddr("10.244.1.254")},
		want: `{"cniVersion":"1.0.0","name":"flannel.4096","type":"win-overlay","ipMasq":false,"ipMasqNetwork":"10.244.0.0/16",
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.1.0/24","rangeStart":"10.244.1.2","rangeEnd":"10.244.1.253"}]]}}`,
	}, {
		name: "overlay from hnsfile.NetworkFile",
		conf: `{"cniVersion":"1.0.0","name":"weft","type":"weft"}`,
		env:  env(true),
		hns:  hnsfile.Network{Name: "flannel.4096", Type: "Overlay", SourceVIP: netip.MustParseAddr("10.244.1.254")},
		want: `{"cniVersion":"1.0.0","name":"flannel.4096","type":"win-overlay","ipMasq":true,"ipMasqNetwork":"10.244.0.0/16",
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.1.0/24","rangeStart":"10.244.1.2","rangeEnd":"10.244.1.253"}]]}}`,
	}, {
		name: "l2bridge from hnsfile.NetworkFile",
		conf: `{"cniVersion":"1.0.0","name":"weft","type":"weft"}`,
		env:  env(true),
		hns:  hnsfile.Network{Name: "cbr0", Type: "l2bridge"},
		want: `{"cniVersion":"1.0.0","name":"cbr0","type":"win-bridge","ipMasq":true,"ipMasqNetwork":"10.244.0.0/16",
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.1.0/24","rangeStart":"10.244.1.3"}]]}}`,
	}, {
		// The configuration's delegate type wins over the HNS type (sdnoverlay and the like).
		name: "configured type and a VIP inside the range",
		conf: `{"cniVersion":"1.0.0","name":"weft","type":"weft","delegate":{"type":"sdnoverlay"}}`,
		env:  env(true),
		hns:  hnsfile.Network{Name: "flannel.4096", Type: "Overlay", SourceVIP: netip.MustParseAddr("10.244.1.100")},
		want: `{"cniVersion":"1.0.0","name":"flannel.4096","type":"sdnoverlay","ipMasq":true,"ipMasqNetwork":"10.244.0.0/16",
			"ipam":{"type":"host-local","ranges":[[
				{"subnet":"10.244.1.0/24","rangeStart":"10.244.1.2","rangeEnd":"10.244.1.99"},
				{"subnet":"10.244.1.0/24","rangeStart":"10.244.1.101"}]]}}`,
	}, {
		// weftd enforces NetworkPolicy: each new endpoint is closed both ways beside the
		// delegate's own policies, until weftd opens it.
		name: "network policy closes the endpoint",
		conf: `{"cniVersion":"1.0.0","name":"weft","type":"weft","delegate":{"apiVersion":2,
			"policies":[{"Name":"EndpointPolicy","Value":{"Type":"OutBoundNAT","Settings":{"Exceptions":["10.244.0.0/16"]}}}]}}`,
		env: env(true),
		hns: hnsfile.Network{Name: "flannel.4096", Type: "Overlay", NetworkPolicy: true, SourceVIP: netip.MustParseAddr("10.244.1.254")},
		want: `{"cniVersion":"1.0.0","name":"flannel.4096","type":"win-overlay","apiVersion":2,"ipMasq":true,"ipMasqNetwork":"10.244.0.0/16",
			"policies":[{"Name":"EndpointPolicy","Value":{"Type":"OutBoundNAT","Settings":{"Exceptions":["10.244.0.0/16"]}}},
				{"name":"EndpointPolicy","value":{"Type":"ACL","Settings":{"Action":"Block","Direction":"In","RuleType":"Switch","Priority":4200}}},
				{"name":"EndpointPolicy","value":{"Type":"ACL","Settings":{"Action":"Block","Direction":"Out","RuleType":"Switch","Priority":4200}}}],
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.1.0/24","rangeStart":"10.244.1.2","rangeEnd":"10.244.1.253"}]]}}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			conf, err := ParseConfig([]byte(tc.conf))
			if err != nil {
				t.Fatal(err)
			}
			d, err := BuildDelegate(Windows, conf, tc.env, tc.hns)
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, d.Config, tc.want)
		})
	}
}

// TestDelegateWindowsStaleVIP: a source VIP outside the subnet (its file not yet rewritten
// after a subnet change) is a clear, retryable error.
func TestDelegateWindowsStaleVIP(t *testing.T) {
	conf, err := ParseConfig([]byte(`{"name":"weft","type":"weft","subnetFile":"/run/flannel/subnet.env"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = BuildDelegate(Windows, conf, env(true),
		hnsfile.Network{Name: "flannel.4096", Type: "Overlay", SourceVIP: netip.MustParseAddr("10.244.2.254")})
	ce := ToCNI(err)
	if ce == nil || ce.Code != 11 || !strings.Contains(ce.Msg, "10.244.2.254") || !strings.Contains(ce.Msg, "/run/flannel/subnet.env") {
		t.Errorf("error %#v; want code 11 naming the VIP and subnet.env", ce)
	}
}

// TestDelegateWindowsPolicyNeedsV2: weftd enforces NetworkPolicy, and the delegate is on
// HNS v1: the pod fails with an error naming the key, rather than starting open.
func TestDelegateWindowsPolicyNeedsV2(t *testing.T) {
	conf, err := ParseConfig([]byte(`{"name":"weft","type":"weft"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = BuildDelegate(Windows, conf, env(true), hnsfile.Network{Name: "cbr0", Type: "L2Bridge", NetworkPolicy: true})
	ce := ToCNI(err)
	if ce == nil || ce.Code != 7 || !strings.Contains(ce.Msg, "delegate.apiVersion") {
		t.Errorf("error %#v; want code 7 naming delegate.apiVersion", ce)
	}
}

func TestExcludeFromRange(t *testing.T) {
	r := func(sn, start, end string) ipRange { return ipRange{Subnet: sn, RangeStart: start, RangeEnd: end} }
	addrs := func(ss ...string) []netip.Addr {
		var a []netip.Addr
		for _, s := range ss {
			a = append(a, netip.MustParseAddr(s))
		}
		return a
	}
	const sn = "10.244.1.0/24"
	for _, tc := range []struct {
		name     string
		sn       string
		reserved []netip.Addr
		want     []ipRange
	}{
		{"gateway only", sn, nil, []ipRange{r(sn, "10.244.1.2", "")}},
		{"last", sn, addrs("10.244.1.254"), []ipRange{r(sn, "10.244.1.2", "10.244.1.253")}},
		{"middle and unordered", sn, addrs("10.244.1.9", "10.244.1.5", "10.244.1.5"),
			[]ipRange{r(sn, "10.244.1.2", "10.244.1.4"), r(sn, "10.244.1.6", "10.244.1.8"), r(sn, "10.244.1.10", "")}},
		{"adjacent", sn, addrs("10.244.1.2", "10.244.1.3"), []ipRange{r(sn, "10.244.1.4", "")}},
		{"outside and broadcast", sn, addrs("10.244.2.7", "10.244.1.255", "10.244.1.0"), []ipRange{r(sn, "10.244.1.2", "")}},
		{"unmasked subnet", "10.244.1.1/24", addrs("10.244.1.254"), []ipRange{r(sn, "10.244.1.2", "10.244.1.253")}},
		{"tiny", "10.0.0.0/30", addrs("10.0.0.2"), nil},
		{"IPv6", "fd00::/64", addrs("fd00::ffff:ffff:ffff:ffff"),
			[]ipRange{r("fd00::/64", "fd00::2", "fd00::ffff:ffff:ffff:fffe")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := excludeFromRange(netip.MustParsePrefix(tc.sn), tc.reserved)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("excludeFromRange(%s, %v) = %+v; want %+v", tc.sn, tc.reserved, got, tc.want)
			}
		})
	}
}
