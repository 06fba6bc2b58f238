package daemon

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/internal/flagenv"
)

func parse(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("weftd", flag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	err := flagenv.Load(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
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
		{[]string{"--debug-pprof", "--healthz-port=0"}, nil, "--debug-pprof"},
		{[]string{"--subnet-lease-renew-margin=0"}, nil, "--subnet-lease-renew-margin"},
		{nil, map[string]string{"WEFTD_HEALTHZ_PORT": "x"}, "WEFTD_HEALTHZ_PORT"},
		{[]string{"--subnet-lease-renew-margin=soon"}, nil, "subnet-lease-renew-margin"},
		{[]string{"--vxlan-tx-checksum-offload=maybe"}, nil, "--vxlan-tx-checksum-offload"},
		{nil, map[string]string{"WEFTD_VXLAN_TX_CHECKSUM_OFFLOAD": "On"}, "--vxlan-tx-checksum-offload"},
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

// TestForwardRulesFlag: flanneld's default (true), false from the command line or from a
// flanneld unit's environment.
func TestForwardRulesFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want bool
	}{
		{nil, nil, true},
		{[]string{"--iptables-forward-rules=false"}, nil, false},
		{nil, map[string]string{"FLANNELD_IPTABLES_FORWARD_RULES": "false"}, false},
	} {
		cfg, err := parse(t, tc.args, tc.env)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ForwardRules != tc.want {
			t.Errorf("%v %v: ForwardRules %t, want %t", tc.args, tc.env, cfg.ForwardRules, tc.want)
		}
	}
}

func TestBlackholeRouteFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want bool
	}{
		{nil, nil, false},
		{[]string{"--ip-blackhole-route"}, nil, true},
		{nil, map[string]string{"FLANNELD_IP_BLACKHOLE_ROUTE": "true"}, true},
	} {
		cfg, err := parse(t, tc.args, tc.env)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.BlackholeRoute != tc.want {
			t.Errorf("%v %v: BlackholeRoute %t, want %t", tc.args, tc.env, cfg.BlackholeRoute, tc.want)
		}
	}
}
