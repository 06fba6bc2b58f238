package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/internal/etcdtest"
	"github.com/weftnet/weft/netif"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/etcd"
)

var dualIfaces = []netif.Interface{
	{Name: "lo", MTU: 65536, Up: true, Prefix: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8"), netip.MustParsePrefix("::1/128")}},
	{Name: "eth0", MTU: 1500, Up: true, Prefix: []netip.Prefix{netip.MustParsePrefix("fe80::10/64"),
		netip.MustParsePrefix("192.0.2.10/24"), netip.MustParsePrefix("fd77:77::10/64")}},
}

// TestDaemonDualStack: with IPv6 enabled, weftd publishes one lease with both halves (each
// family's device MAC in its own backend data), writes both subnets to subnet.env with the
// IPv6 underlay's MTU, and programs each family's half of every peer lease on that family's
// plane; a lease whose IPv6 half is bad is skipped, logged and counted for IPv6 only.
func TestDaemonDualStack(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	conf := `{"Network":"10.244.0.0/16","SubnetMin":"10.244.100.0","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","IPv6SubnetMin":"fd00:10:244:80::","Backend":{"Type":"vxlan"}}`
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", conf); err != nil {
		t.Fatal(err)
	}
	put := func(key, v string) {
		t.Helper()
		if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/subnets/"+key, v); err != nil {
			t.Fatal(err)
		}
	}
	dual := func(ip, ip6, mac, mac6 string) string {
		return fmt.Sprintf(`{"PublicIP":%q,"PublicIPv6":%q,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":%q},"BackendV6Data":{"VNI":1,"VtepMAC":%q}}`, ip, ip6, mac, mac6)
	}
	put("10.244.7.0-24&fd00:10:244:7::-64", dual("192.0.2.17", "fd77:77::17", "0e:00:00:00:00:07", "0e:00:00:00:06:07"))

	plane4 := &fakePlane{mac: backend.MAC{0x0e, 4, 4, 4, 4, 4}}
	plane6 := &fakePlane{mac: backend.MAC{0x0e, 6, 6, 6, 6, 6}}
	cfg := DefaultConfig()
	cfg.SubnetFile = filepath.Join(t.TempDir(), "subnet.env")
	cfg.HealthzPort = 0
	cfg.Ifaces = []string{"eth0"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	m := newMetrics()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	go func() {
		done <- RunWith(ctx, cfg, log, Deps{Manager: etcd.New(cli, etcd.Options{Logger: log}), Plane: plane4, PlaneV6: plane6,
			Interfaces: func() ([]netif.Interface, error) { return dualIfaces, nil },
			DefaultIf:  func() (string, error) { return "eth0", nil }, metrics: m})
	}()
	t.Cleanup(func() { cancel(); <-done })

	eventually(t, "both families programmed with the peer", func() bool {
		st4, _ := plane4.last()
		st6, _ := plane6.last()
		return fmt.Sprint(routes(st4)) == "[10.244.7.0/24]" && fmt.Sprint(routes(st6)) == "[fd00:10:244:7::/64]"
	})
	st6, _ := plane6.last()
	for _, p := range st6.peers {
		if p.PublicIP != netip.MustParseAddr("fd77:77::17") || p.VTEPMAC != (backend.MAC{0x0e, 0, 0, 0, 6, 7}) {
			t.Errorf("IPv6 peer %+v", p)
		}
	}
	env, err := subnet.ReadEnv(cfg.SubnetFile)
	if err != nil {
		t.Fatal(err)
	}
	if env.MTU != 1430 || env.Network != netip.MustParsePrefix("10.244.0.0/16") || env.IPv6Network != netip.MustParsePrefix("fd00:10:244::/56") ||
		!env.Subnet.IsValid() || !env.IPv6Subnet.IsValid() {
		t.Errorf("subnet.env = %+v", env)
	}
	sn, sn6 := env.LeaseSubnets()
	resp, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/"+subnet.Key(sn, sn6))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("own lease %s in etcd: %v %v", subnet.Key(sn, sn6), err, resp.Kvs)
	}
	var own subnet.LeaseAttrs
	if err := json.Unmarshal(resp.Kvs[0].Value, &own); err != nil {
		t.Fatal(err)
	}
	want := subnet.LeaseAttrs{PublicIP: netip.MustParseAddr("192.0.2.10"), PublicIPv6: netip.MustParseAddr("fd77:77::10"), BackendType: "vxlan",
		BackendData: json.RawMessage(`{"VNI":1,"VtepMAC":"0e:04:04:04:04:04"}`), BackendV6Data: json.RawMessage(`{"VNI":1,"VtepMAC":"0e:06:06:06:06:06"}`)}
	if want.NodeID, _, err = subnet.LoadNodeID(subnet.NodeIDFile(cfg.SubnetFile)); err != nil {
		t.Fatal(err)
	}
	if !own.Equal(want) || resp.Kvs[0].Version != 1 {
		t.Errorf("own lease %s (version %d), want %+v written once", resp.Kvs[0].Value, resp.Kvs[0].Version, want)
	}

	// A peer whose IPv6 half is bad: programmed for IPv4, skipped for IPv6, and counted.
	put("10.244.8.0-24&fd00:10:244:8::-64", dual("192.0.2.18", "1.2.3.4", "0e:00:00:00:00:08", "0e:00:00:00:06:08"))
	// One whose IPv6 subnet lies outside the IPv6 network.
	put("10.244.9.0-24&fd99::-64", dual("192.0.2.19", "fd77:77::19", "0e:00:00:00:00:09", "0e:00:00:00:06:09"))
	// A good one.
	put("10.244.10.0-24&fd00:10:244:a::-64", dual("192.0.2.20", "fd77:77::20", "0e:00:00:00:00:10", "0e:00:00:00:06:10"))
	eventually(t, "the new peers", func() bool {
		st4, _ := plane4.last()
		st6, _ := plane6.last()
		return fmt.Sprint(routes(st4)) == "[10.244.7.0/24 10.244.8.0/24 10.244.9.0/24 10.244.10.0/24]" &&
			fmt.Sprint(routes(st6)) == "[fd00:10:244:7::/64 fd00:10:244:a::/64]"
	})
	eventually(t, "the skips counted", func() bool {
		return counter(m.skipped.WithLabelValues(backend.SkipBadPublicIP)) == 1 && counter(m.skipped.WithLabelValues(backend.SkipOutside)) == 1
	})

}

// counter reads a counter's value, or a gauge's.
func counter(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	if g := m.GetGauge(); g != nil {
		return g.GetValue()
	}
	return m.GetCounter().GetValue()
}
