package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	weftbackend "github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/e2e/winnode"
	"github.com/weftnet/weft/internal/hnssim"
	"github.com/weftnet/weft/internal/winetest"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

// windowsConf is flannel's vxlan config for a cluster with Windows nodes, on every node.
const windowsConf = `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}`

// windowsDevice is the Linux nodes' VXLAN device of VNI 4096.
const windowsDevice = "flannel.4096"

// hostGWConf is flannel's host-gw config, on every node.
const hostGWConf = `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`

// needWine returns the cluster's binaries and the repository, or skips the test when this
// machine cannot run a cluster or Wine.
func needWine(t *testing.T) (binaries, string) {
	t.Helper()
	bins := needBinaries(t)
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	winetest.Need(t, repo)
	return bins, repo
}

// newWineCluster makes a cluster of netConf whose nodes run the daemons the test starts
// (no Options.Weftd: the Windows node's is no Linux weftd), dumped if the test fails.
func newWineCluster(t *testing.T, bins binaries, netConf string) *cluster.Cluster {
	t.Helper()
	c, err := cluster.New(t, cluster.Options{NetConf: netConf, CNIBin: bins.cniBin, WeftCNI: bins.weftCNI})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpCluster(t, c)
		}
	})
	return c
}

// startLinuxPeers adds a node running weftd for each of names and, if flanneldName is not
// empty and the real flanneld can be built here, one running flanneld, and waits until they
// are ready.
func startLinuxPeers(t *testing.T, c *cluster.Cluster, repo, weftd string, names []string, flanneldName string) []*cluster.Node {
	t.Helper()
	var nodes []*cluster.Node
	start := func(name string, argv func(n *cluster.Node) []string) {
		t.Helper()
		n, err := c.AddNode(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.StartDaemon(argv(n)...); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	for _, name := range names {
		start(name, func(n *cluster.Node) []string { return append([]string{weftd}, n.WeftdArgs()...) })
	}
	if flanneldName != "" {
		if flanneld, err := cluster.PrepareFlanneld(repo); err == nil && cluster.PrepareFlanneldDeps(repo) == nil {
			start(flanneldName, func(n *cluster.Node) []string { return append([]string{flanneld}, n.FlanneldArgs()...) })
		} else {
			t.Logf("no flanneld node: flanneld cannot be built here (%v)", err)
		}
	}
	// They start together; waiting in turn costs no more than the slowest.
	for _, n := range nodes {
		if err := n.WaitReady(readyTimeout); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

// buildWindowsWeftd is weftd.exe (GOOS=windows), built once per test run with the other
// Windows programs (buildWindowsPrograms).
func buildWindowsWeftd(t *testing.T, repo string) string {
	t.Helper()
	return filepath.Join(buildWindowsPrograms(t, repo), "weftd.exe")
}

// wineNode is the Windows node of a test (e2e/winnode) with the test's checks.
type wineNode struct {
	*winnode.Node
	t *testing.T
}

// newWineNode adds node name to c with a Wine prefix of its own; ServeHNS gives it an HNS.
func newWineNode(t *testing.T, c *cluster.Cluster, repo, name string) *wineNode {
	t.Helper()
	n, err := c.AddNode(name)
	if err != nil {
		t.Fatal(err)
	}
	// Made after the cluster: its wineserver is stopped before the namespaces go.
	return &wineNode{Node: winnode.Wrap(t, n, repo), t: t}
}

// flags are the flags flanneld and weftd share: etcd, the node's subnet.env and, with
// iface, the node's address as the interface to use.
func (w *wineNode) flags(iface bool) []string {
	f := []string{"--etcd-endpoints=" + cluster.EtcdURL, "--subnet-file=" + w.WinSubnetFile}
	if iface {
		f = append(f, "--iface="+w.IP.String())
	}
	return f
}

// weftdArgv is the command line of weftd.exe on the node, serving /readyz on the node's
// 127.0.0.1:8285, as the Linux nodes' do.
func (w *wineNode) weftdArgv(exe string) []string {
	return w.Wine(exe, append(w.flags(true), "--source-vip-file=")...)
}

// flanneldArgv is the command line of flanneld.exe on the node, serving /readyz where
// WaitReady looks, as weftd.exe does by default; without iface it finds its interface itself.
func (w *wineNode) flanneldArgv(exe string, iface bool) []string {
	return w.Wine(exe, append(w.flags(iface), "--healthz-ip=127.0.0.1", fmt.Sprintf("--healthz-port=%d", cluster.HealthzPort))...)
}

// start runs argv as the node's daemon and waits until it is ready.
func (w *wineNode) start(argv []string) {
	w.t.Helper()
	if err := w.StartDaemon(argv...); err != nil {
		w.t.Fatal(err)
	}
	if err := w.WaitReady(readyTimeout); err != nil {
		w.t.Fatal(err)
	}
}

// stop kills the node's daemon, so that the next one finds HNS as this one left it, with
// nothing undone on the way out.
func (w *wineNode) stop() {
	w.t.Helper()
	if _, err := w.Stop(syscall.SIGKILL); err != nil && w.Running() {
		w.t.Fatal(err)
	}
}

// refused fails the test for every call HNS refused as a request it does not take (its
// JSON, an argument, a call it lacks): the plane would have logged and retried, not stopped.
func (w *wineNode) refused() {
	w.t.Helper()
	for _, r := range w.Refused() {
		w.t.Error(r)
	}
}

// restartAdopts kills the node's daemon and starts argv, which must adopt what the last one
// left: once ready again it has read the network networkID from HNS and asked HNS for no
// change at all (no create, modify or delete, not even one HNS refuses; no HNS v1 request
// but a GET), as the calls hcn made show, and written nothing on the host; HNS and the host
// are as they were.
func (w *wineNode) restartAdopts(argv []string, networkID string) {
	w.t.Helper()
	w.stop()
	state := func() string {
		if w.Host == nil {
			return w.HNS.Render()
		}
		return w.HNS.Render() + w.Host.Render()
	}
	before := state()
	w.HNS.ResetRequests()
	w.Server.ResetCalls()
	if w.Host != nil {
		w.Host.ResetCalls()
	}
	w.start(argv) // ready: converged once, anything to write is written
	if n := lookups(w.Server.Calls(), networkID); n == 0 {
		w.t.Fatalf("the restarted daemon is ready without having read its network from HNS: %+v", w.Server.Calls())
	}
	for _, call := range w.Server.Calls() {
		if call.Mutates() || call.Name == "HNSCall" && call.Method != "GET" {
			w.t.Errorf("the restart asked HNS for a change: %s %s %s %s (%v)", call.Name, call.ID, call.Object, call.Body, call.HResult)
		}
	}
	if r := w.HNS.Requests(); len(r) != 0 {
		w.t.Errorf("the restart changed HNS with %d requests, want none: %+v", len(r), r)
	}
	if w.Host != nil {
		for _, call := range []string{"AddRoute", "DeleteRoute", "SetForwarding"} {
			if n := w.Host.Calls()[call]; n != 0 {
				w.t.Errorf("the restart wrote the host: %s %d times", call, n)
			}
		}
	}
	if after := state(); after != before {
		w.t.Errorf("the restart changed HNS or the host:\n%s\nwas\n%s", after, before)
	}
}

// rsrs renders the RemoteSubnetRoute policies of the node's network flannel.4096, sorted.
func (w *wineNode) rsrs() string {
	net, err := w.HNS.NetworkByName("flannel.4096")
	if err != nil {
		return "no network: " + err.Error()
	}
	var out []string
	for _, p := range net.PoliciesOf(windows.PolicyRemoteSubnetRoute) {
		var s windows.RemoteSubnetRouteSettings
		if err := p.Decode(&s); err != nil {
			w.t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s via %s (%s, VSID %d)", s.DestinationPrefix, s.ProviderAddress, s.DistributedRouterMacAddress, s.IsolationID))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// wantRSRs is the RemoteSubnetRoute of every node of ns as its lease says.
func wantRSRs(t *testing.T, c *cluster.Cluster, ns []*cluster.Node) string {
	t.Helper()
	var out []string
	for _, n := range ns {
		sn, err := n.Subnet()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s via %s (%s, VSID 4096)", sn, n.IP, leaseMAC(t, c, sn)))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// waitRSRs waits until the node's network holds exactly the RemoteSubnetRoutes of peers.
func (w *wineNode) waitRSRs(c *cluster.Cluster, what string, peers []*cluster.Node) {
	w.t.Helper()
	want := wantRSRs(w.t, c, peers)
	deadline := time.Now().Add(60 * time.Second)
	for got := w.rsrs(); got != want; got = w.rsrs() {
		if !w.Running() {
			w.t.Fatalf("%s: the daemon exited: %v\n%s", what, w.ExitState(), w.LogTail(30))
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s: routes %q, want %q\nHNS:\n%s\ncalls:\n%s", what, got, want, w.HNS.Render(), renderCalls(w.Server.Calls()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// winState is what a Windows node must keep across a change of daemon.
type winState struct {
	networkID string
	drMAC     string
	subnet    netip.Prefix
	vtepMAC   string // the lease's
}

// state reads the node's network from HNS and its lease from etcd, and checks that the lease
// is the node's: its public IP, vxlan with VNI 4096, the DR MAC as VtepMAC.
func (w *wineNode) state(c *cluster.Cluster) winState {
	w.t.Helper()
	n, err := w.HNS.NetworkByName("flannel.4096")
	if err != nil {
		w.t.Fatal(err)
	}
	drMAC, err := n.DRMAC()
	if err != nil {
		w.t.Fatal(err)
	}
	sn, err := w.Subnet()
	if err != nil {
		w.t.Fatal(err)
	}
	if sub := n.StaticSubnet(); sub == nil || sub.IPAddressPrefix != sn.String() {
		w.t.Errorf("network subnet %+v, subnet.env %s", sub, sn)
	}
	value, _ := leaseValue(w.t, c, sn)
	var l struct {
		PublicIP    string
		BackendType string
		BackendData json.RawMessage
	}
	if err := json.Unmarshal(value, &l); err != nil {
		w.t.Fatalf("the Windows node's lease %s: %v", value, err)
	}
	data, err := weftbackend.DecodeVXLANData(l.BackendData)
	if err != nil {
		w.t.Fatalf("the Windows node's backend data %s: %v", l.BackendData, err)
	}
	if l.PublicIP != w.IP.String() || l.BackendType != "vxlan" || data.VNI != 4096 || data.VtepMAC != drMAC {
		w.t.Errorf("the Windows node's lease %s, want public IP %s, VNI 4096, VtepMAC %s (the DR MAC)", value, w.IP, drMAC)
	}
	return winState{networkID: n.ID, drMAC: drMAC.String(), subnet: sn, vtepMAC: data.VtepMAC.String()}
}

// waitToward waits until every node of ns reaches the Windows node's subnet through its
// VXLAN device (VNI 4096, port 4789): a route, a neighbour and an FDB entry with the DR MAC.
func waitToward(t *testing.T, ns []*cluster.Node, win *wineNode, st winState) {
	t.Helper()
	mac := strings.ToLower(st.drMAC)
	for _, n := range ns {
		deadline := time.Now().Add(convergeTimeout)
		for {
			route, _ := n.RouteTo(st.subnet)
			neigh := strings.TrimSpace(nodeExec(t, n, "ip", "neigh", "show", st.subnet.Addr().String(), "dev", windowsDevice))
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
}

// windowsHost is the Windows node's host before HNS touches it (winnode.HostOf).
func windowsHost(t *testing.T, n *cluster.Node) *hnstest.Host {
	t.Helper()
	host, err := winnode.HostOf(n)
	if err != nil {
		t.Fatal(err)
	}
	return host
}

// waitRouteVia waits until every node of ns routes sn via the address via on its eth0, as
// host-gw routes a Windows node's subnet.
func waitRouteVia(t *testing.T, ns []*cluster.Node, sn netip.Prefix, via netip.Addr) {
	t.Helper()
	for _, n := range ns {
		deadline := time.Now().Add(convergeTimeout)
		for route, _ := n.RouteTo(sn); !strings.Contains(route, "via "+via.String()+" dev eth0"); route, _ = n.RouteTo(sn) {
			if time.Now().After(deadline) {
				t.Fatalf("node %s's route to the Windows node's %s: %q, want via %s dev eth0", n.Name, sn, route, via)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// TestWindowsNodeUnderWine: in the netns cluster, beside a Linux node running weftd and one
// running flanneld, a Windows node runs the real weftd.exe (GOOS=windows) under Wine against
// the same etcd. Its HNS calls go through hcsshim's hcn package and its generated syscalls
// into our simulated computenetwork.dll and vmcompute.dll, which hand them to the simulated
// HNS service (internal/hnssim: HNS's schema, HNS's HRESULTs, the in-memory HNS's rules),
// listening on the node's loopback. Checked: the Windows node's lease (VNI 4096, its address,
// the Overlay network's DR MAC as VtepMAC, written once); every Linux node's route, neighbour
// and FDB entry toward it; the network flannel.4096 with the node's subnet and one
// RemoteSubnetRoute per Linux peer, following a peer that joins and one that leaves; a
// restart of weftd.exe adopting the network: once ready again it has asked HNS for no change
// (no create, modify or delete call, not even a refused one). (No packet crosses to
// the Windows node: it has no data plane. TestWindowsHostGWUnderWine runs host-gw.)
func TestWindowsNodeUnderWine(t *testing.T) {
	bins, repo := needWine(t)
	c := newWineCluster(t, bins, windowsConf)
	exe := buildWindowsWeftd(t, repo)
	nodes := startLinuxPeers(t, c, repo, bins.weftd, []string{"n1"}, "n2")

	win := newWineNode(t, c, repo, "w3")
	win.ServeHNS(nil)
	argv := win.weftdArgv(exe)
	win.start(argv)
	win.waitRSRs(c, "the Linux nodes", nodes)

	// The Windows node's lease: VNI 4096, its address, the DR MAC as VtepMAC (state checks
	// them), one write.
	st := win.state(c)
	if _, version := leaseValue(t, c, st.subnet); version != 1 {
		t.Errorf("the Windows node's lease was written %d times, want once", version)
	}

	// Every Linux node, weftd's and flanneld's, reaches the Windows node's subnet through its
	// VXLAN device (VNI 4096, port 4789: the net-conf they share with it): a route, a
	// neighbour and an FDB entry with the DR MAC.
	waitToward(t, nodes, win, st)

	// A Linux node joins, one leaves: the routes follow.
	late := startLinuxPeers(t, c, repo, bins.weftd, []string{"n4"}, "")[0]
	win.waitRSRs(c, "a node joins", append(slices.Clone(nodes), late))
	if _, err := late.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	lateSN, err := late.Subnet()
	if err != nil {
		t.Fatal(err)
	}
	deleteLease(t, c, lateSN)
	win.waitRSRs(c, "a node leaves", nodes)

	// A restart adopts the network: weftd.exe asks HNS for no change at all (no create,
	// delete or policy request, not even one HNS refuses), as the calls hcn made show.
	win.refused()
	win.restartAdopts(argv, st.networkID)
	if after, err := win.HNS.NetworkByName("flannel.4096"); err != nil || after.ID != st.networkID {
		t.Errorf("network after the restart: %v %v, want %s adopted", after, err, st.networkID)
	}
	if got, want := win.rsrs(), wantRSRs(t, c, nodes); got != want {
		t.Errorf("routes after the restart: %q, want %q", got, want)
	}
}

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
	bins, repo := needWine(t)
	c := newWineCluster(t, bins, hostGWConf)
	exe := buildWindowsWeftd(t, repo)
	nodes := startLinuxPeers(t, c, repo, bins.weftd, []string{"n1"}, "n2")

	win := newWineNode(t, c, repo, "w3")
	host := windowsHost(t, win.Node.Node)
	win.ServeHNS(host)
	hns := win.HNS
	argv := win.weftdArgv(exe)
	win.start(argv)

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
	for _, call := range win.Server.Calls() {
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
	win.refused()

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
			if netip.MustParsePrefix("10.244.0.0/16").Contains(r.Dst.Addr()) {
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
	waitRouteVia(t, nodes, winSN, win.IP)

	// A restart re-creates nothing: no change asked of HNS, none written on the host.
	win.restartAdopts(argv, network.ID)
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
