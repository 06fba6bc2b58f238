package daemon

import (
	"flag"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func parse(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("weftd", flag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	err := LoadEnv(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return cfg, err
}

func TestFlagsAndEnv(t *testing.T) {
	cfg, err := parse(t,
		[]string{"--etcd-endpoints=http://a:2379,http://b:2379", "--iface=eth1", "--iface=10.0.0.1,eth2", "--subnet-lease-renew-margin=30", "--ip-masq"},
		map[string]string{"WEFTD_ETCD_PREFIX": "/weft", "FLANNELD_PUBLIC_IP": "192.0.2.9", "WEFTD_IFACE": "ignored", "FLANNELD_ETCD_PREFIX": "/flannel"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.EtcdEndpoints, " ") != "http://a:2379 http://b:2379" {
		t.Errorf("endpoints %v", cfg.EtcdEndpoints)
	}
	if strings.Join(cfg.Ifaces, " ") != "eth1 10.0.0.1 eth2" {
		t.Errorf("ifaces %v (the environment must not add to a flag given on the command line)", cfg.Ifaces)
	}
	if cfg.RenewMargin != 30*time.Minute || !cfg.IPMasq || cfg.EtcdPrefix != "/weft" || cfg.PublicIP != "192.0.2.9" {
		t.Errorf("cfg %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Error(err)
	}
}

func TestConfigErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--public-ip=fd00::1"}, nil, "--public-ip"},
		{[]string{"--iface-regex=("}, nil, "--iface-regex"},
		{[]string{"--healthz-port=70000"}, nil, "--healthz-port"},
		{[]string{"--subnet-lease-renew-margin=0"}, nil, "--subnet-lease-renew-margin"},
		{nil, map[string]string{"WEFTD_HEALTHZ_PORT": "x"}, "WEFTD_HEALTHZ_PORT"},
		{[]string{"--subnet-lease-renew-margin=soon"}, nil, "subnet-lease-renew-margin"},
	} {
		cfg, err := parse(t, tc.args, tc.env)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: error %v, want one naming %s", tc.args, tc.env, err, tc.want)
		}
	}
}

func TestPickExternal(t *testing.T) {
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
		cfg        Config
		name, addr string
		public     string
	}{
		{Config{}, "eth1", "203.0.113.5", "203.0.113.5"},
		{Config{Ifaces: []string{"eth0"}}, "eth0", "192.0.2.10", "192.0.2.10"},
		{Config{Ifaces: []string{"198.51.100.7"}}, "eth0", "198.51.100.7", "198.51.100.7"},
		{Config{Ifaces: []string{"nope", "eth2", "eth3", "eth1"}}, "eth1", "203.0.113.5", "203.0.113.5"},
		{Config{IfaceRegexs: []string{"^198\\.51\\."}}, "eth0", "198.51.100.7", "198.51.100.7"},
		{Config{IfaceRegexs: []string{"^eth[01]$"}, PublicIP: "192.0.2.99"}, "eth0", "192.0.2.10", "192.0.2.99"},
	} {
		ext, err := pickExternal(tc.cfg, ifs, def)
		if err != nil {
			t.Errorf("%+v: %v", tc.cfg, err)
			continue
		}
		if ext.Name != tc.name || ext.Addr.String() != tc.addr || ext.PublicIP.String() != tc.public {
			t.Errorf("%+v: got %s %s %s, want %s %s %s", tc.cfg, ext.Name, ext.Addr, ext.PublicIP, tc.name, tc.addr, tc.public)
		}
	}
	if ext, _ := pickExternal(Config{Ifaces: []string{"eth0"}}, ifs, def); len(ext.Connected) != 2 {
		t.Errorf("eth0 connected networks %v, want its two IPv4 networks", ext.Connected)
	}
	for _, cfg := range []Config{{Ifaces: []string{"eth2"}}, {Ifaces: []string{"eth3"}}, {Ifaces: []string{"nope"}}, {IfaceRegexs: []string{"^wlan"}}} {
		if ext, err := pickExternal(cfg, ifs, def); err == nil {
			t.Errorf("%+v: picked %s, want an error", cfg, ext.Name)
		}
	}
}
