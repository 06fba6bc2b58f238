package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/internal/etcdtest"
	"github.com/weftnet/weft/netif"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/etcd"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

// windowsConf is flannel's vxlan config for a cluster with Windows nodes: VNI 4096, port 4789.
const windowsConf = `{"Network":"10.244.0.0/16","SubnetMin":"10.244.100.0","Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}`

// winDaemon is weftd on a Windows node, run on Linux: the daemon with the Windows plane over
// an in-memory HNS (which outlives the daemon, as HNS outlives weftd).
type winDaemon struct {
	cancel context.CancelFunc
	done   chan error
}

func startWindowsDaemon(t *testing.T, cli *clientv3.Client, dir string, hns *hnstest.HNS, host *hnstest.Host) *winDaemon {
	t.Helper()
	cfg := DefaultConfig()
	cfg.SubnetFile = filepath.Join(dir, "subnet.env")
	cfg.HealthzPort = 0
	cfg.ResyncInterval = time.Minute
	cfg.Ifaces = []string{"Ethernet"}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	plane := windows.New(hns, host, windows.Config{
		PollInterval:  10 * time.Millisecond,
		WatchInterval: 50 * time.Millisecond,
		NetworkFile:   filepath.Join(dir, "hns.json"),
	}, log)
	ifs := []netif.Interface{{Name: "Ethernet", MTU: 1500, Up: true, Prefix: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}}}
	ctx, cancel := context.WithCancel(context.Background())
	d := &winDaemon{cancel: cancel, done: make(chan error, 1)}
	go func() {
		d.done <- RunWith(ctx, cfg, log, Deps{
			Manager:    etcd.New(cli, etcd.Options{Logger: log}),
			Plane:      plane,
			Interfaces: func() ([]netif.Interface, error) { return ifs, nil },
			DefaultIf:  func() (string, error) { return "Ethernet", nil },
		})
	}()
	t.Cleanup(func() { d.stop(t) })
	return d
}

func (d *winDaemon) stop(t *testing.T) {
	if d.cancel == nil {
		return
	}
	d.cancel()
	d.cancel = nil
	if err := <-d.done; err != nil {
		t.Errorf("weftd ended with %v", err)
	}
}

func putWindowsPeer(t *testing.T, cli *clientv3.Client, key, ip, mac string) {
	t.Helper()
	v := fmt.Sprintf(`{"PublicIP":%q,"BackendType":"vxlan","BackendData":{"VNI":4096,"VtepMAC":%q}}`, ip, mac)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/subnets/"+key, v); err != nil {
		t.Fatal(err)
	}
}

// routesOf is the network's RemoteSubnetRoute policies, "subnet via PA (DR MAC)", sorted.
func routesOf(t *testing.T, hns *hnstest.HNS) []string {
	n, err := hns.NetworkByName("flannel.4096")
	if err != nil {
		return nil
	}
	var out []string
	for _, p := range n.PoliciesOf(windows.PolicyRemoteSubnetRoute) {
		var s windows.RemoteSubnetRouteSettings
		if err := p.Decode(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s via %s (%s, VSID %d)", s.DestinationPrefix, s.ProviderAddress, s.DistributedRouterMacAddress, s.IsolationID))
	}
	slices.Sort(out)
	return out
}

// TestDaemonWindowsPlane: weftd on a Windows node, the daemon with the Windows plane over the
// in-memory HNS and a real etcd. The Overlay network is made inside the one acquisition and
// its DR MAC published as the VtepMAC in the lease's first write; RemoteSubnetRoute policies
// follow peers that join and leave; a restarted weftd adopts the network and sends HNS
// nothing.
func TestDaemonWindowsPlane(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", windowsConf); err != nil {
		t.Fatal(err)
	}
	putWindowsPeer(t, cli, "10.244.7.0-24", "192.0.2.17", "0e:00:00:00:00:07")
	host := hnstest.NewHost(windows.Interface{Index: 4, Name: "Ethernet", Prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}})
	hns := hnstest.New(hnstest.Options{ManagementIP: netip.MustParseAddr("192.0.2.10"), Blip: 100 * time.Millisecond, Host: host})
	dir := t.TempDir()
	// weftd starts before HNS: it retries the acquisition (asking HNS afresh) until HNS
	// answers, and publishes nothing meanwhile.
	hns.Stop()
	d := startWindowsDaemon(t, cli, dir, hns, host)
	time.Sleep(1500 * time.Millisecond)
	if resp, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/", clientv3.WithPrefix()); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("leases while HNS is stopped: %v %v, want the peer's alone", err, resp)
	}
	hns.Start()

	const peer7 = "10.244.7.0/24 via 192.0.2.17 (0e:00:00:00:00:07, VSID 4096)"
	eventually(t, "the RemoteSubnetRoute of the peer", func() bool {
		return fmt.Sprint(routesOf(t, hns)) == "["+peer7+"]"
	})
	n, err := hns.NetworkByName("flannel.4096")
	if err != nil {
		t.Fatal(err)
	}
	mac, err := n.DRMAC()
	if err != nil {
		t.Fatal(err)
	}
	env, err := subnet.ReadEnv(filepath.Join(dir, "subnet.env"))
	if err != nil {
		t.Fatal(err)
	}
	if sn := n.StaticSubnet(); sn == nil || sn.IPAddressPrefix != env.Subnet.Masked().String() {
		t.Errorf("network subnet %+v, subnet.env has %s", sn, env.Subnet)
	}
	sn, _ := env.LeaseSubnets()
	resp, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/"+subnet.Key(sn, netip.Prefix{}))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("own lease in etcd: %v %v", err, resp)
	}
	kv := resp.Kvs[0]
	if want := fmt.Sprintf(`"BackendData":{"VNI":4096,"VtepMAC":%q}`, mac.String()); !strings.Contains(string(kv.Value), want) {
		t.Errorf("own lease %s, want %s (the DR MAC)", kv.Value, want)
	}
	if kv.Version != 1 {
		t.Errorf("own lease written %d times, want once: the MAC goes in the acquisition's write", kv.Version)
	}

	putWindowsPeer(t, cli, "10.244.8.0-24", "192.0.2.18", "0e:00:00:00:00:08")
	const peer8 = "10.244.8.0/24 via 192.0.2.18 (0e:00:00:00:00:08, VSID 4096)"
	eventually(t, "the second peer's route", func() bool {
		return fmt.Sprint(routesOf(t, hns)) == "["+peer7+" "+peer8+"]"
	})
	if _, err := cli.Delete(t.Context(), etcd.DefaultPrefix+"/subnets/10.244.7.0-24"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first peer's route gone", func() bool {
		return fmt.Sprint(routesOf(t, hns)) == "["+peer8+"]"
	})

	// A restart adopts the network: no request to HNS, the same network and DR MAC.
	d.stop(t)
	hns.ResetRequests()
	start := time.Now()
	startWindowsDaemon(t, cli, dir, hns, host)
	eventually(t, "the restarted weftd's subnet.env", func() bool {
		e, err := subnet.ReadEnv(filepath.Join(dir, "subnet.env"))
		return err == nil && e.Subnet == env.Subnet && time.Since(start) > 300*time.Millisecond
	})
	if r := hns.Requests(); len(r) != 0 {
		t.Errorf("restart sent HNS %d requests, want none: %+v", len(r), r)
	}
	if after, err := hns.NetworkByName("flannel.4096"); err != nil || after.ID != n.ID {
		t.Errorf("network after the restart: %+v %v, want %s adopted", after, err, n.ID)
	}
	if got := fmt.Sprint(routesOf(t, hns)); got != "["+peer8+"]" {
		t.Errorf("routes after the restart: %s", got)
	}
	resp, err = cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/"+subnet.Key(sn, netip.Prefix{}))
	if err != nil || len(resp.Kvs) != 1 || !strings.Contains(string(resp.Kvs[0].Value), mac.String()) {
		t.Errorf("own lease after the restart: %v %v, want VtepMAC %s", err, resp, mac)
	}
}

// TestDaemonWindowsRefusesIPv6Overlay: on Windows, vxlan with IPv6 stops start-up with an
// error that names the key and says why (HNS Overlay networks carry no IPv6 between pods).
func TestDaemonWindowsRefusesIPv6Overlay(t *testing.T) {
	for _, c := range []struct {
		backend, says string
		plane6        bool
	}{
		// HNS Overlay networks carry no IPv6 between pods (windows.Capabilities), even
		// with an IPv6 plane at hand.
		{`{"Type":"vxlan","VNI":4096,"Port":4789}`, "Overlay", true},
		// A data plane without an IPv6 family refuses any IPv6 config.
		{`{"Type":"host-gw"}`, "carries no IPv6", false},
	} {
		t.Run(c.says, func(t *testing.T) {
			srv := etcdtest.Start(t, etcdtest.Options{})
			cli := srv.Client(t)
			conf := `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10::/56","Backend":` + c.backend + `}`
			if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", conf); err != nil {
				t.Fatal(err)
			}
			hns := hnstest.New(hnstest.Options{})
			cfg := DefaultConfig()
			cfg.SubnetFile = filepath.Join(t.TempDir(), "subnet.env")
			cfg.HealthzPort = 0
			log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			plane := windows.New(hns, nil, windows.Config{}, log)
			deps := Deps{
				Manager:    etcd.New(cli, etcd.Options{Logger: log}),
				Plane:      plane,
				Interfaces: func() ([]netif.Interface, error) { return nil, nil },
				DefaultIf:  func() (string, error) { return "Ethernet", nil },
			}
			if c.plane6 {
				deps.PlaneV6 = plane.IPv6()
			}
			err := RunWith(ctx, cfg, log, deps)
			var ce *subnet.ConfigError
			if !errors.As(err, &ce) || ce.Key != "EnableIPv6" || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("start-up with IPv6 %s on Windows: %v, want a config error naming EnableIPv6 and saying %q", c.backend, err, c.says)
			}
			if r := hns.Requests(); len(r) != 0 {
				t.Errorf("HNS was asked %+v before the config was refused", r)
			}
			if resp, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/", clientv3.WithPrefix()); err != nil || len(resp.Kvs) != 0 {
				t.Errorf("leases written before the config was refused: %v %v", err, resp.Kvs)
			}
		})
	}
}

// TestDaemonWindowsDualStackHostGW: host-gw in a dual-stack network on a Windows node, over
// the in-memory HNS and host and a real etcd: one L2Bridge network carries both subnets
// (each with its default route), the host endpoint has both .2 and ::2, forwarding is on for
// both families, and each family's peer routes follow a peer that joins and leaves.
func TestDaemonWindowsDualStackHostGW(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	conf := `{"Network":"10.244.0.0/16","SubnetMin":"10.244.100.0","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","IPv6SubnetMin":"fd00:10:244:80::","Backend":{"Type":"host-gw"}}`
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", conf); err != nil {
		t.Fatal(err)
	}
	put := func(key, ip, ip6 string) {
		v := fmt.Sprintf(`{"PublicIP":%q,"PublicIPv6":%q,"BackendType":"host-gw","BackendData":null}`, ip, ip6)
		if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/subnets/"+key, v); err != nil {
			t.Fatal(err)
		}
	}
	put("10.244.7.0-24&fd00:10:244:7::-64", "192.0.2.17", "fd77:77::17")
	pfx := netip.MustParsePrefix
	host := hnstest.NewHost(windows.Interface{Index: 4, Name: "Ethernet", Prefixes: []netip.Prefix{pfx("192.0.2.10/24"), pfx("fd77:77::10/64")}})
	hns := hnstest.New(hnstest.Options{Version: windows.Version{Major: 11, Minor: 10}, ManagementIP: netip.MustParseAddr("192.0.2.10"), Blip: 50 * time.Millisecond, Host: host})

	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.SubnetFile = filepath.Join(dir, "subnet.env")
	cfg.HealthzPort = 0
	cfg.Ifaces = []string{"Ethernet"}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	// start runs a weftd process: a new plane (both families') over the HNS and host that
	// outlive it. The interface it finds is the vSwitch vNIC once HNS made one.
	start := func() (stop func()) {
		plane := windows.New(hns, host, windows.Config{PollInterval: 10 * time.Millisecond, WatchInterval: 50 * time.Millisecond}, log)
		name := "Ethernet"
		if hifs, _ := host.Interfaces(); slices.ContainsFunc(hifs, func(i windows.Interface) bool { return i.Name == "vEthernet (Ethernet)" }) {
			name = "vEthernet (Ethernet)"
		}
		ifs := []netif.Interface{{Name: name, MTU: 1500, Up: true, Prefix: []netip.Prefix{pfx("192.0.2.10/24"), pfx("fd77:77::10/64")}}}
		c := cfg
		c.Ifaces = []string{name}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- RunWith(ctx, c, log, Deps{Manager: etcd.New(cli, etcd.Options{Logger: log}), Plane: plane, PlaneV6: plane.IPv6(),
				Interfaces: func() ([]netif.Interface, error) { return ifs, nil },
				DefaultIf:  func() (string, error) { return name, nil }})
		}()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("weftd ended with %v", err)
			}
		}
	}
	stop := start()
	t.Cleanup(func() { stop() })

	// peerRoutes are the host's routes into the cluster networks, "dst via next hop".
	peerRoutes := func() []string {
		rs, err := host.Routes()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rs {
			if pfx("10.244.0.0/16").Contains(r.Dst.Addr()) || pfx("fd00:10:244::/56").Contains(r.Dst.Addr()) {
				out = append(out, r.Dst.String()+" via "+r.NextHop.String())
			}
		}
		slices.Sort(out)
		return out
	}
	eventually(t, "both families' routes to the peer", func() bool {
		return fmt.Sprint(peerRoutes()) == "[10.244.7.0/24 via 192.0.2.17 fd00:10:244:7::/64 via fd77:77::17]"
	})
	env, err := subnet.ReadEnv(cfg.SubnetFile)
	if err != nil {
		t.Fatal(err)
	}
	sn, sn6 := env.LeaseSubnets()
	n, err := hns.NetworkByName("cbr0")
	if err != nil {
		t.Fatal(err)
	}
	var subnets []string
	for _, s := range n.StaticSubnets() {
		for _, r := range s.Routes {
			subnets = append(subnets, s.IPAddressPrefix+" default "+r.DestinationPrefix+" via "+r.NextHop)
		}
	}
	want := []string{sn.String() + " default 0.0.0.0/0 via " + sn.Addr().Next().String(),
		sn6.String() + " default ::/0 via " + sn6.Addr().Next().String()}
	if !slices.Equal(subnets, want) || n.Type != windows.NetworkL2Bridge {
		t.Errorf("network cbr0 (%s): subnets %q, want %q", n.Type, subnets, want)
	}
	eps, err := hns.NetworkEndpoints(n.ID)
	if err != nil || len(eps) != 1 || fmt.Sprint(eps[0].IPs()) != fmt.Sprintf("[%s %s]", sn.Addr().Next().Next(), sn6.Addr().Next().Next()) {
		t.Errorf("endpoints of cbr0: %+v (%v); want the host endpoint at .2 and ::2", eps, err)
	}
	hifs, err := host.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	forwarding := 0
	for _, i := range hifs {
		if strings.HasPrefix(i.Name, "vEthernet") {
			if !i.Forwarding || !i.Forwarding6 {
				t.Errorf("host interface %s (%v): forwarding IPv4 %t IPv6 %t; want both", i.Name, i.Prefixes, i.Forwarding, i.Forwarding6)
			}
			forwarding++
		}
	}
	if forwarding != 2 {
		t.Errorf("host interfaces %+v: want the management vNIC and the host endpoint's", hifs)
	}

	put("10.244.8.0-24&fd00:10:244:8::-64", "192.0.2.18", "fd77:77::18")
	eventually(t, "the second peer's routes", func() bool { return len(peerRoutes()) == 4 })
	if _, err := cli.Delete(t.Context(), etcd.DefaultPrefix+"/subnets/10.244.7.0-24&fd00:10:244:7::-64"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first peer's routes gone", func() bool {
		return fmt.Sprint(peerRoutes()) == "[10.244.8.0/24 via 192.0.2.18 fd00:10:244:8::/64 via fd77:77::18]"
	})

	// A restart adopts the network, its endpoint and both families' routes: it writes nothing.
	stop()
	before, requests := hns.Render()+host.Render(), len(hns.Requests())
	host.ResetCalls()
	stop = start()
	time.Sleep(time.Second) // start-up, both families' first full Apply, a Watch look or more
	if after := hns.Render() + host.Render(); after != before {
		t.Errorf("the restart changed HNS or the host:\n%s\nwas\n%s", after, before)
	}
	if r := hns.Requests(); len(r) != requests {
		t.Errorf("the restart sent HNS %+v", r[requests:])
	}
	for _, call := range []string{"AddRoute", "DeleteRoute", "SetForwarding"} {
		if n := host.Calls()[call]; n != 0 {
			t.Errorf("the restart called %s %d times", call, n)
		}
	}
}

// TestDaemonWindowsDualStackOldHNS: HNS before 11.10 takes no IPv6 subnet (hcsshim's
// IPv6DualStackVersion): a dual-stack host-gw config stops start-up with an error naming
// EnableIPv6 and the version, publishing nothing, rather than retrying for ever.
func TestDaemonWindowsDualStackOldHNS(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	conf := `{"Network":"10.244.0.0/16","SubnetMin":"10.244.100.0","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","IPv6SubnetMin":"fd00:10:244:80::","Backend":{"Type":"host-gw"}}`
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", conf); err != nil {
		t.Fatal(err)
	}
	pfx := netip.MustParsePrefix
	host := hnstest.NewHost(windows.Interface{Index: 4, Name: "Ethernet", Prefixes: []netip.Prefix{pfx("192.0.2.10/24"), pfx("fd77:77::10/64")}})
	hns := hnstest.New(hnstest.Options{Version: windows.Version{Major: 10, Minor: 0}, ManagementIP: netip.MustParseAddr("192.0.2.10"), Host: host})
	cfg := DefaultConfig()
	cfg.SubnetFile = filepath.Join(t.TempDir(), "subnet.env")
	cfg.HealthzPort = 0
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	plane := windows.New(hns, host, windows.Config{}, log)
	ifs := []netif.Interface{{Name: "Ethernet", MTU: 1500, Up: true, Prefix: []netip.Prefix{pfx("192.0.2.10/24"), pfx("fd77:77::10/64")}}}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := RunWith(ctx, cfg, log, Deps{Manager: etcd.New(cli, etcd.Options{Logger: log}), Plane: plane, PlaneV6: plane.IPv6(),
		Interfaces: func() ([]netif.Interface, error) { return ifs, nil },
		DefaultIf:  func() (string, error) { return "Ethernet", nil }})
	var ce *subnet.ConfigError
	if !errors.As(err, &ce) || ce.Key != "EnableIPv6" || !strings.Contains(err.Error(), "11.10") {
		t.Fatalf("start-up on HNS 10.0: %v, want a config error naming EnableIPv6 and HNS 11.10", err)
	}
	if r := hns.Requests(); len(r) != 0 {
		t.Errorf("HNS was asked %+v", r)
	}
	if resp, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/", clientv3.WithPrefix()); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("leases written: %v %v", err, resp.Kvs)
	}
}

// flakyHost is a host whose forwarding cannot be turned on the first times it is asked, as
// under Wine before its IP Helper was shimmed: the plane's Prepare fails after HNS made the
// network.
type flakyHost struct {
	*hnstest.Host
	fails atomic.Int32 // failures left
	tries atomic.Int32
}

func (h *flakyHost) SetForwarding(index uint32, v6 bool) error {
	h.tries.Add(1)
	if h.fails.Add(-1) >= 0 {
		return fmt.Errorf("interface %d: GetIpInterfaceEntry: not found", index)
	}
	return h.Host.SetForwarding(index, v6)
}

// runWindowsHostGW runs weftd on a Windows node of hns and host, whose interface ifName
// holds 192.0.2.10/24, against an etcd of its own with a host-gw config (subnets from
// 10.244.100.0), until the test ends; it returns the etcd client and subnet.env once weftd
// wrote it.
func runWindowsHostGW(t *testing.T, hns *hnstest.HNS, host windows.Host, ifName string) (*clientv3.Client, subnet.Env) {
	t.Helper()
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	conf := `{"Network":"10.244.0.0/16","SubnetMin":"10.244.100.0","Backend":{"Type":"host-gw"}}`
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", conf); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.SubnetFile = filepath.Join(t.TempDir(), "subnet.env")
	cfg.HealthzPort = 0
	cfg.Ifaces = []string{ifName}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	plane := windows.New(hns, host, windows.Config{PollInterval: 10 * time.Millisecond, WatchInterval: 50 * time.Millisecond}, log)
	ifs := []netif.Interface{{Name: ifName, MTU: 1500, Up: true, Prefix: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunWith(ctx, cfg, log, Deps{Manager: etcd.New(cli, etcd.Options{Logger: log}), Plane: plane,
			Interfaces: func() ([]netif.Interface, error) { return ifs, nil },
			DefaultIf:  func() (string, error) { return ifName, nil }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("weftd ended with %v", err)
		}
	})
	var env subnet.Env
	eventually(t, "subnet.env", func() bool {
		var err error
		env, err = subnet.ReadEnv(cfg.SubnetFile)
		return err == nil
	})
	return cli, env
}

// TestDaemonWindowsPrepareRetryKeepsSubnet: a Prepare that fails after it made the L2Bridge
// network is retried for the subnet it was given, not a new one: the retry adopts the network
// it made, and HNS is asked for one network and no deletion, whose subnet the lease
// publishes. (Each re-creation blinks the host's NIC.)
func TestDaemonWindowsPrepareRetryKeepsSubnet(t *testing.T) {
	host := &flakyHost{Host: hnstest.NewHost(windows.Interface{Index: 4, Name: "Ethernet", Prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}})}
	host.fails.Store(2)
	hns := hnstest.New(hnstest.Options{ManagementIP: netip.MustParseAddr("192.0.2.10"), Blip: 10 * time.Millisecond, Host: host.Host})
	cli, env := runWindowsHostGW(t, hns, host, "Ethernet")
	if n := host.tries.Load(); n < 3 {
		t.Fatalf("forwarding asked %d times, want the two failures and more: Prepare was not retried", n)
	}
	ops := map[string]int{}
	for _, r := range hns.Requests() {
		ops[r.Op]++
	}
	if ops["CreateNetwork"] != 1 || ops["DeleteNetwork"] != 0 {
		t.Errorf("HNS was asked %d network creations and %d deletions over the retries, want 1 and 0 (requests %v)", ops["CreateNetwork"], ops["DeleteNetwork"], ops)
	}
	sn, _ := env.LeaseSubnets()
	n, err := hns.NetworkByName("cbr0")
	if err != nil {
		t.Fatal(err)
	}
	if s := n.StaticSubnet(); s == nil || s.IPAddressPrefix != sn.String() {
		t.Errorf("network cbr0 serves %+v, the lease is %s", s, sn)
	}
	resp, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != etcd.DefaultPrefix+"/subnets/"+subnet.Key(sn, netip.Prefix{}) {
		t.Errorf("leases %v %v, want the one of %s", resp, err, sn)
	}
}

// TestDaemonWindowsKeepsNetworkSubnet: a node without subnet.env whose HNS has the network
// already (a weftd stopped between making it and publishing the lease) asks for the
// network's subnet: it adopts the network, HNS is asked to make or delete none.
func TestDaemonWindowsKeepsNetworkSubnet(t *testing.T) {
	host := hnstest.NewHost(windows.Interface{Index: 4, Name: "Ethernet", Prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}})
	hns := hnstest.New(hnstest.Options{ManagementIP: netip.MustParseAddr("192.0.2.10"), Host: host})
	made, err := hns.CreateNetwork(&windows.HostComputeNetwork{Name: "cbr0", Type: windows.NetworkL2Bridge, Flags: windows.EnableNonPersistent,
		Policies: []windows.Policy{windows.NetAdapterNamePolicy("Ethernet")},
		Ipams: []windows.Ipam{{Type: "Static", Subnets: []windows.Subnet{{IPAddressPrefix: "10.244.150.0/24",
			Routes: []windows.Route{{NextHop: "10.244.150.1", DestinationPrefix: "0.0.0.0/0"}}}}}},
		SchemaVersion: windows.SchemaV2()})
	if err != nil {
		t.Fatal(err)
	}
	hns.ResetRequests()
	_, env := runWindowsHostGW(t, hns, host, "vEthernet (Ethernet)")
	if sn, _ := env.LeaseSubnets(); sn != netip.MustParsePrefix("10.244.150.0/24") {
		t.Errorf("lease %s, want the network's 10.244.150.0/24", sn)
	}
	for _, r := range hns.Requests() {
		if r.Op == "CreateNetwork" || r.Op == "DeleteNetwork" {
			t.Errorf("HNS was asked %s %s", r.Op, r.ID)
		}
	}
	if n, err := hns.NetworkByName("cbr0"); err != nil || n.ID != made.ID {
		t.Errorf("network cbr0 %+v %v, want %s kept", n, err, made.ID)
	}
}
