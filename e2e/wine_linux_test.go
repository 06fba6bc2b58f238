package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	weftbackend "github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnssim"
	"github.com/weftnet/weft/windows/hnstest"
)

// wine64 is Debian's Wine loader (tools/wine/setup.sh installs it).
const wine64 = "/usr/lib/wine/wine64"

// winPath is a Linux path as a Windows program under Wine names it (drive Z: is /).
func winPath(p string) string { return `Z:` + strings.ReplaceAll(p, "/", `\`) }

// windowsConf is flannel's vxlan config for a cluster with Windows nodes, on every node.
const windowsConf = `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}`

// windowsDevice is the Linux nodes' VXLAN device of VNI 4096.
const windowsDevice = "flannel.4096"

// winePrefix makes a Wine prefix of the node's own from the one tools/wine/setup.sh made
// (hard links: no copy of its 700 MB; so it is made next to it, on the same file system), so
// that the node's wineserver, which makes the sockets of its programs, starts in the node's
// network namespace. It is removed when the test ends.
func winePrefix(t *testing.T, repo string) string {
	t.Helper()
	src := filepath.Join(repo, ".cache", "wine")
	dst, err := os.MkdirTemp(filepath.Join(repo, ".cache"), "wine-node-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dst) })
	for _, args := range [][]string{
		{"cp", "-al", filepath.Join(src, "drive_c"), dst},
		{"cp", "-a", filepath.Join(src, "dosdevices"), dst},
		// .update-timestamp too: without it Wine updates the prefix first (wineboot, ~12 s).
		{"sh", "-c", "cp -p " + src + "/*.reg " + src + "/.update-timestamp " + dst},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	return dst
}

// buildWindowsWeftd is weftd.exe (GOOS=windows), built once per test run with the other
// Windows programs (buildWindowsPrograms).
func buildWindowsWeftd(t *testing.T, repo string) string {
	t.Helper()
	return filepath.Join(buildWindowsPrograms(t, repo), "weftd.exe")
}

// wineWeftd is weftd.exe on a Windows node under Wine: the simulated HNS service of an HNS
// listening on the node's loopback, a Wine prefix of the node's own, and the command line
// that runs weftd.exe there with the simulated DLLs overrides lists (WINEDLLOVERRIDES).
type wineWeftd struct {
	srv  *hnssim.Server
	argv []string
}

func newWineWeftd(t *testing.T, repo, exe string, win *cluster.Node, hns *hnstest.HNS, overrides string, args ...string) *wineWeftd {
	t.Helper()
	l, err := win.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := hnssim.New(hns, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { l.Close() })
	prefix := winePrefix(t, repo)
	t.Cleanup(func() { // the node's wineserver, before the cluster's namespaces go
		cmd := exec.Command("/usr/lib/wine/wineserver", "-k")
		cmd.Env = append(os.Environ(), "WINEPREFIX="+prefix)
		_ = cmd.Run()
	})
	// /readyz on the node's 127.0.0.1:8285, as the Linux nodes'.
	argv := append([]string{"env", "WINEPREFIX=" + prefix, "WINEDEBUG=-all", "WINEDLLOVERRIDES=" + overrides,
		"WEFT_HNS_ADDR=" + l.Addr().String(), wine64, exe,
		"--etcd-endpoints=" + cluster.EtcdURL, "--iface=" + win.IP.String(),
		"--subnet-file=" + winPath(win.SubnetFile)}, args...)
	return &wineWeftd{srv: srv, argv: argv}
}

// start starts weftd.exe and waits until it is ready.
func (w *wineWeftd) start(t *testing.T, win *cluster.Node) {
	t.Helper()
	if err := win.StartDaemon(w.argv...); err != nil {
		t.Fatal(err)
	}
	if err := win.WaitReady(readyTimeout); err != nil {
		t.Fatal(err)
	}
}

// refused fails the test for every call HNS refused as a request it does not take (its
// JSON, an argument, a call it lacks): the plane would have logged and retried, not stopped.
func (w *wineWeftd) refused(t *testing.T) {
	t.Helper()
	for _, call := range w.srv.Calls() {
		switch call.HResult {
		case windows.HCNInvalidJSON, windows.InvalidArg, windows.NotImpl:
			t.Errorf("HNS refused %s %s %s: %v", call.Name, call.Object, call.Body, call.HResult)
		}
	}
}

// TestWindowsNodeUnderWine: in the netns cluster, beside a Linux node running weftd and one
// running flanneld, a Windows node runs the real weftd.exe (GOOS=windows) under Wine against
// the same etcd. Its HNS calls go through hcsshim's hcn package and its generated syscalls
// into our simulated computenetwork.dll and vmcompute.dll, which hand them to the simulated
// HNS service (windows/hnssim: HNS's schema, HNS's HRESULTs, the in-memory HNS's rules),
// listening on the node's loopback. Checked: the Windows node's lease (VNI 4096, its address,
// the Overlay network's DR MAC as VtepMAC, written once); every Linux node's route, neighbour
// and FDB entry toward it; the network flannel.4096 with the node's subnet and one
// RemoteSubnetRoute per Linux peer, following a peer that joins and one that leaves; a
// restart of weftd.exe adopting the network: once ready again it has asked HNS for no change
// (no create, modify or delete call, not even a refused one). (No packet crosses to
// the Windows node: it has no data plane. TestWindowsHostGWUnderWine runs host-gw.)
func TestWindowsNodeUnderWine(t *testing.T) {
	bins := needBinaries(t)
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(repo, "tools", "wine", "setup.sh")).CombinedOutput(); err != nil {
		t.Skipf("Wine is not set up (tools/wine/setup.sh installs it as root): %v\n%s", err, out)
	}
	c, err := cluster.New(t, cluster.Options{NetConf: windowsConf, CNIBin: bins.cniBin, WeftCNI: bins.weftCNI})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpCluster(t, c)
		}
	})
	exe := buildWindowsWeftd(t, repo)

	addNode := func(name string) *cluster.Node {
		t.Helper()
		n, err := c.AddNode(name)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	linux := addNode("n1")
	if err := linux.StartDaemon(append([]string{bins.weftd}, linux.WeftdArgs()...)...); err != nil {
		t.Fatal(err)
	}
	nodes := []*cluster.Node{linux}
	if flanneld, err := cluster.PrepareFlanneld(repo); err == nil && cluster.PrepareFlanneldDeps(repo) == nil {
		fl := addNode("n2")
		if err := fl.StartDaemon(append([]string{flanneld}, fl.FlanneldArgs()...)...); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, fl)
	} else {
		t.Logf("no flanneld node: flanneld cannot be built here (%v)", err)
	}
	for _, n := range nodes {
		if err := n.WaitReady(readyTimeout); err != nil {
			t.Fatal(err)
		}
	}

	win := addNode("w3")
	hns := hnstest.New(hnstest.Options{ManagementIP: win.IP, Blip: 300 * time.Millisecond})
	w := newWineWeftd(t, repo, exe, win, hns, "computenetwork,vmcompute=n", "--source-vip-file=")
	srv := w.srv
	w.start(t, win)

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
	// want is the RemoteSubnetRoute of every Linux node as its lease says.
	want := func(ns []*cluster.Node) string {
		t.Helper()
		var out []string
		for _, n := range ns {
			env, err := subnet.ReadEnv(n.SubnetFile)
			if err != nil {
				t.Fatal(err)
			}
			sn, _ := env.LeaseSubnets()
			mac := leaseMAC(t, c, sn)
			out = append(out, fmt.Sprintf("%s via %s (%s, VSID 4096)", sn, n.IP, mac))
		}
		slices.Sort(out)
		return strings.Join(out, "; ")
	}
	wait := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for got := routes(); got != want; got = routes() {
			if !win.Running() {
				t.Fatalf("%s: weftd.exe exited: %v\n%s", what, win.ExitState(), win.LogTail(30))
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: routes %q, want %q\nHNS:\n%s", what, got, want, hns.Render())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	wait("the Linux nodes", want(nodes))

	// The Windows node's lease: VNI 4096, its address, the DR MAC as VtepMAC, one write.
	network, err := hns.NetworkByName("flannel.4096")
	if err != nil {
		t.Fatal(err)
	}
	drMAC, err := network.DRMAC()
	if err != nil {
		t.Fatal(err)
	}
	env, err := subnet.ReadEnv(win.SubnetFile)
	if err != nil {
		t.Fatal(err)
	}
	winSN, _ := env.LeaseSubnets()
	value, version := leaseValue(t, c, winSN)
	var lease struct {
		PublicIP    string
		BackendType string
		BackendData json.RawMessage
	}
	if err := json.Unmarshal(value, &lease); err != nil {
		t.Fatalf("the Windows node's lease %s: %v", value, err)
	}
	data, err := weftbackend.DecodeVXLANData(lease.BackendData)
	if err != nil {
		t.Fatalf("the Windows node's backend data %s: %v", lease.BackendData, err)
	}
	if lease.PublicIP != win.IP.String() || lease.BackendType != "vxlan" || data.VNI != 4096 || data.VtepMAC != drMAC {
		t.Errorf("the Windows node's lease %s, want public IP %s, VNI 4096, VtepMAC %s (the DR MAC)", value, win.IP, drMAC)
	}
	if version != 1 {
		t.Errorf("the Windows node's lease was written %d times, want once", version)
	}
	if sub := network.StaticSubnet(); sub == nil || sub.IPAddressPrefix != winSN.String() {
		t.Errorf("network subnet %+v, lease %s", sub, winSN)
	}

	// Every Linux node, weftd's and flanneld's, reaches the Windows node's subnet through its
	// VXLAN device (VNI 4096, port 4789: the net-conf they share with it): a route, a
	// neighbour and an FDB entry with the DR MAC.
	mac := strings.ToLower(drMAC.String())
	for _, n := range nodes {
		deadline := time.Now().Add(convergeTimeout)
		for {
			route, _ := n.RouteTo(winSN)
			neigh := strings.TrimSpace(nodeExec(t, n, "ip", "neigh", "show", winSN.Addr().String(), "dev", windowsDevice))
			fdb := nodeExec(t, n, "bridge", "fdb", "show", "dev", windowsDevice)
			dev := nodeExec(t, n, "ip", "-d", "link", "show", windowsDevice)
			if strings.Contains(route, windowsDevice) && strings.Contains(neigh, mac) && strings.Contains(fdb, mac+" dst "+win.IP.String()) &&
				strings.Contains(dev, "vxlan id 4096 ") && strings.Contains(dev, "dstport 4789 ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s toward the Windows node: route %q neighbour %q fdb %q; want them through %s (VNI 4096, port 4789: %q) with %s",
					n.Name, route, neigh, fdb, windowsDevice, dev, mac)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// A Linux node joins, one leaves: the routes follow.
	late := addNode("n4")
	if err := late.StartDaemon(append([]string{bins.weftd}, late.WeftdArgs()...)...); err != nil {
		t.Fatal(err)
	}
	if err := late.WaitReady(readyTimeout); err != nil {
		t.Fatal(err)
	}
	wait("a node joins", want(append(slices.Clone(nodes), late)))
	if _, err := late.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	lateEnv, err := subnet.ReadEnv(late.SubnetFile)
	if err != nil {
		t.Fatal(err)
	}
	lateSN, _ := lateEnv.LeaseSubnets()
	deleteLease(t, c, lateSN)
	wait("a node leaves", want(nodes))

	// A restart adopts the network: weftd.exe asks HNS for no change at all (no create,
	// delete or policy request, not even one HNS refuses), as the calls hcn made show.
	if _, err := win.Stop(syscall.SIGKILL); err == nil {
		t.Log("weftd.exe killed")
	}
	w.refused(t)
	hns.ResetRequests()
	srv.ResetCalls()
	w.start(t, win) // ready: converged once, anything to write is written
	if n := lookups(srv.Calls(), network.ID); n == 0 {
		t.Fatalf("the restarted weftd.exe is ready without having read its network from HNS: %+v", srv.Calls())
	}
	for _, call := range srv.Calls() {
		if call.Mutates() {
			t.Errorf("the restart asked HNS for a change: %s %s %s (%v)", call.Name, call.Object, call.Body, call.HResult)
		}
	}
	if r := hns.Requests(); len(r) != 0 {
		t.Errorf("the restart changed HNS with %d requests, want none: %+v", len(r), r)
	}
	if after, err := hns.NetworkByName("flannel.4096"); err != nil || after.ID != network.ID {
		t.Errorf("network after the restart: %v %v, want %s adopted", after, err, network.ID)
	}
	if got, w := routes(), want(nodes); got != w {
		t.Errorf("routes after the restart: %q, want %q", got, w)
	}
}

// hostGWConf is flannel's host-gw config, on every node.
const hostGWConf = `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`

// TestWindowsHostGWUnderWine: host-gw on the Windows node, weftd.exe under Wine beside a
// Linux node running weftd and one running flanneld. weftd.exe's HNS calls go to the
// simulated HNS service as in TestWindowsNodeUnderWine, and its IP Helper calls too, through
// tools/wine's iphlpapi.dll (Wine 8's lacks GetIpInterfaceEntry and the route writes): they
// read and change the node's simulated host, the one the simulated HNS moves the node's
// address on when it makes the L2Bridge network (a vSwitch vNIC, "vEthernet (eth0)") and
// gives a vNIC to the host endpoint it attaches. Checked: weftd.exe converges (ready); its
// lease (host-gw, its address, written once); the network cbr0 (L2Bridge, the lease's
// subnet, its gateway; made once, never deleted), its host endpoint cbr0_ep at .2 attached
// through HNS v1's HostAttach(1); on the host, forwarding on both vNICs and a route to each
// Linux node's subnet via its address out of the vSwitch vNIC; every Linux node's route to
// the Windows node's subnet via its address. A restart of weftd.exe re-creates nothing:
// no HNS change asked (not even a refused one), no host route or forwarding written.
func TestWindowsHostGWUnderWine(t *testing.T) {
	bins := needBinaries(t)
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(repo, "tools", "wine", "setup.sh")).CombinedOutput(); err != nil {
		t.Skipf("Wine is not set up (tools/wine/setup.sh installs it as root): %v\n%s", err, out)
	}
	c, err := cluster.New(t, cluster.Options{NetConf: hostGWConf, CNIBin: bins.cniBin, WeftCNI: bins.weftCNI})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpCluster(t, c)
		}
	})
	exe := buildWindowsWeftd(t, repo)
	addNode := func(name string) *cluster.Node {
		t.Helper()
		n, err := c.AddNode(name)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	linux := addNode("n1")
	if err := linux.StartDaemon(append([]string{bins.weftd}, linux.WeftdArgs()...)...); err != nil {
		t.Fatal(err)
	}
	nodes := []*cluster.Node{linux}
	if flanneld, err := cluster.PrepareFlanneld(repo); err == nil && cluster.PrepareFlanneldDeps(repo) == nil {
		fl := addNode("n2")
		if err := fl.StartDaemon(append([]string{flanneld}, fl.FlanneldArgs()...)...); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, fl)
	} else {
		t.Logf("no flanneld node: flanneld cannot be built here (%v)", err)
	}
	for _, n := range nodes {
		if err := n.WaitReady(readyTimeout); err != nil {
			t.Fatal(err)
		}
	}

	// The Windows node's host before HNS touched it: its adapter, with the index and name
	// Wine gives the namespace's eth0 (Go's net package names interfaces through Wine's own
	// iphlpapi), and the loopback, each with its route.
	win := addNode("w3")
	var eth0 uint32
	if _, err := fmt.Sscanf(nodeExec(t, win, "cat", "/sys/class/net/eth0/ifindex"), "%d", &eth0); err != nil {
		t.Fatal(err)
	}
	pfx := netip.MustParsePrefix
	host := hnstest.NewHost(
		windows.Interface{Index: 1, Name: "lo", Prefixes: []netip.Prefix{pfx("127.0.0.1/8")}},
		windows.Interface{Index: eth0, Name: "eth0", Prefixes: []netip.Prefix{netip.PrefixFrom(win.IP, 24)}})
	for _, r := range []windows.HostRoute{
		{Dst: pfx("127.0.0.0/8"), NextHop: netip.IPv4Unspecified(), IfIndex: 1, Metric: 256},
		{Dst: pfx("0.0.0.0/0"), NextHop: netip.MustParseAddr(cluster.UnderlayGateway), IfIndex: eth0, Metric: 256},
	} {
		if err := host.AddRoute(r); err != nil {
			t.Fatal(err)
		}
	}
	hns := hnstest.New(hnstest.Options{ManagementIP: win.IP, Blip: 300 * time.Millisecond, Host: host})
	w := newWineWeftd(t, repo, exe, win, hns, "computenetwork,vmcompute,iphlpapi=n", "--source-vip-file=")
	w.start(t, win)

	// The lease: host-gw, the node's address, one write.
	env, err := subnet.ReadEnv(win.SubnetFile)
	if err != nil {
		t.Fatal(err)
	}
	winSN, _ := env.LeaseSubnets()
	value, version := leaseValue(t, c, winSN)
	var lease struct{ PublicIP, BackendType string }
	if err := json.Unmarshal(value, &lease); err != nil || lease.PublicIP != win.IP.String() || lease.BackendType != "host-gw" {
		t.Errorf("the Windows node's lease %s (%v), want host-gw with public IP %s", value, err, win.IP)
	}
	if version != 1 {
		t.Errorf("the Windows node's lease was written %d times, want once", version)
	}

	// The L2Bridge network and its host endpoint, attached as flanneld attaches it.
	network, err := hns.NetworkByName("cbr0")
	if err != nil {
		t.Fatal(err)
	}
	gw := winSN.Addr().Next()
	if sub := network.StaticSubnet(); network.Type != windows.NetworkL2Bridge || sub == nil || sub.IPAddressPrefix != winSN.String() ||
		len(sub.Routes) != 1 || sub.Routes[0].NextHop != gw.String() {
		t.Errorf("network cbr0: %s %+v, want L2Bridge of %s with its default route via %s", network.Type, sub, winSN, gw)
	}
	eps, err := hns.NetworkEndpoints(network.ID)
	if err != nil || len(eps) != 1 || eps[0].Name != "cbr0_ep" || fmt.Sprint(eps[0].IPs()) != fmt.Sprintf("[%s]", gw.Next()) || eps[0].HostComputeNamespace == "" {
		t.Fatalf("endpoints of cbr0: %+v (%v), want cbr0_ep at %s attached to the host", eps, err, gw.Next())
	}
	creates, attach := 0, ""
	for _, call := range w.srv.Calls() {
		switch {
		case call.Name == "HcnCreateNetwork" && call.HResult == 0:
			creates++
		case call.Name == "HcnDeleteNetwork":
			t.Errorf("weftd.exe deleted a network: %+v", call)
		case call.Name == "HNSCall" && strings.HasSuffix(strings.ToLower(call.ID), "/attach"):
			attach = call.Method + " " + call.ID + " " + call.Body
		}
	}
	if want := "POST /endpoints/" + eps[0].ID + "/attach " + `{"SystemType":"Host","CompartmentId":1}`; creates != 1 || !strings.EqualFold(attach, want) {
		t.Errorf("weftd.exe made %d networks (want 1) and attached the host endpoint with %q, want %q", creates, attach, want)
	}
	w.refused(t)

	// The host: the node's address on the vSwitch vNIC, the host endpoint's vNIC, forwarding
	// on both, a route to each Linux node's subnet via its address out of the vSwitch vNIC.
	ifs, _ := host.Interfaces()
	vnics := map[string]windows.Interface{}
	for _, i := range ifs {
		vnics[i.Name] = i
	}
	vswitch, hostEP := vnics["vEthernet (eth0)"], vnics["vEthernet (cbr0_ep)"]
	if !slices.Contains(vswitch.Prefixes, netip.PrefixFrom(win.IP, 24)) || !vswitch.Forwarding ||
		!slices.Contains(hostEP.Prefixes, netip.PrefixFrom(gw.Next(), winSN.Bits())) || !hostEP.Forwarding {
		t.Errorf("host interfaces %+v: want %s on a forwarding vEthernet (eth0) and %s on a forwarding vEthernet (cbr0_ep)", ifs, win.IP, gw.Next())
	}
	peerRoutes := func() []string {
		routes, _ := host.Routes()
		var out []string
		for _, r := range routes {
			if pfx("10.244.0.0/16").Contains(r.Dst.Addr()) {
				out = append(out, fmt.Sprintf("%s via %s if %d proto %d", r.Dst, r.NextHop, r.IfIndex, r.Protocol))
			}
		}
		slices.Sort(out)
		return out
	}
	var want []string
	for _, n := range nodes {
		e, err := subnet.ReadEnv(n.SubnetFile)
		if err != nil {
			t.Fatal(err)
		}
		sn, _ := e.LeaseSubnets()
		want = append(want, fmt.Sprintf("%s via %s if %d proto %d", sn, n.IP, vswitch.Index, windows.ProtoNetMgmt))
	}
	slices.Sort(want)
	for deadline := time.Now().Add(convergeTimeout); !slices.Equal(peerRoutes(), want); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the Windows node's routes %q, want %q\n%s", peerRoutes(), want, host.Render())
		}
	}

	// Every Linux node routes the Windows node's subnet to its address.
	for _, n := range nodes {
		deadline := time.Now().Add(convergeTimeout)
		for {
			route, _ := n.RouteTo(winSN)
			if strings.Contains(route, "via "+win.IP.String()+" dev eth0") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s's route to the Windows node's %s: %q, want via %s dev eth0", n.Name, winSN, route, win.IP)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// A restart re-creates nothing: no change asked of HNS, none written on the host.
	if _, err := win.Stop(syscall.SIGKILL); err == nil {
		t.Log("weftd.exe killed")
	}
	before := hns.Render() + host.Render()
	hns.ResetRequests()
	w.srv.ResetCalls()
	host.ResetCalls()
	w.start(t, win)
	if n := lookups(w.srv.Calls(), network.ID); n == 0 {
		t.Fatalf("the restarted weftd.exe is ready without having read its network from HNS: %+v", w.srv.Calls())
	}
	for _, call := range w.srv.Calls() {
		if call.Mutates() || call.Name == "HNSCall" && call.Method != "GET" {
			t.Errorf("the restart asked HNS for a change: %s %s %s (%v)", call.Name, call.ID, call.Body, call.HResult)
		}
	}
	if r := hns.Requests(); len(r) != 0 {
		t.Errorf("the restart changed HNS with %d requests, want none: %+v", len(r), r)
	}
	for _, call := range []string{"AddRoute", "DeleteRoute", "SetForwarding"} {
		if n := host.Calls()[call]; n != 0 {
			t.Errorf("the restart wrote the host: %s %d times", call, n)
		}
	}
	if after := hns.Render() + host.Render(); after != before {
		t.Errorf("the restart changed HNS or the host:\n%s\nwas\n%s", after, before)
	}
}

// lookups counts the times weftd.exe read the network id from HNS (hcn's query of its
// properties).
func lookups(calls []hnssim.Call, id string) int {
	n := 0
	for _, c := range calls {
		if c.Name == "HcnQueryNetworkProperties" && strings.EqualFold(c.Object, id) {
			n++
		}
	}
	return n
}

// leaseValue returns the value of the lease of sn in the cluster's etcd and how many times
// it was written.
func leaseValue(t *testing.T, c *cluster.Cluster, sn netip.Prefix) ([]byte, int64) {
	t.Helper()
	resp, err := c.Etcd().Get(t.Context(), c.EtcdPrefix()+"/subnets/"+subnet.Key(sn, netip.Prefix{}))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the lease of %s: %v %v", sn, err, resp)
	}
	return resp.Kvs[0].Value, resp.Kvs[0].Version
}

// leaseMAC is the VtepMAC of the lease of sn, as HNS writes a DR MAC's peer: lower case.
func leaseMAC(t *testing.T, c *cluster.Cluster, sn netip.Prefix) string {
	t.Helper()
	value, _ := leaseValue(t, c, sn)
	var l struct{ BackendData json.RawMessage }
	if err := json.Unmarshal(value, &l); err != nil {
		t.Fatal(err)
	}
	d, err := weftbackend.DecodeVXLANData(l.BackendData)
	if err != nil {
		t.Fatal(err)
	}
	return d.VtepMAC.String()
}

// deleteLease removes the lease of sn, as its expiry would.
func deleteLease(t *testing.T, c *cluster.Cluster, sn netip.Prefix) {
	t.Helper()
	if _, err := c.Etcd().Delete(t.Context(), c.EtcdPrefix()+"/subnets/"+subnet.Key(sn, netip.Prefix{})); err != nil {
		t.Fatal(err)
	}
}
