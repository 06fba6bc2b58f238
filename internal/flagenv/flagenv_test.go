package flagenv

import (
	"flag"
	"strings"
	"testing"
)

func TestLoad(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	given := fs.String("etcd-prefix", "/coreos.com/network", "")
	weftd := fs.String("public-ip", "", "")
	flanneld := fs.String("iface", "", "")
	unset := fs.String("subnet-file", "/run/flannel/subnet.env", "")
	if err := fs.Parse([]string{"--etcd-prefix=/cli"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"WEFTD_ETCD_PREFIX": "/env", "FLANNELD_PUBLIC_IP": "192.0.2.1", "WEFTD_PUBLIC_IP": "192.0.2.9",
		"FLANNELD_IFACE": "eth1",
	}
	if err := Load(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if *given != "/cli" || *weftd != "192.0.2.9" || *flanneld != "eth1" || *unset != "/run/flannel/subnet.env" {
		t.Errorf("got %q %q %q %q; want the command line over WEFTD_ over FLANNELD_ over the default", *given, *weftd, *flanneld, *unset)
	}
}

func TestLoadErrorNamesTheVariable(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Int("healthz-port", 8285, "")
	err := Load(fs, func(k string) (string, bool) { return "x", k == "FLANNELD_HEALTHZ_PORT" })
	if err == nil || !strings.Contains(err.Error(), `FLANNELD_HEALTHZ_PORT="x"`) {
		t.Errorf("error %v, want one naming FLANNELD_HEALTHZ_PORT", err)
	}
}
