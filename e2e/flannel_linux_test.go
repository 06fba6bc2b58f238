package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/status"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/kube"
)

// The tests in this file run a real flanneld (tools/flannel pins its version) on one node of
// the netns cluster and weftd on the others, over one etcd or one kube-apiserver: the
// drop-in contract of COMPAT.md checked against flannel itself rather than against weft's
// reading of it.

// flannelCase is a network config both daemons run in a test.
type flannelCase struct {
	backend
	typ    string // the leases' BackendType
	direct bool   // vxlan with DirectRouting: peers on the underlay are routed, not encapsulated
}

// device reports whether the nodes have a VXLAN device; encap whether peers are reached
// through it (a neighbour and an FDB entry per peer), rather than by a route to their
// public IP.
func (fc flannelCase) device() bool { return fc.typ == "vxlan" }
func (fc flannelCase) encap() bool  { return fc.device() && !fc.direct }

// flannelCases are the configs of backends() and vxlan with DirectRouting, where both
// daemons must decide alike that a peer on the same underlay needs no encapsulation.
func flannelCases() []flannelCase {
	var cases []flannelCase
	for _, b := range backends() {
		typ := "host-gw"
		if b.vxlan() {
			typ = "vxlan"
		}
		cases = append(cases, flannelCase{backend: b, typ: typ})
	}
	return append(cases, flannelCase{
		backend: backend{"vxlan-directrouting", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","DirectRouting":true}}`},
		typ:     "vxlan",
		direct:  true,
	})
}

// needFlanneld returns the flanneld binary, built on first use, or skips the test when it is
// not built and cannot be, or when the commands it runs are missing and cannot be installed.
func needFlanneld(t *testing.T) string {
	t.Helper()
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := cluster.PrepareFlanneld(repo)
	if err != nil {
		t.Skipf("flanneld is not built and cannot be built (set %s to a flanneld binary to use that one): %v",
			cluster.FlanneldEnv, err)
	}
	if err := cluster.PrepareFlanneldDeps(repo); err != nil {
		t.Skipf("flanneld's run-time dependencies are missing and cannot be installed: %v", err)
	}
	return bin
}

// checkFlanneldLog logs flanneld's warnings and errors from the node's log (klog lines that
// begin with W or E and the date: E1122 02:30:00.123456 ...), and fails the test for an
// error other than those of its shutdown (a cancelled context). A lease of weft's that
// flanneld cannot decode, or an entry toward a weft node it cannot program, is an error
// there; the warnings (no subnet.env yet, etcd without TLS) are expected here.
func checkFlanneldLog(t *testing.T, n *cluster.Node) {
	t.Helper()
	data, err := os.ReadFile(n.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	var complaints, errs []string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimRight(line, "\n")
		if len(line) < 5 || (line[0] != 'W' && line[0] != 'E') || strings.Trim(line[1:5], "0123456789") != "" {
			continue
		}
		complaints = append(complaints, line)
		if line[0] == 'E' && !strings.Contains(line, "canceled") {
			errs = append(errs, line)
		}
	}
	t.Logf("flanneld's warnings and errors on %s (%d):\n%s", n.Name, len(complaints), strings.Join(complaints, "\n"))
	if len(errs) > 0 {
		t.Errorf("flanneld on %s logged errors:\n%s", n.Name, strings.Join(errs, "\n"))
	}
}

// mixedCluster is a cluster whose nodes run weftd or flanneld, as each test starts them.
type mixedCluster struct {
	*cluster.Cluster
	weftd, flanneld string
}

// newMixedCluster makes a cluster without Options.Weftd, so that AddNode starts no daemon and
// each node gets the one the test picks. On failure the nodes' state is logged, as
// newCluster does.
func newMixedCluster(t *testing.T, bins binaries, flanneld string, fc flannelCase) *mixedCluster {
	t.Helper()
	c, err := cluster.New(t, cluster.Options{NetConf: fc.netConf, CNIBin: bins.cniBin, WeftCNI: bins.weftCNI})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpCluster(t, c)
		}
	})
	return &mixedCluster{Cluster: c, weftd: bins.weftd, flanneld: flanneld}
}

func (m *mixedCluster) addNode(t *testing.T, name string) *cluster.Node {
	t.Helper()
	n, err := m.AddNode(name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// startWeftd starts weftd on the node and waits until it is ready.
func (m *mixedCluster) startWeftd(t *testing.T, n *cluster.Node) {
	t.Helper()
	if err := n.StartDaemon(append([]string{m.weftd}, n.WeftdArgs()...)...); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitReady(readyTimeout); err != nil {
		t.Fatal(err)
	}
}

// startFlanneld starts flanneld on the node and waits until its /readyz says ready: it has
// its lease and has written subnet.env, but may not have programmed its peers yet.
func (m *mixedCluster) startFlanneld(t *testing.T, n *cluster.Node) {
	t.Helper()
	if err := n.StartDaemon(append([]string{m.flanneld}, n.FlanneldArgs()...)...); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitReady(readyTimeout); err != nil {
		t.Fatal(err)
	}
}

// stopDaemon stops the node's daemon with SIGTERM and requires a clean exit.
func stopDaemon(t *testing.T, n *cluster.Node) time.Duration {
	t.Helper()
	start := time.Now()
	state, err := n.Stop(syscall.SIGTERM)
	if err != nil {
		t.Fatal(err)
	}
	if !state.Success() {
		t.Errorf("the daemon on %s exited with %v after SIGTERM; want status 0; log:\n%s", n.Name, state, n.LogTail(15))
	}
	return time.Since(start)
}

// vxlanLink is what `ip -d -j link show flannel.1` says of the VXLAN device, in the terms
// flannel and weft decide adoption by.
type vxlanLink struct {
	MAC      string
	MTU      int
	VNI      int
	Port     int
	Local    string
	Link     string
	Learning bool
	GBP      bool
	Addrs    []string
}

func (v vxlanLink) String() string {
	return fmt.Sprintf("mac %s mtu %d vni %d port %d local %s dev %s learning %t gbp %t addrs %v",
		v.MAC, v.MTU, v.VNI, v.Port, v.Local, v.Link, v.Learning, v.GBP, v.Addrs)
}

// readVXLAN reads the node's flannel.1.
func readVXLAN(t *testing.T, n *cluster.Node) vxlanLink {
	t.Helper()
	var links []struct {
		Address  string `json:"address"`
		MTU      int    `json:"mtu"`
		LinkInfo struct {
			InfoKind string `json:"info_kind"`
			InfoData struct {
				ID       int    `json:"id"`
				Local    string `json:"local"`
				Link     string `json:"link"`
				Port     int    `json:"port"`
				Learning bool   `json:"learning"`
				GBP      bool   `json:"gbp"`
			} `json:"info_data"`
		} `json:"linkinfo"`
	}
	out := nodeExec(t, n, "ip", "-d", "-j", "link", "show", vxlanDevice)
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 || links[0].LinkInfo.InfoKind != "vxlan" {
		t.Fatalf("node %s: ip -d -j link show %s: %q (%v); want one vxlan device", n.Name, vxlanDevice, out, err)
	}
	l := links[0]
	d := l.LinkInfo.InfoData
	v := vxlanLink{MAC: l.Address, MTU: l.MTU, VNI: d.ID, Port: d.Port, Local: d.Local, Link: d.Link,
		Learning: d.Learning, GBP: d.GBP}
	var addrs []struct {
		AddrInfo []struct {
			Family    string `json:"family"`
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	out = nodeExec(t, n, "ip", "-j", "addr", "show", "dev", vxlanDevice)
	if err := json.Unmarshal([]byte(out), &addrs); err != nil || len(addrs) != 1 {
		t.Fatalf("node %s: ip -j addr show dev %s: %q (%v)", n.Name, vxlanDevice, out, err)
	}
	for _, a := range addrs[0].AddrInfo {
		if a.Family == "inet" {
			v.Addrs = append(v.Addrs, fmt.Sprintf("%s/%d", a.Local, a.PrefixLen))
		}
	}
	return v
}

// hasVXLAN reports whether the node has a flannel.1 at all.
func hasVXLAN(n *cluster.Node) bool {
	_, err := n.Exec("ip", "link", "show", vxlanDevice)
	return err == nil
}

// subnetEnvKeys is the order of the keys in a subnet.env, which the CNI plugins do not care
// about but which COMPAT.md fixes, and the raw text for the log.
func subnetEnvKeys(t *testing.T, n *cluster.Node) ([]string, string) {
	t.Helper()
	data, err := os.ReadFile(n.SubnetFile)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for line := range strings.Lines(string(data)) {
		if k, _, ok := strings.Cut(line, "="); ok {
			keys = append(keys, k)
		}
	}
	return keys, string(data)
}

// wantRoute is the route a node should have to a peer subnet: through the VXLAN device to
// the peer's <subnet>.0, or straight to its public IP with host-gw and DirectRouting
// (COMPAT.md).
func wantRoute(fc flannelCase, sn netip.Prefix, peerIP netip.Addr) string {
	if fc.encap() {
		return fmt.Sprintf("%s via %s dev %s onlink", sn, sn.Addr(), vxlanDevice)
	}
	return fmt.Sprintf("%s via %s dev eth0", sn, peerIP)
}

// waitProgrammed waits until node n has programmed the peer subnet sn of the node at peerIP
// (VTEP MAC mac): the route as wantRoute says, and when encapsulating the permanent
// neighbour <sn>.0 -> mac and the FDB entry mac -> peerIP. flanneld programs its peers after
// it says it is ready, so the first look may be early.
func waitProgrammed(t *testing.T, n *cluster.Node, fc flannelCase, sn netip.Prefix, peerIP netip.Addr, mac string) dataPlane {
	t.Helper()
	if !fc.encap() {
		mac = "" // peerState reads no neighbour and FDB entries then
	}
	ok := func(d dataPlane) bool {
		// `ip route` may add "proto ..." after the gateway and "onlink": compare the words
		// of the wanted route in order, and no more.
		if !containsWords(d.route, wantRoute(fc, sn, peerIP)) {
			return false
		}
		if !fc.encap() {
			return true
		}
		return containsWords(d.neigh, fmt.Sprintf("%s lladdr %s PERMANENT", sn.Addr(), mac)) &&
			containsWords(d.fdb, fmt.Sprintf("%s dst %s self permanent", mac, peerIP))
	}
	start := time.Now()
	for {
		d := peerState(t, n, sn, mac)
		if ok(d) {
			return d
		}
		if time.Since(start) > convergeTimeout {
			want := fmt.Sprintf("route %q", wantRoute(fc, sn, peerIP))
			if fc.encap() {
				want += fmt.Sprintf(", neighbour %s -> %s, fdb %s -> %s", sn.Addr(), mac, mac, peerIP)
			}
			t.Fatalf("node %s has not programmed peer %s (%s) after %v: %v; want %s", n.Name, sn, peerIP,
				convergeTimeout, d, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// containsWords reports whether the words of want appear in got in order (others may be
// between them, as "proto static" would be).
func containsWords(got, want string) bool {
	g := strings.Fields(got)
	for _, w := range strings.Fields(want) {
		i := slices.Index(g, w)
		if i < 0 {
			return false
		}
		g = g[i+1:]
	}
	return true
}

// weftStatus reads weftd's /status on the node.
func weftStatus(t *testing.T, n *cluster.Node) status.Node {
	t.Helper()
	code, body, err := n.Get("/status")
	if err != nil {
		t.Fatal(err)
	}
	var st status.Node
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 {
		t.Fatalf("node %s: GET /status: %d %q (%v)", n.Name, code, body, err)
	}
	return st
}

// requirePeerProgrammed requires weftd on n to list the lease of sn as a programmed peer.
func requirePeerProgrammed(t *testing.T, n *cluster.Node, sn netip.Prefix) {
	t.Helper()
	st := weftStatus(t, n)
	for _, p := range st.Peers {
		if p.Subnet == sn.String() {
			if p.State != "programmed" {
				t.Fatalf("weftd on %s: peer %s (%s, %s): state %q (%s); want programmed",
					n.Name, p.Subnet, p.PublicIP, p.BackendType, p.State, p.Reason)
			}
			return
		}
	}
	t.Fatalf("weftd on %s: /status lists no peer %s: %+v", n.Name, sn, st.Peers)
}

// leasesOf returns the etcd leases whose PublicIP is ip.
func leasesOf(t *testing.T, c *cluster.Cluster, ip netip.Addr) []subnet.Lease {
	t.Helper()
	leases, err := c.Leases()
	if err != nil {
		t.Fatal(err)
	}
	var mine []subnet.Lease
	for _, l := range leases {
		if l.Attrs.PublicIP == ip {
			mine = append(mine, l)
		}
	}
	return mine
}

// flannelNodes is the etcd-mode mixed cluster of TestFlannelMixedCluster and
// TestFlannelMigration: weftd on n1 and n2, flanneld on n3, a pod on each, every pod
// reaching every other.
type flannelNodes struct {
	m          *mixedCluster
	n1, n2, n3 *cluster.Node
	p1, p2, p3 *cluster.Pod
}

// startFlannelNodes starts the daemons in the order n1 (weftd), n3 (flanneld), n2 (weftd):
// so weftd learns of flanneld's lease both through its watch (n1) and in its first list (n2),
// and flanneld of weftd's both ways too.
func startFlannelNodes(t *testing.T, bins binaries, flanneld string, fc flannelCase) *flannelNodes {
	t.Helper()
	m := newMixedCluster(t, bins, flanneld, fc)
	f := &flannelNodes{m: m, n1: m.addNode(t, "n1"), n2: m.addNode(t, "n2"), n3: m.addNode(t, "n3")}
	m.startWeftd(t, f.n1)
	m.startFlanneld(t, f.n3)
	m.startWeftd(t, f.n2)
	f.p1 = addPod(t, m.Cluster, f.n1, "p1")
	f.p2 = addPod(t, m.Cluster, f.n2, "p2")
	f.p3 = addPod(t, m.Cluster, f.n3, "p3")
	pingAll(t, []*cluster.Pod{f.p1, f.p2, f.p3})
	return f
}

// macOf is the VtepMAC of the lease of sn, "" with host-gw.
func macOf(t *testing.T, c *cluster.Cluster, fc flannelCase, sn netip.Prefix) string {
	t.Helper()
	if !fc.device() {
		return ""
	}
	return vtepMAC(t, leaseOf(t, c, sn))
}

// TestFlannelMixedCluster: weftd on two nodes and a real flanneld on a third share etcd and
// the network config. Each reads the others' leases and programs them (weftd says so in
// /status: not skipped), every pod reaches every other, TCP streams pass both ways between
// weft's and flannel's pods, and weftd on a node restarts (SIGTERM) without losing one ping
// of the flannel pod's traffic to it; nor does flanneld's restart lose any of a weft pod's.
func TestFlannelMixedCluster(t *testing.T) {
	bins := needBinaries(t)
	flanneld := needFlanneld(t)
	for _, fc := range flannelCases() {
		t.Run(fc.name, func(t *testing.T) {
			f := startFlannelNodes(t, bins, flanneld, fc)
			c := f.m.Cluster
			nodes := []*cluster.Node{f.n1, f.n2, f.n3}

			wantMTU := 1500
			if fc.device() {
				wantMTU = 1450
			}
			sn := map[*cluster.Node]netip.Prefix{}
			mac := map[*cluster.Node]string{}
			for _, n := range nodes {
				env, err := n.SubnetEnv()
				if err != nil {
					t.Fatal(err)
				}
				sn[n] = env.Subnet.Masked()
				if env.Network != netip.MustParsePrefix("10.244.0.0/16") || sn[n].Bits() != 24 || env.MTU != wantMTU || env.IPMasq {
					t.Errorf("node %s subnet.env: %+v; want Network 10.244.0.0/16, a /24, MTU %d, no masquerade", n.Name, env, wantMTU)
				}
				mine := leasesOf(t, c, n.IP)
				if len(mine) != 1 || mine[0].Subnet != sn[n] || mine[0].Attrs.BackendType != fc.typ {
					t.Fatalf("node %s (%s): leases in etcd %v; want one, of %s, backend %s", n.Name, n.IP, mine, sn[n], fc.typ)
				}
				mac[n] = macOf(t, c, fc, sn[n])
				if fc.device() {
					v := readVXLAN(t, n)
					t.Logf("node %s: %s: %v", n.Name, vxlanDevice, v)
					want := []string{sn[n].Addr().String() + "/32"}
					if v.MAC != mac[n] || v.MTU != wantMTU || v.VNI != 1 || v.Local != n.IP.String() || !slices.Equal(v.Addrs, want) {
						t.Errorf("node %s: %s is %v; want the lease's VtepMAC %s, MTU %d, VNI 1, local %s, addresses %v",
							n.Name, vxlanDevice, v, mac[n], wantMTU, n.IP, want)
					}
				}
			}
			// The same keys in the same order: what COMPAT.md fixes for subnet.env.
			weftKeys, weftEnv := subnetEnvKeys(t, f.n1)
			flannelKeys, flannelEnv := subnetEnvKeys(t, f.n3)
			t.Logf("subnet.env by weftd (n1):\n%sby flanneld (n3):\n%s", weftEnv, flannelEnv)
			if !slices.Equal(weftKeys, flannelKeys) {
				t.Errorf("subnet.env keys: weftd writes %v, flanneld %v", weftKeys, flannelKeys)
			}

			// weftd's view of flanneld's lease, and flanneld's of weftd's: programmed alike.
			for _, n := range []*cluster.Node{f.n1, f.n2} {
				requirePeerProgrammed(t, n, sn[f.n3])
				d := waitProgrammed(t, n, fc, sn[f.n3], f.n3.IP, mac[f.n3])
				t.Logf("weftd on %s toward flanneld's %s: %v", n.Name, sn[f.n3], d)
			}
			for _, peer := range []*cluster.Node{f.n1, f.n2} {
				d := waitProgrammed(t, f.n3, fc, sn[peer], peer.IP, mac[peer])
				t.Logf("flanneld on n3 toward weftd's %s (%s): %v", sn[peer], peer.Name, d)
				// The same peer as programmed by weftd on the other weft node, for the log:
				// the two daemons' entries should read alike.
				other := f.n1
				if peer == f.n1 {
					other = f.n2
				}
				w := waitProgrammed(t, other, fc, sn[peer], peer.IP, mac[peer])
				if w.route != d.route {
					t.Logf("routes to %s differ: flanneld on n3 %q, weftd on %s %q", sn[peer], d.route, other.Name, w.route)
				}
			}

			stream(t, f.p1, f.p3)
			stream(t, f.p3, f.p2)

			t.Run("weftd restart", func(t *testing.T) {
				watchPings(t, "weftd on n1 restarted (SIGTERM)", f.p3, f.p1, func() {
					stopped := stopDaemon(t, f.n1)
					f.m.startWeftd(t, f.n1)
					t.Logf("weftd on n1 stopped in %v", stopped.Round(time.Millisecond))
				})
				requirePeerProgrammed(t, f.n1, sn[f.n3])
				if got := mustSubnet(t, f.n1); got != sn[f.n1] {
					t.Errorf("n1 after its restart: subnet %s; want %s", got, sn[f.n1])
				}
			})
			t.Run("flanneld restart", func(t *testing.T) {
				watchPings(t, "flanneld on n3 restarted (SIGTERM)", f.p1, f.p3, func() {
					stopped := stopDaemon(t, f.n3)
					f.m.startFlanneld(t, f.n3)
					t.Logf("flanneld on n3 stopped in %v", stopped.Round(time.Millisecond))
				})
				if got := mustSubnet(t, f.n3); got != sn[f.n3] {
					t.Errorf("n3 after flanneld's restart: subnet %s; want %s", got, sn[f.n3])
				}
				if got := macOf(t, c, fc, sn[f.n3]); got != mac[f.n3] {
					t.Errorf("n3 after flanneld's restart: VtepMAC %s; want %s", got, mac[f.n3])
				}
				requirePeerProgrammed(t, f.n1, sn[f.n3])
				waitProgrammed(t, f.n2, fc, sn[f.n3], f.n3.IP, mac[f.n3])
			})
			pingAll(t, []*cluster.Pod{f.p1, f.p2, f.p3})
			checkFlanneldLog(t, f.n3)
		})
	}
}

// TestFlannelMigration: a node moves from flanneld to weftd with its pod running, as
// README's "Migrating from flanneld" says it may: flanneld stops (SIGTERM) and leaves its
// data plane, weftd starts with the same subnet.env, keeps the node's subnet and lease,
// adopts flannel.1 with its MAC, and the pod's traffic through the switch loses nothing.
// Then back, as the README promises too: flanneld finds its lease and device as weftd left
// them.
func TestFlannelMigration(t *testing.T) {
	bins := needBinaries(t)
	flanneld := needFlanneld(t)
	for _, fc := range flannelCases() {
		t.Run(fc.name, func(t *testing.T) {
			f := startFlannelNodes(t, bins, flanneld, fc)
			c := f.m.Cluster
			sn3 := mustSubnet(t, f.n3)
			mac3 := macOf(t, c, fc, sn3)
			var dev vxlanLink
			if fc.device() {
				dev = readVXLAN(t, f.n3)
			}
			routes := map[*cluster.Node]string{}
			for _, peer := range []*cluster.Node{f.n1, f.n2} {
				routes[peer] = waitProgrammed(t, f.n3, fc, mustSubnet(t, peer), peer.IP, macOf(t, c, fc, mustSubnet(t, peer))).route
			}

			// The node's state must be exactly as before: same subnet, one lease for its
			// public IP, same VtepMAC, same device.
			sameNode := func(t *testing.T, daemonName string) {
				t.Helper()
				if got := mustSubnet(t, f.n3); got != sn3 {
					t.Errorf("n3 under %s: subnet %s; want %s (flanneld's)", daemonName, got, sn3)
				}
				if mine := leasesOf(t, c, f.n3.IP); len(mine) != 1 || mine[0].Subnet != sn3 {
					t.Errorf("n3 under %s: leases for %s in etcd: %v; want one, of %s", daemonName, f.n3.IP, mine, sn3)
				}
				if !fc.device() {
					return
				}
				if got := macOf(t, c, fc, sn3); got != mac3 {
					t.Errorf("n3 under %s: lease VtepMAC %s; want %s: every peer's neighbour and FDB entry had to change", daemonName, got, mac3)
				}
				if got := readVXLAN(t, f.n3); got.MAC != dev.MAC {
					t.Errorf("n3 under %s: %s is %v; want it adopted as it was: %v", daemonName, vxlanDevice, got, dev)
				}
			}

			ok := t.Run("to weftd", func(t *testing.T) {
				watchPings(t, "n3 switched from flanneld to weftd", f.p1, f.p3, func() {
					stopped := stopDaemon(t, f.n3)
					// What flanneld leaves behind when it stops, which weftd then finds.
					if fc.device() && !hasVXLAN(f.n3) {
						t.Errorf("flanneld on n3 removed %s when it stopped", vxlanDevice)
					}
					for peer, r := range routes {
						if got, err := f.n3.RouteTo(mustSubnet(t, peer)); err != nil || got != r {
							t.Errorf("n3 after flanneld stopped: route to %s is %q (%v); flanneld had %q", peer.Name, got, err, r)
						}
					}
					f.m.startWeftd(t, f.n3)
					t.Logf("flanneld on n3 stopped in %v, leaving its routes as they were", stopped.Round(time.Millisecond))
				})
				sameNode(t, "weftd")
				for _, peer := range []*cluster.Node{f.n1, f.n2} {
					requirePeerProgrammed(t, f.n3, mustSubnet(t, peer))
				}
				pingAll(t, []*cluster.Pod{f.p1, f.p2, f.p3})
				stream(t, f.p3, f.p1)
			})
			if !ok {
				return // switching back needs the state the switch was to leave
			}

			t.Run("back to flanneld", func(t *testing.T) {
				watchPings(t, "n3 switched from weftd back to flanneld", f.p2, f.p3, func() {
					stopDaemon(t, f.n3)
					f.m.startFlanneld(t, f.n3)
				})
				sameNode(t, "flanneld again")
				for _, peer := range []*cluster.Node{f.n1, f.n2} {
					waitProgrammed(t, f.n3, fc, mustSubnet(t, peer), peer.IP, macOf(t, c, fc, mustSubnet(t, peer)))
					requirePeerProgrammed(t, peer, sn3)
				}
				pingAll(t, []*cluster.Pod{f.p1, f.p2, f.p3})
				checkFlanneldLog(t, f.n3)
			})
		})
	}
}

// TestFlannelBackendMTU: with Backend.MTU in the network config, a weftd node and a flanneld
// node must give their pods the same MTU (subnet.env's FLANNEL_MTU, which the CNI plugin
// gives every pod, and flannel.1's), or a pod on one kind of node sends full-size packets
// that the other kind cannot forward. flannel v0.28 on Linux takes Backend.MTU for the
// external interface's MTU ("the MTU for the outgoing packets", which defaults to the
// interface's) and takes VXLAN's 50 bytes off it for flannel.1 and subnet.env, as it does
// with the interface's own MTU when the key is absent.
func TestFlannelBackendMTU(t *testing.T) {
	bins := needBinaries(t)
	flanneld := needFlanneld(t)
	const backendMTU = 1400
	fc := flannelCase{
		backend: backend{"vxlan-mtu", fmt.Sprintf(`{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","MTU":%d}}`, backendMTU)},
		typ:     "vxlan",
	}
	m := newMixedCluster(t, bins, flanneld, fc)
	weft, flannel := m.addNode(t, "n1"), m.addNode(t, "n2")
	m.startWeftd(t, weft)
	m.startFlanneld(t, flannel)
	wp, fp := addPod(t, m.Cluster, weft, "p1"), addPod(t, m.Cluster, flannel, "p2")
	pingAll(t, []*cluster.Pod{wp, fp})

	mtus := map[*cluster.Node][2]int{}
	for _, n := range []*cluster.Node{weft, flannel} {
		env, err := n.SubnetEnv()
		if err != nil {
			t.Fatal(err)
		}
		mtus[n] = [2]int{env.MTU, readVXLAN(t, n).MTU}
	}
	t.Logf("Backend.MTU %d: FLANNEL_MTU and flannel.1 MTU by weftd (n1) %v, by flanneld (n2) %v", backendMTU, mtus[weft], mtus[flannel])
	if mtus[flannel] != [2]int{backendMTU - 50, backendMTU - 50} {
		t.Logf("flanneld no longer subtracts VXLAN's 50 bytes from Backend.MTU: %v", mtus[flannel])
	}
	if mtus[weft] == mtus[flannel] {
		return
	}
	// What the difference does: a full-size packet from the pod with the larger MTU, which
	// may not be fragmented, cannot be forwarded into the other pod, whose link is smaller.
	from, to, big := wp, fp, mtus[weft][0]
	if mtus[flannel][0] > big {
		from, to, big = fp, wp, mtus[flannel][0]
	}
	size := big - 28 // the IPv4 and ICMP headers
	out, _ := exec.Command("ip", "netns", "exec", from.NS, "ping", "-n", "-c", "2", "-W", "1", "-M", "do",
		"-s", fmt.Sprint(size), to.IP.String()).CombinedOutput()
	t.Errorf("Backend.MTU %d: weftd gives its node FLANNEL_MTU %d and flannel.1 MTU %d, flanneld %d and %d: "+
		"flanneld takes Backend.MTU for the external interface's MTU and subtracts VXLAN's 50 bytes, "+
		"weftd uses it as the overlay MTU itself. A full-size packet from pod %s (node %s) to pod %s (node %s) "+
		"(ping -M do -s %d):\n%s",
		backendMTU, mtus[weft][0], mtus[weft][1], mtus[flannel][0], mtus[flannel][1],
		from.Name, from.Node.Name, to.Name, to.Node.Name, size, strings.TrimSpace(string(out)))
}

// newKubeMixedCluster is newKubeCluster without Options.Weftd: a Kubernetes-mode cluster
// with its API server and dist's RBAC, whose nodes run the daemon each test picks. flanneld
// gets the weft service account's kubeconfig like weftd, so it runs under weft's ClusterRole
// (which grants what flannel's does).
func newKubeMixedCluster(t *testing.T, bins binaries, flanneld string, b backend) (*kubeCluster, *mixedCluster) {
	t.Helper()
	kc := newKubeCluster(t, bins, b, "")
	return kc, &mixedCluster{Cluster: kc.Cluster, weftd: bins.weftd, flanneld: flanneld}
}

// annotateAsKubelet gives a Node the annotation a kubelet sets when it registers its node.
// flanneld v0.28 needs a Node to have some annotation: it writes its own into the Node's
// annotation map without making one, and panics ("assignment to entry in nil map", in its
// kube subnet manager's AcquireLease) on the bare Node createNode makes, which no real
// cluster has.
func (kc *kubeCluster) annotateAsKubelet(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	patch := []byte(`{"metadata":{"annotations":{"volumes.kubernetes.io/controller-managed-attach-detach":"true"}}}`)
	if _, err := kc.admin.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotating Node %s as its kubelet would: %v", name, err)
	}
}

// flannelAnnotations are a Node's annotations under flannel's default prefix, by name.
func (kc *kubeCluster) flannelAnnotations(t *testing.T, name string) map[string]string {
	t.Helper()
	node, err := kc.getNode(name)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for k, v := range node.Annotations {
		if a, ok := strings.CutPrefix(k, kube.DefaultAnnotationPrefix+"/"); ok {
			got[a] = v
		}
	}
	return got
}

// flannelIsUp is the reason of the NetworkUnavailable=False condition flanneld sets; weftd
// sets kube.ReadyReason, on purpose (see there), which is all checkNode accepts.
const flannelIsUp = "FlannelIsUp"

// checkFlanneldNode waits until flanneld's Node shows what checkNode wants of a weftd node
// (the same annotations, as weft reads them: backend type and data, public IP, managed by a
// subnet manager), with flannel's reason on the NetworkUnavailable=False condition.
func (kc *kubeCluster) checkFlanneldNode(t *testing.T, n *cluster.Node, b backend) {
	t.Helper()
	wantData := "null"
	if b.vxlan() {
		wantData = fmt.Sprintf(`{"VNI":1,"VtepMAC":%q}`, vxlanDeviceMAC(t, n))
	}
	want := map[string]string{"kube-subnet-manager": "true", "backend-type": b.name, "backend-data": wantData, "public-ip": n.IP.String()}
	start := time.Now()
	for {
		var problems []string
		got := kc.flannelAnnotations(t, n.Name)
		for k, v := range want {
			g := got[k]
			if k == "backend-data" && b.vxlan() {
				if norm, err := normalVXLANData(g); err == nil {
					g = norm
				}
			}
			if g != v {
				problems = append(problems, fmt.Sprintf("annotation %s = %q, want %q", k, got[k], v))
			}
		}
		node, err := kc.getNode(n.Name)
		if err != nil {
			t.Fatal(err)
		}
		reason := "(no NetworkUnavailable condition)"
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeNetworkUnavailable {
				reason = c.Reason
				if c.Status != corev1.ConditionFalse {
					reason += " with status " + string(c.Status)
				}
			}
		}
		if reason != flannelIsUp {
			problems = append(problems, fmt.Sprintf("NetworkUnavailable=False reason %s, want %s", reason, flannelIsUp))
		}
		if len(problems) == 0 {
			return
		}
		if time.Since(start) > convergeTimeout {
			t.Fatalf("flanneld's Node %s after %v: %s", n.Name, convergeTimeout, strings.Join(problems, "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFlannelKubeMode: the mixed cluster in Kubernetes mode (--kube-subnet-mgr, a real
// kube-apiserver): weftd on n1 and n2 and flanneld on n3 take their podCIDRs, publish the
// same node annotations (checkNode holds flanneld's to what it holds weftd's) and read each
// other's; pods reach each other, weftd restarts under the flannel pod's traffic, and n3
// moves from flanneld to weftd keeping its VtepMAC, all without losing a ping.
func TestFlannelKubeMode(t *testing.T) {
	bins := needBinaries(t)
	needKubeAPIServer(t)
	flanneld := needFlanneld(t)
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			fc := flannelCase{backend: b, typ: b.name}
			kc, m := newKubeMixedCluster(t, bins, flanneld, b)
			names := []string{"n1", "n2", "n3"}
			nodes := map[string]*cluster.Node{}
			for i, name := range names {
				kc.createNode(t, name, podCIDR(i+1))
				kc.annotateAsKubelet(t, name)
				nodes[name] = m.addNode(t, name)
			}
			n1, n2, n3 := nodes["n1"], nodes["n2"], nodes["n3"]
			m.startWeftd(t, n1)
			m.startFlanneld(t, n3)
			m.startWeftd(t, n2)
			kc.checkNode(t, n1, b, podCIDR(1))
			kc.checkNode(t, n2, b, podCIDR(2))
			kc.checkFlanneldNode(t, n3, b)
			if got := mustSubnet(t, n3); got != podCIDR(3) {
				t.Errorf("flanneld on n3: subnet %s; want its podCIDR %s", got, podCIDR(3))
			}
			weftAnn, flannelAnn := kc.flannelAnnotations(t, "n1"), kc.flannelAnnotations(t, "n3")
			t.Logf("annotations by weftd (n1): %v\nby flanneld (n3): %v", weftAnn, flannelAnn)
			if w, f := slices.Sorted(maps.Keys(weftAnn)), slices.Sorted(maps.Keys(flannelAnn)); !slices.Equal(w, f) {
				t.Errorf("annotations under %s: weftd writes %v, flanneld %v", kube.DefaultAnnotationPrefix, w, f)
			}

			p1, p2, p3 := addPod(t, m.Cluster, n1, "p1"), addPod(t, m.Cluster, n2, "p2"), addPod(t, m.Cluster, n3, "p3")
			pingAll(t, []*cluster.Pod{p1, p2, p3})
			mac := map[*cluster.Node]string{}
			if b.vxlan() {
				for _, n := range []*cluster.Node{n1, n2, n3} {
					mac[n] = kc.annotatedVtepMAC(t, n.Name)
				}
			}
			for _, n := range []*cluster.Node{n1, n2} {
				requirePeerProgrammed(t, n, podCIDR(3))
				waitProgrammed(t, n, fc, podCIDR(3), n3.IP, mac[n3])
				waitProgrammed(t, n3, fc, podCIDR(n.Index), n.IP, mac[n])
			}
			stream(t, p1, p3)
			stream(t, p3, p2)

			watchPings(t, "weftd on n1 restarted (SIGTERM)", p3, p1, func() {
				stopDaemon(t, n1)
				m.startWeftd(t, n1)
			})
			checkFlanneldLog(t, n3)

			watchPings(t, "n3 switched from flanneld to weftd", p1, p3, func() {
				stopDaemon(t, n3)
				m.startWeftd(t, n3)
			})
			kc.checkNode(t, n3, b, podCIDR(3))
			if b.vxlan() {
				if got := kc.annotatedVtepMAC(t, "n3"); got != mac[n3] {
					t.Errorf("n3 under weftd: VtepMAC %s; flanneld had %s: every peer's neighbour and FDB entry had to change", got, mac[n3])
				}
			}
			for _, n := range []*cluster.Node{n1, n2} {
				requirePeerProgrammed(t, n3, podCIDR(n.Index))
			}
			pingAll(t, []*cluster.Pod{p1, p2, p3})
		})
	}
}
