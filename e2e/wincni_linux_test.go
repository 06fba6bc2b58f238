package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/e2e/winnode"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnsfile"
	"github.com/weftnet/weft/windows/hnstest"
)

// windowsPrograms are the Windows programs of the pod tests (winnode.BuildPrograms), built
// once per test run.
var windowsPrograms struct {
	once sync.Once
	dir  string
	err  error
}

// buildWindowsPrograms builds them (see windowsPrograms) and returns their directory.
func buildWindowsPrograms(t *testing.T, repo string) string {
	t.Helper()
	windowsPrograms.once.Do(func() {
		start := time.Now()
		windowsPrograms.dir, windowsPrograms.err = winnode.BuildPrograms(repo)
		t.Logf("Windows programs built in %v", time.Since(start).Round(time.Millisecond))
	})
	if windowsPrograms.err != nil {
		t.Fatal(windowsPrograms.err)
	}
	return windowsPrograms.dir
}

// startWindowsNode adds a node running weftd.exe under Wine (see TestWindowsNodeUnderWine
// for how), with the Windows paths of a real node inside its Wine prefix's drive C:
// subnet.env at flannel's C:\run\flannel\subnet.env, the CNI plugins of programs in
// C:\opt\cni\bin (and the CNI configuration in C:\etc\cni\net.d: installConflist), as
// weft.yaml's Windows DaemonSet installs them; it waits until the node is ready. For host-gw
// its HNS has a simulated host (see TestWindowsHostGWUnderWine).
func startWindowsNode(t *testing.T, c *cluster.Cluster, repo, programs, name string, hostGW bool) *wineNode {
	t.Helper()
	w := newWineNode(t, c, repo, name)
	var host *hnstest.Host
	if hostGW {
		host = windowsHost(t, w.Node.Node)
	}
	w.ServeHNS(host)
	w.InstallPlugins(programs, "weft.exe", "win-overlay.exe", "win-bridge.exe", "host-local.exe")
	// WaitReady and the tests read subnet.env where weftd.exe writes it.
	w.UseSubnetFile()
	w.start(w.weftdArgv(filepath.Join(programs, "weftd.exe")))
	return w
}

// shippedConflist is the shipped Windows CNI configuration for pn (winnode.ShippedConflist).
func shippedConflist(t *testing.T, repo string, pn winnode.PodNetwork) []byte {
	t.Helper()
	data, err := winnode.ShippedConflist(repo, pn)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// conflistPolicies are the policies of the configuration's delegate, by type.
func conflistPolicies(t *testing.T, conf []byte) map[string]json.RawMessage {
	t.Helper()
	var list struct {
		Plugins []struct {
			Delegate struct {
				Policies []struct{ Value windows.Policy }
			}
		}
	}
	if err := json.Unmarshal(conf, &list); err != nil || len(list.Plugins) == 0 {
		t.Fatalf("the CNI configuration %s: %v", conf, err)
	}
	out := map[string]json.RawMessage{}
	for _, p := range list.Plugins[0].Delegate.Policies {
		out[string(p.Value.Type)] = p.Value.Settings
	}
	return out
}

// TestWindowsPodUnderWine: a Windows pod, end to end, with the real programs. In the netns
// cluster, beside a Linux weftd node, a node runs weftd.exe under Wine against the
// simulated HNS (as in TestWindowsNodeUnderWine and TestWindowsHostGWUnderWine), with the
// shipped Windows CNI configuration installed (unchanged for vxlan; for host-gw named cbr0
// with win-bridge, as the Helm chart makes it); wincni.exe, built from containerd's
// pkg/netns and go-cni, makes the pod's HNS namespace and calls the CNI as containerd's CRI
// plugin does; weft.exe hands the pod to the real win-overlay.exe (vxlan) or
// win-bridge.exe (host-gw), which run the real host-local.exe, all under Wine. Checked
// after ADD, in the simulated HNS and in the result: the endpoint named as the plugins
// name it, on the node's network, attached to the namespace containerd made; its address,
// in the node's subnet and neither kube-proxy's source VIP (sourceVip.json, which the
// delegate's range leaves out) nor the host endpoint's; its default route via the
// network's gateway (host-gw: the host endpoint), as sent and as HNS answered it (the
// result's gateway); the configuration's OutBoundNAT exceptions and SDNRoute, and on
// overlay the ProviderAddress win-overlay adds (the node's address) and the MAC it derives;
// the pod's DNS config. CHECK passes; after DEL the endpoint, its address's reservation and
// weft's stored delegate configuration are gone, and the namespace stays, empty, until
// containerd removes it with HcnDeleteNamespace. No call was refused as one HNS does not
// take. (A dual-stack node's pods would get IPv4 only: win-bridge and win-overlay v1.9.0
// give an endpoint the first address of the IPAM result alone.)
func TestWindowsPodUnderWine(t *testing.T) {
	t.Run("vxlan", func(t *testing.T) {
		testWindowsPod(t, windowsConf, winnode.PodNetwork{Network: "flannel.4096", Delegate: "win-overlay", Overlay: true})
	})
	t.Run("host-gw", func(t *testing.T) {
		testWindowsPod(t, hostGWConf, winnode.PodNetwork{Network: "cbr0", Delegate: "win-bridge"})
	})
}

func testWindowsPod(t *testing.T, netConf string, pc winnode.PodNetwork) {
	bins, repo := needWine(t)
	programs := buildWindowsPrograms(t, repo)
	start := time.Now()
	c := newWineCluster(t, bins, netConf)
	startLinuxPeers(t, c, repo, bins.weftd, []string{"n1"}, "")
	w := startWindowsNode(t, c, repo, programs, "w2", !pc.Overlay)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("HNS:\n%s", w.HNS.Render())
		}
	})
	env, err := w.SubnetEnv()
	if err != nil {
		t.Fatal(err)
	}
	sn := env.Subnet.Masked()
	network, err := w.HNS.NetworkByName(pc.Network)
	if err != nil {
		t.Fatal(err)
	}
	hnsFile, err := hnsfile.Read(w.SubnetFile)
	if err != nil || hnsFile.Name != pc.Network {
		t.Fatalf("%s next to subnet.env: %+v, %v; want the network %s", hnsfile.NetworkFile, hnsFile, err, pc.Network)
	}
	if pc.Overlay != hnsFile.SourceVIP.IsValid() {
		t.Fatalf("kube-proxy's source VIP %v in %s: want one on overlay only", hnsFile.SourceVIP, hnsfile.SourceVIPFile)
	}
	conf := shippedConflist(t, repo, pc)
	w.InstallConflist(conf)
	w.Server.ResetCalls()

	const sandbox = "3f9a8c1d2e4b5a6978c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2"
	epName := sandbox + "_" + pc.Network
	pod := w.RunPod(programs, sandbox)

	// The namespace, as containerd makes it.
	nsID := pod.Step("netns").Netns
	namespace := func() *windows.HostComputeNamespace {
		t.Helper()
		all, err := w.HNS.Namespaces()
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range all {
			if strings.EqualFold(ns.ID, nsID) {
				return &ns
			}
		}
		return nil
	}
	if namespace() == nil {
		t.Fatalf("the namespace %s containerd made is not in HNS", nsID)
	}

	// ADD.
	added := pod.Step("add")
	if len(added.Result) != 1 || len(added.Result[0].IPs) != 1 {
		t.Fatalf("ADD result %+v: want one network with one address", added.Result)
	}
	res := added.Result[0]
	addr, err := netip.ParsePrefix(res.IPs[0].Address)
	if err != nil || addr.Masked() != sn || addr.Addr() == sn.Addr() || addr.Addr() == subnet.LastAddr(sn) {
		t.Errorf("the pod's address %q: want a host address of the node's subnet %s", res.IPs[0].Address, sn)
	}
	ip := addr.Addr()
	if hnsFile.SourceVIP.IsValid() && ip == hnsFile.SourceVIP {
		t.Errorf("the pod got kube-proxy's source VIP %s", ip)
	}
	// host-gw: .2 is the host endpoint's, weftd's cbr0_ep, which win-bridge makes the pods'
	// gateway.
	hostEP := sn.Addr().Next().Next()
	if !pc.Overlay && ip == hostEP {
		t.Errorf("the pod got the host endpoint's address %s", ip)
	}
	endpoint := func() *windows.HostComputeEndpoint {
		t.Helper()
		all, err := w.HNS.Endpoints()
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range all {
			if ep.Name == epName {
				return &ep
			}
		}
		return nil
	}
	ep := endpoint()
	if ep == nil {
		t.Fatalf("no endpoint %s in HNS", epName)
	}
	if !strings.EqualFold(ep.HostComputeNetwork, network.ID) || ep.IP() != ip || len(ep.IPs()) != 1 {
		t.Errorf("endpoint %s: network %s, addresses %v; want %s on %s (%s)", epName, ep.HostComputeNetwork, ep.IPs(), ip, network.ID, pc.Network)
	}
	if !strings.EqualFold(ep.HostComputeNamespace, nsID) {
		t.Errorf("endpoint %s is attached to namespace %q, want %s, containerd's", epName, ep.HostComputeNamespace, nsID)
	}
	ns := namespace()
	if ns == nil || !slices.ContainsFunc(ns.Resources, func(r windows.NamespaceResource) bool {
		var d windows.NamespaceResourceEndpoint
		return r.Type == "Endpoint" && json.Unmarshal(r.Data, &d) == nil && strings.EqualFold(d.ID, ep.ID)
	}) {
		t.Errorf("namespace %s does not list endpoint %s: %+v", nsID, ep.ID, ns)
	}
	if pc.Overlay {
		// win-overlay derives the MAC from the address (endpointMacPrefix 0E-2A).
		a := ip.As4()
		if want := fmt.Sprintf("0E-2A-%02x-%02x-%02x-%02x", a[0], a[1], a[2], a[3]); !strings.EqualFold(ep.MacAddress, want) {
			t.Errorf("endpoint MAC %s, want %s", ep.MacAddress, want)
		}
	}
	if !slices.Equal(ep.DNS.ServerList, []string{"10.96.0.10"}) || !slices.Equal(ep.DNS.Search, []string{"default.svc.cluster.local", "svc.cluster.local"}) {
		t.Errorf("endpoint DNS %+v: want the pod's DNS config (the dns capability)", ep.DNS)
	}

	// The default route: the gateway win-overlay reads from the network (HNS v1's
	// GatewayAddress), win-bridge's the subnet's .2 (the host endpoint); sent in the
	// create request and read back from HNS's answer into the result.
	gw := sn.Addr().Next()
	if !pc.Overlay {
		gw = hostEP
		if eps, err := w.HNS.NetworkEndpoints(network.ID); err != nil || !slices.ContainsFunc(eps, func(ep windows.HostComputeEndpoint) bool {
			return ep.IP() == hostEP
		}) {
			t.Errorf("no host endpoint at the pods' gateway %s: %+v (%v)", hostEP, eps, err)
		}
	}
	var created []struct {
		Name   string
		Routes []windows.Route
	}
	for _, call := range w.Server.Calls() {
		var body struct {
			Name   string
			Routes []windows.Route
		}
		if call.Name == "HcnCreateEndpoint" && json.Unmarshal([]byte(call.Body), &body) == nil && body.Name == epName {
			created = append(created, body)
		}
	}
	if len(created) != 1 || len(created[0].Routes) != 1 || created[0].Routes[0].NextHop != gw.String() ||
		created[0].Routes[0].DestinationPrefix != "0.0.0.0/0" {
		t.Errorf("endpoint %s was created with %+v; want once, with the one route 0.0.0.0/0 via %s", epName, created, gw)
	}
	if res.IPs[0].Gateway != gw.String() {
		t.Errorf("the result's gateway %q (HNS's answer's Routes[0]): want %s", res.IPs[0].Gateway, gw)
	}

	// The policies: the configuration's, in HNS v2's form, and the ProviderAddress win-overlay
	// adds on overlay.
	want := conflistPolicies(t, conf)
	got := map[string][]json.RawMessage{}
	for _, p := range ep.Policies {
		got[string(p.Type)] = append(got[string(p.Type)], p.Settings)
	}
	for _, typ := range []string{"OutBoundNAT", "SDNRoute"} {
		if len(got[typ]) != 1 || !jsonSame(got[typ][0], want[typ]) {
			t.Errorf("endpoint %s policies %s: %s, want the configuration's %s", epName, typ, got[typ], want[typ])
		}
	}
	var pa []string
	for _, s := range got["ProviderAddress"] {
		var v struct{ ProviderAddress string }
		if err := json.Unmarshal(s, &v); err != nil {
			t.Fatal(err)
		}
		pa = append(pa, v.ProviderAddress)
	}
	if wantPA := []string{w.IP.String()}; pc.Overlay && !slices.Equal(pa, wantPA) || !pc.Overlay && len(pa) != 0 {
		t.Errorf("endpoint %s provider addresses %v, want the node's %s on overlay only", epName, pa, w.IP)
	}

	// What weft and host-local keep: the delegate configuration (whose range leaves the
	// source VIP out) and the address's reservation.
	kept := w.DriveC(`C:\var\lib\cni\flannel\` + sandbox)
	data, err := os.ReadFile(kept)
	if err != nil {
		t.Fatalf("weft's delegate configuration: %v", err)
	}
	var d struct {
		Type       string
		APIVersion int `json:"apiVersion"`
		IPAM       struct {
			Ranges [][]struct{ Subnet, RangeStart, RangeEnd string }
		}
	}
	if err := json.Unmarshal(data, &d); err != nil || d.Type != pc.Delegate || d.APIVersion != 2 {
		t.Errorf("weft's delegate configuration %s (%v): want %s with apiVersion 2", data, err, pc.Delegate)
	}
	if hnsFile.SourceVIP.IsValid() {
		for _, set := range d.IPAM.Ranges {
			for _, r := range set {
				from, _ := netip.ParseAddr(r.RangeStart)
				to, _ := netip.ParseAddr(r.RangeEnd)
				if (!from.IsValid() || from.Compare(hnsFile.SourceVIP) <= 0) && (!to.IsValid() || hnsFile.SourceVIP.Compare(to) <= 0) {
					t.Errorf("the delegate's range %+v holds the source VIP %s", r, hnsFile.SourceVIP)
				}
			}
		}
	}
	reservation := w.DriveC(`C:\var\lib\cni\networks\` + pc.Network + `\` + ip.String())
	if _, err := os.Stat(reservation); err != nil {
		t.Errorf("host-local's reservation of %s: %v", ip, err)
	}

	// CHECK, DEL, the namespace's removal.
	pod.Step("check")
	pod.Step("del")
	if ep := endpoint(); ep != nil {
		t.Errorf("endpoint %s is still in HNS after DEL: %+v", epName, ep)
	}
	if ns := namespace(); ns == nil || len(ns.Resources) != 0 {
		t.Errorf("namespace %s after DEL: %+v; want it there (containerd removes it) and empty", nsID, ns)
	}
	for _, f := range []string{kept, reservation} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after DEL: %v; want it gone", f, err)
		}
	}
	if rm := pod.Step("rmns"); rm.Closed == nil || !*rm.Closed {
		t.Errorf("after the namespace's removal containerd finds it closed: %v, want true", rm.Closed)
	}
	if ns := namespace(); ns != nil {
		t.Errorf("namespace %s is still in HNS after its removal", nsID)
	}
	w.refused()
	deletes := 0
	for _, call := range w.Server.Calls() {
		if call.Name == "HcnDeleteNamespace" && strings.EqualFold(call.ID, nsID) && call.HResult == 0 {
			deletes++
		}
	}
	if deletes != 1 {
		t.Errorf("HcnDeleteNamespace %s answered %d times, want once", nsID, deletes)
	}
	t.Logf("the pod's path, from the cluster's start: %v", time.Since(start).Round(time.Millisecond))
}

// jsonSame reports whether two JSON documents are the same value.
func jsonSame(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}
