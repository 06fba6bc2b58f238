package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/internal/buildinfo"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnsfile"
	"github.com/weftnet/weft/windows/hnstest"
)

// The Windows programs of the pod tests, built once per test run into .cache/wine-bin of the
// repository (Go's build cache makes a rebuild of unchanged sources a link at most):
// weftd.exe and weft.exe from this module, win-overlay.exe, win-bridge.exe and
// host-local.exe of containernetworking/plugins from tools/go.mod, and wincni.exe, the
// containerd-shaped pod runner, from tools/wincni.
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
		dir := filepath.Join(repo, ".cache", "wine-bin")
		outDir := dir + string(filepath.Separator)
		for _, b := range []struct {
			dir  string
			args []string
		}{
			{repo, []string{"-tags=" + buildinfo.Tags, "-o", outDir, "./cmd/weftd", "./cmd/weft", "./cmd/weftctl"}},
			{filepath.Join(repo, "tools"), []string{"-mod=readonly", "-o", outDir,
				"github.com/containernetworking/plugins/plugins/main/windows/win-overlay",
				"github.com/containernetworking/plugins/plugins/main/windows/win-bridge",
				"github.com/containernetworking/plugins/plugins/ipam/host-local"}},
			{filepath.Join(repo, "tools", "wincni"), []string{"-mod=readonly", "-o", filepath.Join(dir, "wincni.exe"), "."}},
		} {
			args := append([]string{"build"}, b.args...)
			cmd := exec.Command("go", args...)
			cmd.Dir = b.dir
			cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				windowsPrograms.err = fmt.Errorf("go %s in %s (GOOS=windows): %w\n%s", strings.Join(args, " "), b.dir, err, out)
				return
			}
		}
		windowsPrograms.dir = dir
		t.Logf("Windows programs built in %v", time.Since(start).Round(time.Millisecond))
	})
	if windowsPrograms.err != nil {
		t.Fatal(windowsPrograms.err)
	}
	return windowsPrograms.dir
}

// driveC is a path of the node's drive C: as a path here.
func (w *wineNode) driveC(winPath string) string {
	rel := strings.TrimPrefix(strings.ReplaceAll(winPath, `\`, "/"), "C:/")
	return filepath.Join(w.prefix, "drive_c", rel)
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
		host = windowsHost(t, w.Node)
	}
	w.serveHNS(host)
	bin := w.driveC(`C:\opt\cni\bin`)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, exe := range []string{"weft.exe", "win-overlay.exe", "win-bridge.exe", "host-local.exe"} {
		if out, err := exec.Command("cp", filepath.Join(programs, exe), bin).CombinedOutput(); err != nil {
			t.Fatalf("installing %s: %v\n%s", exe, err, out)
		}
	}
	// WaitReady and the tests read subnet.env where weftd.exe writes it.
	w.subnetFile = `C:\run\flannel\subnet.env`
	w.SubnetFile = w.driveC(w.subnetFile)
	w.start(w.weftdArgv(filepath.Join(programs, "weftd.exe")))
	return w
}

// installConflist puts the CNI configuration list where the runtime reads it.
func (w *wineNode) installConflist(t *testing.T, conf []byte) {
	t.Helper()
	dir := w.driveC(`C:\etc\cni\net.d`)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "10-weft.conflist"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// podRunner is wincni.exe under Wine in the node, taking a pod through its steps as
// containerd would.
type podRunner struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    chan string
	stderr *lockedBuffer
}

// lockedBuffer is wincni.exe's standard error, written by exec's copier while a failing step
// reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// podAnswer is one step's answer (see tools/wincni).
type podAnswer struct {
	Step   string
	Error  string
	Netns  string
	Result []struct {
		Interfaces []struct{ Name, Mac string }
		IPs        []struct {
			Address string
			Gateway string
		}
	}
	Closed *bool
}

// runPods starts wincni.exe in the node for the pod sandbox id, the pod's DNS config
// being kubeadm's cluster DNS. Its working directory is the prefix's drive C:, so that
// what the CNI library and host-local keep under \var\lib\cni is on drive C:, as on a real
// node.
func (w *wineNode) runPod(t *testing.T, programs, id string) *podRunner {
	t.Helper()
	argv := w.wine(filepath.Join(programs, "wincni.exe"), "--id="+id,
		`--conf-dir=C:\etc\cni\net.d`, `--bin-dir=C:\opt\cni\bin`, "--name=web", "--namespace=default",
		"--uid=6b2f1c9e-2d1f-4a55-9a8e-0c7d3e5f1a20", "--dns-servers=10.96.0.10",
		"--dns-searches=default.svc.cluster.local,svc.cluster.local")
	cmd := exec.Command("ip", append([]string{"netns", "exec", w.NS}, argv...)...)
	cmd.Dir = filepath.Join(w.prefix, "drive_c")
	p := &podRunner{t: t, cmd: cmd, out: make(chan string), stderr: &lockedBuffer{}}
	cmd.Stderr = p.stderr
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			p.out <- lines.Text()
		}
		close(p.out)
	}()
	t.Cleanup(func() {
		p.in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("wincni.exe's standard error (the plugins' log):\n%s", p.stderr)
		}
	})
	return p
}

// step runs one step and returns its answer; a step that fails fails the test.
func (p *podRunner) step(step string) podAnswer {
	p.t.Helper()
	start := time.Now()
	if _, err := io.WriteString(p.in, step+"\n"); err != nil {
		p.t.Fatalf("%s: %v\n%s", step, err, p.stderr)
	}
	select {
	case line, ok := <-p.out:
		if !ok {
			p.t.Fatalf("%s: wincni.exe exited\n%s", step, p.stderr)
		}
		var a podAnswer
		if err := json.Unmarshal([]byte(line), &a); err != nil || a.Step != step {
			p.t.Fatalf("%s: answer %q (%v)", step, line, err)
		}
		if a.Error != "" {
			p.t.Fatalf("%s: %s\nplugins' log:\n%s", step, a.Error, p.stderr)
		}
		p.t.Logf("%s: %s (%v)", step, line, time.Since(start).Round(time.Millisecond))
		return a
	case <-time.After(2 * time.Minute):
		p.t.Fatalf("%s: no answer after 2 minutes\n%s", step, p.stderr)
	}
	return podAnswer{}
}

// podCase is what one backend's pod should get.
type podCase struct {
	network  string // the HNS network, and the CNI network the delegate is named after
	delegate string // win-overlay or win-bridge
	overlay  bool
}

// shippedConflist is dist/cni/10-weft-windows.conflist, for the backend's network and
// delegate as the Helm chart makes it for host-gw (its name and delegate type are all that
// differ).
func shippedConflist(t *testing.T, repo string, pc podCase) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "dist", "cni", "10-weft-windows.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	if pc.overlay {
		return data
	}
	var list map[string]any
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	list["name"] = pc.network
	list["plugins"].([]any)[0].(map[string]any)["delegate"].(map[string]any)["type"] = pc.delegate
	if data, err = json.Marshal(list); err != nil {
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
		testWindowsPod(t, windowsConf, podCase{network: "flannel.4096", delegate: "win-overlay", overlay: true})
	})
	t.Run("host-gw", func(t *testing.T) {
		testWindowsPod(t, hostGWConf, podCase{network: "cbr0", delegate: "win-bridge"})
	})
}

func testWindowsPod(t *testing.T, netConf string, pc podCase) {
	bins, repo := needWine(t)
	programs := buildWindowsPrograms(t, repo)
	start := time.Now()
	c := newWineCluster(t, bins, netConf)
	startLinuxPeers(t, c, repo, bins.weftd, []string{"n1"}, "")
	w := startWindowsNode(t, c, repo, programs, "w2", !pc.overlay)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("HNS:\n%s", w.hns.Render())
		}
	})
	env, err := w.SubnetEnv()
	if err != nil {
		t.Fatal(err)
	}
	sn := env.Subnet.Masked()
	network, err := w.hns.NetworkByName(pc.network)
	if err != nil {
		t.Fatal(err)
	}
	hnsFile, err := hnsfile.Read(w.SubnetFile)
	if err != nil || hnsFile.Name != pc.network {
		t.Fatalf("%s next to subnet.env: %+v, %v; want the network %s", hnsfile.NetworkFile, hnsFile, err, pc.network)
	}
	if pc.overlay != hnsFile.SourceVIP.IsValid() {
		t.Fatalf("kube-proxy's source VIP %v in %s: want one on overlay only", hnsFile.SourceVIP, hnsfile.SourceVIPFile)
	}
	conf := shippedConflist(t, repo, pc)
	w.installConflist(t, conf)
	w.srv.ResetCalls()

	const sandbox = "3f9a8c1d2e4b5a6978c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2"
	epName := sandbox + "_" + pc.network
	pod := w.runPod(t, programs, sandbox)

	// The namespace, as containerd makes it.
	nsID := pod.step("netns").Netns
	namespace := func() *windows.HostComputeNamespace {
		t.Helper()
		all, err := w.hns.Namespaces()
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
	added := pod.step("add")
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
	if !pc.overlay && ip == hostEP {
		t.Errorf("the pod got the host endpoint's address %s", ip)
	}
	endpoint := func() *windows.HostComputeEndpoint {
		t.Helper()
		all, err := w.hns.Endpoints()
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
		t.Errorf("endpoint %s: network %s, addresses %v; want %s on %s (%s)", epName, ep.HostComputeNetwork, ep.IPs(), ip, network.ID, pc.network)
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
	if pc.overlay {
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
	if !pc.overlay {
		gw = hostEP
		if eps, err := w.hns.NetworkEndpoints(network.ID); err != nil || !slices.ContainsFunc(eps, func(ep windows.HostComputeEndpoint) bool {
			return ep.IP() == hostEP
		}) {
			t.Errorf("no host endpoint at the pods' gateway %s: %+v (%v)", hostEP, eps, err)
		}
	}
	var created []struct {
		Name   string
		Routes []windows.Route
	}
	for _, call := range w.srv.Calls() {
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
	if wantPA := []string{w.IP.String()}; pc.overlay && !slices.Equal(pa, wantPA) || !pc.overlay && len(pa) != 0 {
		t.Errorf("endpoint %s provider addresses %v, want the node's %s on overlay only", epName, pa, w.IP)
	}

	// What weft and host-local keep: the delegate configuration (whose range leaves the
	// source VIP out) and the address's reservation.
	kept := w.driveC(`C:\var\lib\cni\flannel\` + sandbox)
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
	if err := json.Unmarshal(data, &d); err != nil || d.Type != pc.delegate || d.APIVersion != 2 {
		t.Errorf("weft's delegate configuration %s (%v): want %s with apiVersion 2", data, err, pc.delegate)
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
	reservation := w.driveC(`C:\var\lib\cni\networks\` + pc.network + `\` + ip.String())
	if _, err := os.Stat(reservation); err != nil {
		t.Errorf("host-local's reservation of %s: %v", ip, err)
	}

	// CHECK, DEL, the namespace's removal.
	pod.step("check")
	pod.step("del")
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
	if rm := pod.step("rmns"); rm.Closed == nil || !*rm.Closed {
		t.Errorf("after the namespace's removal containerd finds it closed: %v, want true", rm.Closed)
	}
	if ns := namespace(); ns != nil {
		t.Errorf("namespace %s is still in HNS after its removal", nsID)
	}
	w.refused()
	deletes := 0
	for _, call := range w.srv.Calls() {
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
