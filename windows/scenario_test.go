package windows_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

const vxlanConf = `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}`

// TestOverlayColdStart: the network is made for the chosen subnet, the lease carries its
// DR MAC, and peers become RemoteSubnetRoute policies.
func TestOverlayColdStart(t *testing.T) {
	n := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.10", hns10, windows.Config{})
	tr := newTranscript(t, n)
	start := n.clock.Now()
	own := n.mustAcquire("10.244.1.0/24")
	if waited := n.clock.Now().Sub(start); waited < testBlip {
		t.Errorf("Prepare returned after %v, before the blip (%v) was over", waited, testBlip)
	}
	dr, err := n.network("flannel.4096").DRMAC()
	if err != nil {
		t.Fatal(err)
	}
	if got := n.vtepMAC(); got != dr {
		t.Errorf("lease VtepMAC %s, HNS DR MAC %s", got, dr)
	}
	if !strings.HasPrefix(strings.ToUpper(dr.String()), "00:15:5D:") {
		t.Errorf("DR MAC %s is not HNS's", dr)
	}
	tr.step("acquire 10.244.1.0/24: "+string(own.Attrs.BackendData), "")

	peers := []subnet.Lease{
		vxlanLease(t, "10.244.2.0/24", "192.168.1.11", "c6:d2:32:6f:8f:44"),
		vxlanLease(t, "10.244.3.0/24", "192.168.1.12", "00:15:5d:c0:00:09"),
	}
	tr.step("converge with two peers", n.mustConverge(append(peers, own)))
	tr.step("converge again", n.mustConverge(append(peers, own)))
	tr.check("overlay-cold-start")
}

// TestOverlayRestartAdoption: a restarted weftd adopts the network and its policies; with
// everything right it sends HNS nothing at all, also when HNS's query does not echo the
// VSID the network was made with.
func TestOverlayRestartAdoption(t *testing.T) {
	for _, omits := range []bool{false, true} {
		t.Run(fmt.Sprintf("query omits subnet policies=%v", omits), func(t *testing.T) {
			testOverlayRestartAdoption(t, func(o *hnstest.Options) { o.QueryOmitsSubnetPolicies = omits })
		})
	}
}

func testOverlayRestartAdoption(t *testing.T, opt func(*hnstest.Options)) {
	n := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.10", hns10, windows.Config{}, opt)
	n.mustAcquire("10.244.1.0/24")
	mac := n.vtepMAC()
	peers := []subnet.Lease{
		vxlanLease(t, "10.244.2.0/24", "192.168.1.11", "c6:d2:32:6f:8f:44"),
		vxlanLease(t, "10.244.3.0/24", "192.168.1.12", "00:15:5d:c0:00:09"),
	}
	n.mustConverge(peers)
	before := n.hns.Render()
	n.mutations()

	n.restart()
	start := n.clock.Now()
	n.mustAcquire("10.244.1.0/24")
	if n.clock.Now() != start {
		t.Errorf("adopting waited %v: no blip without a new network", n.clock.Now().Sub(start))
	}
	if n.vtepMAC() != mac {
		t.Errorf("VtepMAC changed across a restart: %s -> %s", mac, n.vtepMAC())
	}
	if ch := n.mustConverge(peers); ch != "" {
		t.Errorf("restart changed %q", ch)
	}
	if r := n.mutations(); len(r) != 0 {
		t.Errorf("restart sent HNS %d requests, want none: %+v", len(r), r)
	}
	if after := n.hns.Render(); after != before {
		t.Errorf("state changed across a restart:\n%s", lineDiff(before, after))
	}
}

// TestOverlayPeers: joins, leaves and a changed VtepMAC touch only the peer concerned.
func TestOverlayPeers(t *testing.T) {
	n := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.10", hns10, windows.Config{})
	tr := newTranscript(t, n)
	n.mustAcquire("10.244.1.0/24")
	a := vxlanLease(t, "10.244.2.0/24", "192.168.1.11", "c6:d2:32:6f:8f:44")
	b := vxlanLease(t, "10.244.3.0/24", "192.168.1.12", "00:15:5d:c0:00:09")
	c := vxlanLease(t, "10.244.4.0/24", "192.168.1.13", "6e:11:22:33:44:55")
	tr.step("start with a", n.mustConverge([]subnet.Lease{a}))
	tr.step("b and c join", n.mustConverge([]subnet.Lease{a, b, c}))
	tr.step("a leaves", n.mustConverge([]subnet.Lease{b, c}))
	c2 := vxlanLease(t, "10.244.4.0/24", "192.168.1.13", "6e:11:22:33:44:66")
	tr.step("c's VtepMAC changes", n.mustConverge([]subnet.Lease{b, c2}))
	b2 := vxlanLease(t, "10.244.3.0/24", "192.168.1.22", "00:15:5d:c0:00:09")
	tr.step("b's public IP changes", n.mustConverge([]subnet.Lease{b2, c2}))
	tr.step("everyone leaves", n.mustConverge(nil))
	tr.check("overlay-peers")
}

// TestOverlayStaleAfterDowntime: peers that left while weftd was down are removed on
// restart, new ones added; the rest is untouched.
func TestOverlayStaleAfterDowntime(t *testing.T) {
	n := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.10", hns10, windows.Config{})
	tr := newTranscript(t, n)
	n.mustAcquire("10.244.1.0/24")
	a := vxlanLease(t, "10.244.2.0/24", "192.168.1.11", "c6:d2:32:6f:8f:44")
	b := vxlanLease(t, "10.244.3.0/24", "192.168.1.12", "00:15:5d:c0:00:09")
	c := vxlanLease(t, "10.244.4.0/24", "192.168.1.13", "6e:11:22:33:44:55")
	tr.step("running with a and b", n.mustConverge([]subnet.Lease{a, b}))
	// weftd stops; b leaves and c joins meanwhile.
	n.restart()
	n.mustAcquire("10.244.1.0/24")
	tr.step("restarted: network adopted", "")
	tr.step("first convergence: a kept, b removed, c added", n.mustConverge([]subnet.Lease{a, c}))
	tr.check("overlay-stale-after-downtime")
}

// TestOverlayForeignStateUntouched: kube-proxy's remote endpoints, pods' endpoints and
// policies for destinations outside the cluster network are not weft's to remove.
func TestOverlayForeignStateUntouched(t *testing.T) {
	n := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.10", hns10, windows.Config{})
	n.mustAcquire("10.244.1.0/24")
	net, _ := n.hns.NetworkByName("flannel.4096")
	foreign := windows.RemoteSubnetRoutePolicy(windows.RemoteSubnetRouteSettings{DestinationPrefix: "172.16.0.0/24", IsolationID: 4096, ProviderAddress: "192.168.1.99", DistributedRouterMacAddress: "00-15-5D-01-02-03"})
	if err := n.hns.ModifyNetworkSettings(net.ID, windows.PolicyRequest(windows.RequestAdd, foreign)); err != nil {
		t.Fatal(err)
	}
	kubeProxy := windows.HostComputeEndpoint{HostComputeNetwork: net.ID, IPConfigurations: []windows.IPConfig{{IPAddress: "10.244.2.7"}},
		MacAddress: "02-11-0A-F4-02-07", Flags: windows.EndpointRemote, Policies: []windows.Policy{windows.ProviderAddressPolicy(netip.MustParseAddr("192.168.1.11"))}, SchemaVersion: windows.SchemaV2()}
	pod := windows.HostComputeEndpoint{Name: "pod-a", HostComputeNetwork: net.ID, IPConfigurations: []windows.IPConfig{{IPAddress: "10.244.1.5", PrefixLength: 24}}, SchemaVersion: windows.SchemaV2()}
	for _, ep := range []windows.HostComputeEndpoint{kubeProxy, pod} {
		if _, err := n.hns.CreateEndpoint(&ep); err != nil {
			t.Fatal(err)
		}
	}
	n.mutations()
	n.mustConverge(nil)
	for _, r := range n.mutations() {
		if r.Op != "ModifyNetworkSettings" || !strings.Contains(string(r.Body), "HostRoute") {
			t.Errorf("converging with no peers sent %s %s", r.Op, r.Body)
		}
	}
	state := n.hns.Render()
	for _, want := range []string{"172.16.0.0/24", "02-11-0A-F4-02-07", "pod-a"} {
		if !strings.Contains(state, want) {
			t.Errorf("%s was removed:\n%s", want, state)
		}
	}
}

// TestOverlayBlip: Prepare returns only once HNS reports the management IP and the host
// holds it; a blip longer than BlipTimeout fails the acquisition, so nothing is published.
func TestOverlayBlip(t *testing.T) {
	var ready []string
	n := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.10", hns10, windows.Config{
		HostReady: func(_ context.Context, a netip.Addr) error {
			ready = append(ready, a.String())
			return nil
		},
	})
	start := n.clock.Now()
	n.mustAcquire("10.244.1.0/24")
	if waited := n.clock.Now().Sub(start); waited < testBlip || waited > testBlip+time.Second {
		t.Errorf("waited %v for a %v blip", waited, testBlip)
	}
	if strings.Join(ready, ",") != "192.168.1.10" {
		t.Errorf("HostReady called for %q, want the management IP once", ready)
	}

	// A blip that does not end: the acquisition fails and publishes nothing.
	slow := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.20", hns10, windows.Config{BlipTimeout: 2 * time.Second})
	if _, err := slow.acquire("10.244.5.0/24"); err == nil || !strings.Contains(err.Error(), "no management IP") {
		t.Errorf("a %v blip with a 2s timeout gave %v", testBlip, err)
	}
	// The host failing to come back fails it as well.
	down := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.21", hns10, windows.Config{
		HostReady: func(context.Context, netip.Addr) error { return errors.New("no interface holds it") },
	})
	if _, err := down.acquire("10.244.6.0/24"); err == nil || !strings.Contains(err.Error(), "no interface holds it") {
		t.Errorf("a host that stays down gave %v", err)
	}
}

// TestOverlayOldHNS: an HNS without RemoteSubnetRoute gets remote endpoints, one per pod
// address of every peer (flanneld's old way); asking for remote subnet routes there fails;
// after an HNS upgrade a restart switches over and leaves no endpoint behind.
func TestOverlayOldHNS(t *testing.T) {
	conf := `{"Network":"10.244.0.0/16","SubnetLen":28,"Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}`
	old := windows.Version{Major: 9, Minor: 1}
	forced := newWinNode(t, mustConfig(t, conf), "192.168.1.10", old, windows.Config{Peers: windows.PeersRemoteSubnetRoute})
	if _, err := forced.acquire("10.244.1.0/28"); !errors.Is(err, windows.ErrNotSupported) {
		t.Errorf("RemoteSubnetRoute on HNS 9.1 gave %v, want windows.ErrNotSupported", err)
	}

	n := newWinNode(t, mustConfig(t, conf), "192.168.1.10", old, windows.Config{})
	tr := newTranscript(t, n)
	n.mustAcquire("10.244.1.0/28")
	a := vxlanLease(t, "10.244.2.0/28", "192.168.1.11", "c6:d2:32:6f:8f:44")
	b := vxlanLease(t, "10.244.3.0/28", "192.168.1.12", "00:15:5d:c0:00:09")
	tr.step("HNS 9.1: peers as remote endpoints", n.mustConverge([]subnet.Lease{a, b}))
	n.restart()
	n.mustAcquire("10.244.1.0/28")
	tr.step("restart: nothing to do", n.mustConverge([]subnet.Lease{a, b}))
	tr.step("b leaves", n.mustConverge([]subnet.Lease{a}))

	n.hns.SetVersion(hns10)
	n.restart()
	n.mustAcquire("10.244.1.0/28")
	tr.step("HNS upgraded to 10.0, weftd restarted", n.mustConverge([]subnet.Lease{a}))
	tr.check("overlay-old-hns")

	// The config can ask for endpoints where remote subnet routes would do.
	e := newWinNode(t, mustConfig(t, conf), "192.168.1.10", hns10, windows.Config{Peers: windows.PeersRemoteEndpoints})
	e.mustAcquire("10.244.1.0/28")
	e.mustConverge([]subnet.Lease{a})
	if st := e.hns.Render(); strings.Contains(st, "RemoteSubnetRoute") || !strings.Contains(st, "remote_10.244.2.14 ") {
		t.Errorf("endpoints by config:\n%s", st)
	}
}

// TestOverlayReboot: a reboot takes the non-persistent network with it; weftd makes it
// again, and publishes the new DR MAC. While weftd runs, a network deleted under it is
// reported by the next full Apply as a missing device and made again by Prepare.
func TestOverlayReboot(t *testing.T) {
	n := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.10", hns10, windows.Config{})
	tr := newTranscript(t, n)
	n.mustAcquire("10.244.1.0/24")
	mac := n.vtepMAC()
	a := vxlanLease(t, "10.244.2.0/24", "192.168.1.11", "c6:d2:32:6f:8f:44")
	tr.step("running", n.mustConverge([]subnet.Lease{a}))

	n.hns.Reboot()
	tr.step("rebooted", "")
	n.restart()
	n.mustAcquire("10.244.1.0/24")
	if n.vtepMAC() == mac {
		t.Errorf("VtepMAC %s unchanged though the network was made again", mac)
	}
	tr.step("weftd started: network made again", n.mustConverge([]subnet.Lease{a}))

	// Deleted under a running weftd.
	net, _ := n.hns.NetworkByName("flannel.4096")
	if err := n.hns.DeleteNetwork(net.ID); err != nil {
		t.Fatal(err)
	}
	_, err := n.full([]subnet.Lease{a})
	var missing *backend.MissingDeviceError
	if !errors.As(err, &missing) || missing.Name != "flannel.4096" {
		t.Fatalf("a full Apply without the network gave %v, want a MissingDeviceError", err)
	}
	newMAC, err := n.plane.Prepare(t.Context(), n.set.State())
	if err != nil {
		t.Fatal(err)
	}
	if newMAC == n.vtepMAC() {
		t.Errorf("Prepare kept MAC %s for a new network", newMAC)
	}
	// An incremental Apply after Prepare is done in full: the model went with the network.
	tr.step("deleted by hand, made again by Prepare", n.mustConverge([]subnet.Lease{a}))
	tr.check("overlay-reboot")
}

// TestOverlaySubnetChange: a network made for another subnet (or VNI) is replaced; one
// made for this subnet by flanneld is adopted.
func TestOverlaySubnetChange(t *testing.T) {
	n := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.10", hns10, windows.Config{})
	n.mustAcquire("10.244.1.0/24")
	first, _ := n.hns.NetworkByName("flannel.4096")
	n.restart()
	n.mustAcquire("10.244.7.0/24")
	second, _ := n.hns.NetworkByName("flannel.4096")
	if first.ID == second.ID {
		t.Fatal("a network for 10.244.1.0/24 was kept for 10.244.7.0/24")
	}
	if s := second.StaticSubnet(); s.IPAddressPrefix != "10.244.7.0/24" {
		t.Errorf("new network subnet %s", s.IPAddressPrefix)
	}
	var ops []string
	for _, r := range n.mutations() {
		ops = append(ops, r.Op)
	}
	if got := strings.Join(ops, " "); got != "CreateNetwork DeleteNetwork CreateNetwork" {
		t.Errorf("requests %q", got)
	}

	// Without a subnet there is no overlay to make.
	fresh := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.30", hns10, windows.Config{})
	if _, err := fresh.plane.Prepare(t.Context(), fresh.b.State(netip.Prefix{}, false)); err == nil {
		t.Error("Prepare made an overlay for no subnet")
	}
}

const hostgwConf = `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw","DNSServerList":"10.96.0.10"}}`

// TestHostGW: the L2Bridge network, its host endpoint at .2 in the host namespace,
// forwarding, and a route per peer on the vNIC that holds the node's address; restarts
// change nothing, peers come and go, a reboot is recovered.
func TestHostGW(t *testing.T) {
	n := newWinNode(t, mustConfig(t, hostgwConf), "192.168.1.10", hns10, windows.Config{})
	tr := newTranscript(t, n)
	own := n.mustAcquire("10.244.1.0/24")
	if len(own.Attrs.BackendData) != 0 {
		t.Errorf("host-gw lease has backend data %s", own.Attrs.BackendData)
	}
	tr.step("acquire 10.244.1.0/24", "")
	a := hostgwLease("10.244.2.0/24", "192.168.1.11")
	b := hostgwLease("10.244.3.0/24", "192.168.1.12")
	tr.step("two peers", n.mustConverge([]subnet.Lease{a, b, own}))

	before := n.hns.Render() + n.host.Render()
	n.restart()
	n.mustAcquire("10.244.1.0/24")
	if ch := n.mustConverge([]subnet.Lease{a, b}); ch != "" {
		t.Errorf("restart changed %q", ch)
	}
	if r := n.mutations(); len(r) != 0 {
		t.Errorf("restart sent HNS %+v", r)
	}
	if after := n.hns.Render() + n.host.Render(); after != before {
		t.Errorf("restart changed the state:\n%s", lineDiff(before, after))
	}

	// A static route outside the cluster network, and one into it that the system (not a
	// static route) made, are not weft's.
	for _, r := range []windows.HostRoute{
		{Dst: netip.MustParsePrefix("172.16.0.0/16"), NextHop: netip.MustParseAddr("192.168.1.1"), IfIndex: 100, Protocol: windows.ProtoNetMgmt},
		{Dst: netip.MustParsePrefix("10.244.9.0/24"), NextHop: netip.MustParseAddr("192.168.1.50"), IfIndex: 100, Protocol: 2},
	} {
		if err := n.host.AddRoute(r); err != nil {
			t.Fatal(err)
		}
	}
	c := hostgwLease("10.244.4.0/24", "192.168.1.13")
	tr.step("a leaves, c joins", n.mustConverge([]subnet.Lease{b, c}))
	b2 := hostgwLease("10.244.3.0/24", "192.168.1.22")
	tr.step("b moves to another address", n.mustConverge([]subnet.Lease{b2, c}))
	if st := n.host.Render(); !strings.Contains(st, "172.16.0.0/16") || !strings.Contains(st, "10.244.9.0/24") {
		t.Errorf("foreign routes removed:\n%s", st)
	}
	n.hns.Reboot()
	tr.step("rebooted", "")
	n.restart()
	n.mustAcquire("10.244.1.0/24")
	tr.step("weftd started again", n.mustConverge([]subnet.Lease{b2, c}))
	tr.check("hostgw")
}

// TestNodeFiles: the overlay writes kube-proxy's source VIP, in the form kube-proxy's
// start-up scripts read, next to subnet.env and where those scripts look (a directory made
// if missing); and the network's name and type for the CNI plugin. host-gw writes the
// network file alone.
func TestNodeFiles(t *testing.T) {
	// Not t.TempDir: under Wine 8 its cleanup fails (Go's RemoveAll uses a file
	// disposition call Wine does not have), and these tests also run there.
	dir, err := os.MkdirTemp("", "weft-sourcevip")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	vips := []string{filepath.Join(dir, "run", "sourceVip.json"), filepath.Join(dir, "k", "sourceVip.json")}
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	netFile := filepath.Join(dir, "run", "hns.json")
	n := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.10", hns10, windows.Config{SourceVIPFiles: vips, NetworkFile: netFile})
	n.mustAcquire("10.244.1.0/24")
	for _, path := range vips {
		if got, want := read(path), `{"cniVersion":"0.2.0","ip4":{"ip":"10.244.1.254/24"}}`+"\n"; got != want {
			t.Errorf("source VIP file %s: %q, want %q", path, got, want)
		}
	}
	if got, want := read(netFile), `{"name":"flannel.4096","type":"Overlay"}`+"\n"; got != want {
		t.Errorf("network file %q, want %q", got, want)
	}

	hostgw := filepath.Join(dir, "hostgw.json")
	g := newWinNode(t, mustConfig(t, hostgwConf), "192.168.1.10", hns10, windows.Config{NetworkFile: hostgw})
	g.mustAcquire("10.244.1.0/24")
	if got, want := read(hostgw), `{"name":"cbr0","type":"L2Bridge"}`+"\n"; got != want {
		t.Errorf("host-gw network file %q, want %q", got, want)
	}
}

// TestRequestGolden: the JSON of every kind of request weft sends HNS, as hcn would send
// it, in testdata/requests.
func TestRequestGolden(t *testing.T) {
	kinds := map[string]hnstest.Request{}
	name := func(r hnstest.Request) string {
		switch r.Op {
		case "CreateNetwork":
			var n windows.HostComputeNetwork
			_ = json.Unmarshal(r.Body, &n)
			return "create-network-" + strings.ToLower(string(n.Type))
		case "ModifyNetworkSettings":
			var m windows.ModifyNetworkSettingRequest
			var pr windows.PolicyNetworkRequest
			_ = json.Unmarshal(r.Body, &m)
			_ = json.Unmarshal(m.Settings, &pr)
			return "network-" + strings.ToLower(string(m.RequestType)) + "-" + strings.ToLower(string(pr.Policies[0].Type))
		case "CreateEndpoint":
			var ep windows.HostComputeEndpoint
			_ = json.Unmarshal(r.Body, &ep)
			if ep.Flags&windows.EndpointRemote != 0 {
				return "create-endpoint-remote"
			}
			return "create-endpoint-host"
		case "HostAttach":
			return "host-attach"
		}
		return strings.ToLower(r.Op)
	}
	collect := func(n *winNode) {
		for _, r := range n.hns.Requests() {
			if k := name(r); kinds[k].Op == "" {
				kinds[k] = r
			}
		}
		n.hns.ResetRequests()
	}
	a := vxlanLease(t, "10.244.2.0/28", "192.168.1.11", "c6:d2:32:6f:8f:44")
	a2 := vxlanLease(t, "10.244.2.0/28", "192.168.1.11", "c6:d2:32:6f:8f:45")
	conf := `{"Network":"10.244.0.0/16","SubnetLen":28,"Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}`
	o := newWinNode(t, mustConfig(t, conf), "192.168.1.10", hns10, windows.Config{})
	o.mustAcquire("10.244.1.0/28")
	o.mustConverge([]subnet.Lease{a})
	o.mustConverge([]subnet.Lease{a2})
	o.restart()
	o.mustAcquire("10.244.1.16/28") // another subnet: the network is replaced
	collect(o)
	e := newWinNode(t, mustConfig(t, conf), "192.168.1.10", windows.Version{Major: 9, Minor: 1}, windows.Config{})
	e.mustAcquire("10.244.1.0/28")
	e.mustConverge([]subnet.Lease{a})
	e.mustConverge(nil)
	collect(e)
	g := newWinNode(t, mustConfig(t, hostgwConf), "192.168.1.10", hns10, windows.Config{})
	g.mustAcquire("10.244.1.0/24")
	collect(g)

	for _, k := range []string{
		"create-network-overlay", "create-network-l2bridge", "deletenetwork",
		"network-add-remotesubnetroute", "network-remove-remotesubnetroute", "network-add-hostroute",
		"create-endpoint-remote", "create-endpoint-host", "deleteendpoint",
		"host-attach",
	} {
		r, ok := kinds[k]
		if !ok {
			t.Errorf("no %s request was made", k)
			continue
		}
		var b bytes.Buffer
		if err := json.Indent(&b, mustMarshal(t, r), "", "  "); err != nil {
			t.Fatal(err)
		}
		golden(t, filepath.Join("testdata", "requests", k+".json"), b.String()+"\n")
		delete(kinds, k)
	}
	for k := range kinds {
		t.Errorf("request kind %s has no golden file", k)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
