package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	weftbackend "github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/internal/etcdtest"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnssim"
	"github.com/weftnet/weft/windows/hnstest"
)

// wine64 is Debian's Wine loader (tools/wine/setup.sh installs it).
const wine64 = "/usr/lib/wine/wine64"

// winNode is the real weftd.exe running under Wine, its HNS calls going through hcsshim's
// hcn, the simulated computenetwork.dll and vmcompute.dll, to the simulated HNS service.
type winNode struct {
	t      *testing.T
	exe    string
	dir    string
	env    []string
	args   []string
	cmd    *exec.Cmd
	exited chan struct{}
}

func (n *winNode) start() {
	n.t.Helper()
	logf, err := os.OpenFile(filepath.Join(n.dir, "weftd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	defer logf.Close()
	n.cmd = exec.Command(wine64, append([]string{n.exe}, n.args...)...)
	n.cmd.Env = n.env
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(n.cmd, n.exited)
}

// stop kills weftd.exe, as a crash or a service manager's kill would.
func (n *winNode) stop() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.exited
	n.cmd = nil
}

func (n *winNode) log() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "weftd.log"))
	return string(b)
}

// hostAddress is an IPv4 address of this machine other than loopback: what weftd.exe under
// Wine sees as its interface, and so the node's public IP and the network's management IP.
func hostAddress(t *testing.T) netip.Addr {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
				return p.Addr()
			}
		}
	}
	t.Skip("no IPv4 interface besides loopback for weftd.exe to use")
	return netip.Addr{}
}

// winPath is a Linux path as a Windows program under Wine names it (drive Z: is /).
func winPath(p string) string { return `Z:` + strings.ReplaceAll(p, "/", `\`) }

// TestWindowsNodeUnderWine runs the real weftd.exe (GOOS=windows) under Wine against a real
// etcd, its HNS calls going through hcsshim's hcn package and its generated syscalls into
// our simulated computenetwork.dll and vmcompute.dll, which hand them to the simulated HNS
// service (windows/hnssim: HNS's schema, HNS's HRESULTs, the in-memory HNS's rules). The
// Windows node's lease carries VNI 4096 and the Overlay network's DR MAC; the network
// flannel.4096 gets one RemoteSubnetRoute per peer, following a peer that joins and one that
// leaves; a restart of weftd.exe adopts the network without a request to HNS. (host-gw
// cannot run under Wine 8: its iphlpapi lacks GetIpInterfaceEntry. The Linux nodes' view of
// a Windows peer is the same lease, tested in the netns cluster with Linux nodes.)
func TestWindowsNodeUnderWine(t *testing.T) {
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(repo, "tools", "wine", "setup.sh")).CombinedOutput(); err != nil {
		t.Skipf("Wine is not set up (tools/wine/setup.sh installs it as root): %v\n%s", err, out)
	}
	dir, err := os.MkdirTemp("", "weft-wine-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		}
	})
	exe := filepath.Join(dir, "weftd.exe")
	build := exec.Command("go", "build", "-o", exe, "./cmd/weftd")
	build.Dir = repo
	build.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building weftd.exe: %v\n%s", err, out)
	}

	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	const prefix = "/coreos.com/network"
	put := func(key, value string) {
		t.Helper()
		if _, err := cli.Put(t.Context(), prefix+key, value); err != nil {
			t.Fatal(err)
		}
	}
	peer := func(sn, ip, mac string) {
		put("/subnets/"+strings.ReplaceAll(sn, "/", "-"),
			fmt.Sprintf(`{"PublicIP":%q,"BackendType":"vxlan","BackendData":{"VNI":4096,"VtepMAC":%q}}`, ip, mac))
	}
	put("/config", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}`)
	peer("10.244.7.0/24", "192.0.2.17", "0e:00:00:00:00:07")

	addr := hostAddress(t)
	hns := hnstest.New(hnstest.Options{ManagementIP: addr, Blip: 300 * time.Millisecond})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sim := hnssim.New(hns, slog.New(slog.NewTextHandler(t.Output(), nil)))
	go func() { _ = sim.Serve(l) }()
	t.Cleanup(func() { l.Close() })

	n := &winNode{t: t, exe: exe, dir: dir,
		env: append(os.Environ(), "WINEPREFIX="+filepath.Join(repo, ".cache", "wine"), "WINEDEBUG=-all",
			"WINEDLLOVERRIDES=computenetwork,vmcompute=n", "WEFT_HNS_ADDR="+l.Addr().String()),
		args: []string{"--etcd-endpoints=" + srv.Endpoints()[0], "--iface=" + addr.String(),
			"--subnet-file=" + winPath(filepath.Join(dir, "subnet.env")), "--source-vip-file=",
			"--healthz-port=0"},
	}
	n.start()
	t.Cleanup(n.stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("weftd.exe's log:\n%s\nHNS:\n%s", n.log(), hns.Render())
		}
	})

	routes := func() string {
		net, err := hns.NetworkByName("flannel.4096")
		if err != nil {
			return "no network: " + err.Error()
		}
		var out []string
		for _, p := range net.PoliciesOf(windows.PolicyRemoteSubnetRoute) {
			var s windows.RemoteSubnetRouteSettings
			if err := p.Decode(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s via %s (%s, VSID %d)", s.DestinationPrefix, s.ProviderAddress, s.DistributedRouterMacAddress, s.IsolationID))
		}
		slices.Sort(out)
		return strings.Join(out, "; ")
	}
	wait := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for got := routes(); got != want; got = routes() {
			select {
			case <-n.exited:
				t.Fatalf("%s: weftd.exe exited", what)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: routes %q, want %q", what, got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	const r7 = "10.244.7.0/24 via 192.0.2.17 (0e:00:00:00:00:07, VSID 4096)"
	const r8 = "10.244.8.0/24 via 192.0.2.18 (0e:00:00:00:00:08, VSID 4096)"
	wait("the first peer", r7)

	// The lease: VNI 4096, the network's DR MAC as VtepMAC, the host's address, one write.
	network, err := hns.NetworkByName("flannel.4096")
	if err != nil {
		t.Fatal(err)
	}
	drMAC, err := network.DRMAC()
	if err != nil {
		t.Fatal(err)
	}
	env, err := subnet.ReadEnv(filepath.Join(dir, "subnet.env"))
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := env.LeaseSubnets()
	resp, err := cli.Get(t.Context(), prefix+"/subnets/"+subnet.Key(sn, netip.Prefix{}))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the Windows node's lease: %v %v", err, resp)
	}
	var lease struct {
		PublicIP    string
		BackendType string
		BackendData json.RawMessage
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &lease); err != nil {
		t.Fatalf("the Windows node's lease %s: %v", resp.Kvs[0].Value, err)
	}
	data, err := weftbackend.DecodeVXLANData(lease.BackendData)
	if err != nil {
		t.Fatalf("the Windows node's backend data %s: %v", lease.BackendData, err)
	}
	if lease.PublicIP != addr.String() || lease.BackendType != "vxlan" || data.VNI != 4096 || data.VtepMAC != drMAC {
		t.Errorf("the Windows node's lease %s, want public IP %s, VNI 4096, VtepMAC %s (the DR MAC)", resp.Kvs[0].Value, addr, drMAC)
	}
	if resp.Kvs[0].Version != 1 {
		t.Errorf("the lease was written %d times, want once", resp.Kvs[0].Version)
	}
	if sub := network.StaticSubnet(); sub == nil || sub.IPAddressPrefix != sn.String() {
		t.Errorf("network subnet %+v, lease %s", sub, sn)
	}

	peer("10.244.8.0/24", "192.0.2.18", "0e:00:00:00:00:08")
	wait("a peer joins", r7+"; "+r8)
	if _, err := cli.Delete(t.Context(), prefix+"/subnets/10.244.7.0-24"); err != nil {
		t.Fatal(err)
	}
	wait("a peer leaves", r8)

	// A restart adopts the network: no request changes HNS.
	n.stop()
	hns.ResetRequests()
	calls := func() int { return hns.Calls()["Networks"] }
	before := calls()
	n.start()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for calls() < before+3 { // lookups of the network by the restarted weftd.exe: it has converged
		select {
		case <-ctx.Done():
			t.Fatalf("the restarted weftd.exe did not look at HNS: %v", ctx.Err())
		case <-n.exited:
			t.Fatal("the restarted weftd.exe exited")
		case <-time.After(100 * time.Millisecond):
		}
	}
	time.Sleep(time.Second) // its first convergence, had it anything to write
	if r := hns.Requests(); len(r) != 0 {
		t.Errorf("the restart sent HNS %d requests, want none: %+v", len(r), r)
	}
	if after, err := hns.NetworkByName("flannel.4096"); err != nil || after.ID != network.ID {
		t.Errorf("network after the restart: %v %v, want %s adopted", after, err, network.ID)
	}
	if got := routes(); got != r8 {
		t.Errorf("routes after the restart: %q, want %q", got, r8)
	}
}
