package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/e2e/winnode"
	"github.com/weftnet/weft/internal/hnssim"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnsfile"
)

// windowsServer is a Windows Server release, by the HNS version it reports: what hcsshim's
// and hnslib's feature tables (hcn/hcnglobals.go) gate kube-proxy's load balancers on.
type windowsServer struct {
	name string
	hns  windows.Version
}

// windowsServers are the releases the kube-proxy scene runs at. The numbers come from
// reports, not from a Windows machine: 2019 (build 17763) reported 9.3 (kubernetes issue
// 93304) and, patched, 9.5 (kubernetes pull 137530); 2025 reported 15.4 (kubernetes issue
// 131466, where HcnModifyLoadBalancer answered success without changing the endpoints, so
// hnslib v0.1.x asks for 15.5 before it modifies in place). No report of 2022's (build
// 20348) number was found: 14.0 is taken, the first version with every feature hcsshim
// v0.15.0 names below 2025's NetworkACL (15.0); that it is 2022's is unverified.
var windowsServers = []windowsServer{
	{"2019", windows.Version{Major: 9, Minor: 5}},
	{"2022", windows.Version{Major: 14, Minor: 0}},
	{"2025", windows.Version{Major: 15, Minor: 4}},
}

// kubeProxyExe returns kube-proxy.exe, which tools/kube/install-kube.sh builds for Windows
// (`make deps` does), or skips the test without it.
func kubeProxyExe(t *testing.T, repo string) string {
	t.Helper()
	exe := filepath.Join(repo, ".cache", "kube", "bin", "kube-proxy.exe")
	if _, err := os.Stat(exe); err != nil {
		t.Skipf("kube-proxy.exe missing (tools/kube/install-kube.sh .cache/kube/bin kube-proxy.exe builds it): %v", err)
	}
	return exe
}

// proxyService is a Service of the scene and the pods behind it (its node port, the API
// server's, in Service.NodePort).
type proxyService struct {
	winnode.Service
	nodePort bool // a NodePort Service
}

// kubeProxyScene is a Windows node in a Kubernetes-mode cluster: weftd.exe in Kubernetes
// mode and the real kube-proxy.exe (kernelspace) under Wine, on the simulated HNS, beside
// Linux nodes running weftd.
type kubeProxyScene struct {
	t          *testing.T
	kc         *kubeCluster
	w          *wineNode
	linux      map[string]*cluster.Node
	weftd      string   // the Linux nodes' weftd
	daemonArgv []string // the Windows node's daemon, weftd.exe or flanneld.exe, under Wine
	network    string
	overlay    bool
	flanneld   bool // the node runs flanneld.exe, not weftd.exe
	// hnsRestart ends the scene with a restart of HNS.
	hnsRestart bool
	dsr        bool
	vip        netip.Addr // weft's source VIP (overlay)
	podIP      netip.Addr // the Windows pod's
	proxyExe   string     // kube-proxy.exe, built for Windows
	programs   string     // weft's Windows programs
	shipped    []string   // the kube-proxy DaemonSet's command line
	proxy      *winnode.KubeProxy
	services   []*proxyService
}

// proxyNamespace holds the scene's Services.
const proxyNamespace = "default"

// TestKubeProxyExeUnderWine: Services on the Windows node. In a Kubernetes-mode netns
// cluster with two Linux nodes running weftd, a Windows node runs weftd.exe in Kubernetes
// mode under Wine (its Node registered as the kubelet registers a Windows node: the label
// kubernetes.io/os=windows, its podCIDR and InternalIP; kubelet.exe cannot run here) and
// the real kube-proxy.exe of the Kubernetes version tools/kube pins, in kernelspace mode, as
// a Windows node starts it (the network's name, the source VIP weftd.exe wrote to
// sourceVip.json), both against the simulated HNS. A Windows pod is made as containerd makes
// it (wincni.exe, win-overlay.exe). Test Services have endpoints on the Linux nodes, on the
// Windows pod and on both. Checked in HNS for every Service, the API server's own among
// them, after each step: kube-proxy's ClusterIP and NodePort load balancers with their
// frontends, ports, source VIP and flags; each backend on a Linux node a remote endpoint
// whose provider address is that node's IP, read by kube-proxy from weft's
// RemoteSubnetRoute policies; the Windows pod's own endpoint; weft's source VIP as
// kube-proxy's and no pod's. Steps: a pod moves to another Linux node, a node joins, a
// node leaves and comes back, weftd.exe restarts (and runs a full Apply every few
// seconds throughout), kube-proxy.exe restarts: the load balancers and endpoints follow,
// and neither program undoes the other's objects (the HNS writes each restart costs are
// logged); at one version, HNS restarts: the network and the pod made again, kube-proxy's
// load balancers and endpoints too. It runs on vxlan at the HNS versions of Windows Server
// 2019, 2022 and 2025 (windowsServers), with and without DSR, and on host-gw (L2Bridge).
func TestKubeProxyExeUnderWine(t *testing.T) {
	bins, repo := needWine(t)
	needKubeAPIServer(t)
	exe := kubeProxyExe(t, repo)
	programs := buildWindowsPrograms(t, repo)
	for _, ws := range windowsServers {
		// 2019 without DSR, as sig-windows-tools' overlay DaemonSet starts it; the later
		// ones with --enable-dsr.
		dsr := ws.name != "2019"
		t.Run(fmt.Sprintf("vxlan/%s/dsr=%v", ws.name, dsr), func(t *testing.T) {
			// One release's scene ends with an HNS restart (it waits for kube-proxy's periodic
			// sync, up to 30 s).
			opts := sceneOptions{version: ws.hns, overlay: true, dsr: dsr, hnsRestart: ws.name == "2022"}
			newKubeProxyScene(t, bins, repo, programs, exe, opts).run()
		})
	}
	ws := windowsServers[1]
	t.Run("host-gw/"+ws.name, func(t *testing.T) {
		newKubeProxyScene(t, bins, repo, programs, exe, sceneOptions{version: ws.hns}).run()
	})
}

// TestKubeProxyExeFlanneldExe: kube-proxy.exe cannot tell which daemon runs the node. The
// first steps of TestKubeProxyExeUnderWine's scene (kube-proxy.exe starts, a pod moves to
// another node, a node joins), on HNS 14.0 with DSR, run once with weftd.exe and once with
// the real flanneld.exe (Kubernetes mode, under Wine, the same flags) on the Windows node,
// kube-proxy.exe started on flanneld's network with the same network name and source VIP
// (flanneld writes no sourceVip.json: sig-windows-tools' scripts pick it): every request
// kube-proxy.exe makes of HNS that changes something (load balancers, its endpoints) is the
// same, body for body, once what differs from run to run is named (object IDs, the Service
// IPs and node ports the API server picks, the node's MAC); differences listed in
// kubeProxyIntended fail the test when they stop happening.
func TestKubeProxyExeFlanneldExe(t *testing.T) {
	bins, repo := needWine(t)
	needKubeAPIServer(t)
	exe := kubeProxyExe(t, repo)
	flanneldExe := needFlanneldExe(t, repo)
	programs := buildWindowsPrograms(t, repo)
	opts := sceneOptions{version: windowsServers[1].hns, overlay: true, dsr: true}
	var runs [2][]string
	for i, daemon := range []string{"", flanneldExe} {
		opts.flanneldExe = daemon
		name := map[bool]string{false: "weftd.exe", true: "flanneld.exe"}[daemon != ""]
		t.Run(name, func(t *testing.T) {
			s := newKubeProxyScene(t, bins, repo, programs, exe, opts)
			s.firstSteps()
			runs[i] = s.proxyRequests(s.w.Server.Calls())
			t.Logf("kube-proxy.exe's %d HNS requests that change something, on %s's network:\n%s", len(runs[i]), name, strings.Join(runs[i], "\n"))
		})
	}
	if t.Failed() {
		return
	}
	for _, p := range compareProxyRequests(runs[0], runs[1], kubeProxyIntended) {
		t.Error(p)
	}
}

// kubeProxyIntended are the differences between kube-proxy.exe's requests on weftd.exe's
// network and on flanneld.exe's, each with why: none.
var kubeProxyIntended = map[string]string{}

// compareProxyRequests lists how two runs' requests differ, as a multiset: a request one
// run made more often than the other, unless intended lists it (then its not differing any
// more is listed).
func compareProxyRequests(weftd, flanneld []string, intended map[string]string) []string {
	count := func(rs []string) map[string]int {
		m := map[string]int{}
		for _, r := range rs {
			m[r]++
		}
		return m
	}
	a, b := count(weftd), count(flanneld)
	var problems []string
	keys := slices.Sorted(maps.Keys(mapUnion(a, b)))
	for _, k := range keys {
		_, listed := intended[k]
		switch {
		case a[k] != b[k] && !listed:
			problems = append(problems, fmt.Sprintf("kube-proxy.exe asked %d times on weftd.exe's network, %d times on flanneld.exe's: %s", a[k], b[k], k))
		case a[k] == b[k] && listed:
			problems = append(problems, fmt.Sprintf("a listed difference no longer happens (%s): %s", intended[k], k))
		}
	}
	return problems
}

// sceneOptions vary the kube-proxy scene.
type sceneOptions struct {
	version     windows.Version // HNS's
	overlay     bool            // vxlan; else host-gw
	dsr         bool            // kube-proxy.exe --enable-dsr
	flanneldExe string          // if set, the node runs flanneld.exe in weftd.exe's place
	hnsRestart  bool            // the scene ends with a restart of HNS
}

// newKubeProxyScene starts the cluster, the Windows node with its pod and kube-proxy.exe.
func newKubeProxyScene(t *testing.T, bins binaries, repo, programs, exe string, opts sceneOptions) *kubeProxyScene {
	t.Helper()
	overlay := opts.overlay
	s := &kubeProxyScene{t: t, proxyExe: exe, programs: programs, shipped: shippedKubeProxy(t, repo), dsr: opts.dsr, overlay: overlay,
		flanneld: opts.flanneldExe != "", hnsRestart: opts.hnsRestart, linux: map[string]*cluster.Node{}}
	b, pc := backend{"vxlan", windowsConf}, winnode.PodNetwork{Network: "flannel.4096", Delegate: "win-overlay", Overlay: true}
	if !overlay {
		b, pc = backend{"host-gw", hostGWConf}, winnode.PodNetwork{Network: "cbr0", Delegate: "win-bridge"}
	}
	s.network = pc.Network
	// No daemon by default: the Windows node's is not a Linux weftd.
	s.kc = newKubeClusterWith(t, bins, b, "", kubeClusterOptions{})
	s.weftd = bins.weftd
	s.addLinux(1, 2)

	w := newWineNode(t, s.kc.Cluster, repo, "w3")
	w.Version = opts.version
	s.w = w
	if w.Index != 3 {
		t.Fatalf("the Windows node has index %d, want 3", w.Index)
	}
	s.registerWindowsNode()
	if overlay {
		w.ServeHNS(nil)
	} else {
		w.ServeHNS(windowsHost(t, w.Node.Node))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("HNS:\n%s", w.HNS.Render())
			s.logLoadBalancers()
			if s.proxy != nil {
				t.Logf("kube-proxy.exe's log, its last lines:\n%s", s.proxy.LogTail(60))
			}
		}
	})
	w.InstallKubeProxy(exe)
	w.InstallPlugins(programs, "weft.exe", pc.Delegate+".exe", "host-local.exe")
	w.UseSubnetFile()
	kubeFlags := []string{"--kube-subnet-mgr", "--kubeconfig-file=" + winnode.Path(w.KubeconfigPath), "--net-config-path=" + winnode.Path(w.NetConfPath),
		"--subnet-file=" + w.WinSubnetFile, "--iface=" + w.IP.String()}
	if s.flanneld {
		s.daemonArgv = w.Wine(opts.flanneldExe, append(kubeFlags, "--healthz-ip=127.0.0.1", fmt.Sprintf("--healthz-port=%d", cluster.HealthzPort))...)
	} else {
		// A full Apply every 2 s, so that every step below also runs across weft's full
		// diffs of the network, which list its endpoints.
		s.daemonArgv = w.Wine(filepath.Join(programs, "weftd.exe"), append(kubeFlags, "--resync-interval=2s")...)
	}
	w.start(s.daemonArgv)
	s.waitRSRs("the Linux nodes")

	if s.flanneld {
		// flanneld writes no sourceVip.json; kube-proxy gets the address weftd would keep.
		s.vip = windows.SourceVIP(cluster.PodCIDR(w.Index))
	} else {
		files, err := hnsfile.Read(w.SubnetFile)
		if err != nil || files.SourceVIP.IsValid() != overlay {
			t.Fatalf("the files next to subnet.env: %+v, %v; want a source VIP on overlay only", files, err)
		}
		s.vip = files.SourceVIP
	}

	w.InstallConflist(shippedConflist(t, repo, pc))
	s.podIP = s.addPod("6d1e0c2b3a4f5968778695a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4")

	s.services = []*proxyService{
		{Service: winnode.Service{Name: "linux", Protocol: corev1.ProtocolTCP, Port: 80, Target: 8080,
			Endpoints: []winnode.Endpoint{{IP: cluster.PodCIDR(1).Addr().Next().Next(), Node: "n1"}, {IP: cluster.PodCIDR(2).Addr().Next().Next(), Node: "n2"}}}, nodePort: true},
		{Service: winnode.Service{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, Target: 5353,
			Endpoints: []winnode.Endpoint{{IP: cluster.PodCIDR(2).Addr().Next().Next().Next(), Node: "n2"}}}},
		{Service: winnode.Service{Name: "windows", Protocol: corev1.ProtocolTCP, Port: 80, Target: 80, Local: true,
			Endpoints: []winnode.Endpoint{{IP: s.podIP, Node: "w3"}}}, nodePort: true},
		{Service: winnode.Service{Name: "both", Protocol: corev1.ProtocolTCP, Port: 8443, Target: 443, Affinity: true,
			Endpoints: []winnode.Endpoint{{IP: s.podIP, Node: "w3"}, {IP: cluster.PodCIDR(1).Addr().Next().Next().Next(), Node: "n1"}}}},
	}
	for _, svc := range s.services {
		s.createService(svc)
	}
	s.createAPIServerSlice()
	s.startProxy()
	return s
}

// addLinux adds the Linux nodes n<i>, as a cluster would: the Node object with its podCIDR,
// then weftd; it waits until each is ready.
func (s *kubeProxyScene) addLinux(indices ...int) {
	s.t.Helper()
	var nodes []*cluster.Node
	for _, i := range indices {
		name := fmt.Sprintf("n%d", i)
		s.kc.createNode(s.t, name, cluster.PodCIDR(i))
		n, err := s.kc.AddNode(name)
		if err != nil {
			s.t.Fatal(err)
		}
		if n.Index != i {
			s.t.Fatalf("node %s has index %d, so its podCIDR %s would not match", name, n.Index, cluster.PodCIDR(i))
		}
		if err := n.StartDaemon(append([]string{s.weftd}, n.WeftdArgs()...)...); err != nil {
			s.t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		if err := n.WaitReady(readyTimeout); err != nil {
			s.t.Fatal(err)
		}
		s.linux[n.Name] = n
	}
}

// addPod makes a pod of sandbox id on the Windows node as containerd does (a namespace, the
// CNI's ADD) and returns its address, which must not be kube-proxy's source VIP.
func (s *kubeProxyScene) addPod(id string) netip.Addr {
	s.t.Helper()
	pod := s.w.RunPod(s.programs, id)
	pod.Step("netns")
	added := pod.Step("add")
	if len(added.Result) != 1 || len(added.Result[0].IPs) != 1 {
		s.t.Fatalf("the Windows pod's ADD result %+v", added.Result)
	}
	addr, err := netip.ParsePrefix(added.Result[0].IPs[0].Address)
	if err != nil {
		s.t.Fatal(err)
	}
	if s.overlay && addr.Addr() == s.vip {
		s.t.Fatalf("the Windows pod got kube-proxy's source VIP %s", s.vip)
	}
	return addr.Addr()
}

// registerWindowsNode creates the Windows node's Node object as the kubelet registers a
// Windows node (winnode.NodeObject), with its podCIDR, the controller-manager's.
func (s *kubeProxyScene) registerWindowsNode() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	cidr := cluster.PodCIDR(s.w.Index).String()
	want := s.w.NodeObject(corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}})
	node, err := s.kc.admin.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	node.Status = want.Status
	if _, err := s.kc.admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// createService creates svc and its EndpointSlice, and reads back its cluster IP and node
// port.
func (s *kubeProxyScene) createService(svc *proxyService) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	spec := corev1.ServiceSpec{
		Type:  corev1.ServiceTypeClusterIP,
		Ports: []corev1.ServicePort{{Name: "p", Protocol: svc.Protocol, Port: svc.Port, TargetPort: intstr.FromInt32(svc.Target)}},
	}
	if svc.nodePort {
		spec.Type = corev1.ServiceTypeNodePort
		if svc.Local {
			spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
	}
	if svc.Affinity {
		spec.SessionAffinity = corev1.ServiceAffinityClientIP
	}
	made, err := s.kc.admin.CoreV1().Services(proxyNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	if svc.ClusterIP, err = netip.ParseAddr(made.Spec.ClusterIP); err != nil {
		s.t.Fatalf("Service %s: cluster IP %q: %v", svc.Name, made.Spec.ClusterIP, err)
	}
	svc.NodePort = made.Spec.Ports[0].NodePort
	if _, err := s.kc.admin.DiscoveryV1().EndpointSlices(proxyNamespace).Create(ctx, s.slice(svc), metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// createAPIServerSlice creates the EndpointSlice of the Service kubernetes, the API
// server's address, as the API server's endpoint reconciler writes it (kubetest's API
// server runs without one).
func (s *kubeProxyScene) createAPIServerSlice() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	name, proto, port, ready := "https", corev1.ProtocolTCP, int32(6443), true
	_, err := s.kc.admin.DiscoveryV1().EndpointSlices(proxyNamespace).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Labels: map[string]string{
			discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "endpointslicemirroring-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{cluster.APIServerHost}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
	}, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
}

// slice is svc's EndpointSlice, as the EndpointSlice controller writes it for ready pods.
func (s *kubeProxyScene) slice(svc *proxyService) *discoveryv1.EndpointSlice {
	name, proto, port := "p", svc.Protocol, svc.Target
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name + "-1", Labels: map[string]string{
			discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "weft-e2e"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
	}
	ready := true
	for _, b := range svc.Endpoints {
		node := b.Node
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{b.IP.String()}, NodeName: &node,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready},
		})
	}
	return es
}

// setBackends replaces svc's pods, as the EndpointSlice controller does when pods move.
func (s *kubeProxyScene) setBackends(svc *proxyService, backends []winnode.Endpoint) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	svc.Endpoints = backends
	es, err := s.kc.admin.DiscoveryV1().EndpointSlices(proxyNamespace).Get(ctx, svc.Name+"-1", metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	want := s.slice(svc)
	es.Endpoints = want.Endpoints
	if _, err := s.kc.admin.DiscoveryV1().EndpointSlices(proxyNamespace).Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// shippedKubeProxy is the command line of dist/kubernetes/kube-proxy-windows.yaml's
// container (winnode.ShippedKubeProxy).
func shippedKubeProxy(t *testing.T, repo string) []string {
	t.Helper()
	argv, err := winnode.ShippedKubeProxy(repo)
	if err != nil {
		t.Fatal(err)
	}
	return argv
}

// startProxy starts kube-proxy.exe on the Windows node as weft's DaemonSet for Windows
// nodes starts it (dist/kubernetes/kube-proxy-windows.yaml, its command line as shipped):
// weftctl.exe kube-proxy, which adds the HNS network's name and the source VIP weftd.exe
// wrote, runs C:\k\kube-proxy.exe in kernelspace mode. The pod's own environment is put in
// by hand: the node's name for $(NODE_NAME), and a kubeconfig for the service account's
// in-cluster configuration (no token is mounted here); --v=3 for the test's log, and
// --enable-dsr=true, the DaemonSet's commented line, for a scene with DSR.
func (s *kubeProxyScene) startProxy() {
	s.t.Helper()
	w := s.w
	rc := s.kc.srv.Admin()
	kubeconfig, err := cluster.Kubeconfig(rc.Host, rc.CAData, rc.BearerToken)
	if err != nil {
		s.t.Fatal(err)
	}
	path := filepath.Join(w.Dir, "kube-proxy.kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		s.t.Fatal(err)
	}
	var argv []string
	if s.flanneld {
		// No weftctl on a flanneld node: kube-proxy.exe with the flags weftctl would add.
		argv = slices.Clone(s.shipped[slices.Index(s.shipped, "--")+1:])
		for i, a := range argv {
			argv[i] = strings.ReplaceAll(a, "$(NODE_NAME)", w.Name)
		}
		argv = append(argv, "--network-name="+s.network, "--source-vip="+s.vip.String())
	} else if argv, err = w.KubeProxyCommand(s.shipped, s.programs); err != nil {
		s.t.Fatal(err)
	}
	argv = append(argv, "--kubeconfig="+winnode.Path(path), "--v=3")
	if s.dsr {
		argv = append(argv, "--enable-dsr=true")
	}
	if s.proxy, err = w.StartKubeProxy(argv, filepath.Join(w.Dir, "kube-proxy.log")); err != nil {
		s.t.Fatal(err)
	}
}

// proxyExited says how kube-proxy.exe (weftctl.exe, its parent) exited, "" while it runs.
func (s *kubeProxyScene) proxyExited() string { return s.proxy.Exited() }

// stopProxy kills kube-proxy.exe, as a crash or a node's restart of its service would.
func (s *kubeProxyScene) stopProxy() {
	s.t.Helper()
	if err := s.proxy.Stop(); err != nil {
		s.t.Fatal(err)
	}
}

// waitRSRs waits until the Windows node reaches each Linux node's podCIDR through its IP,
// and no other: a RemoteSubnetRoute on overlay, a host route on host-gw.
func (s *kubeProxyScene) waitRSRs(what string) {
	s.t.Helper()
	var want []string
	for _, n := range s.linux {
		want = append(want, fmt.Sprintf("%s via %s", cluster.PodCIDR(n.Index), n.IP))
	}
	slices.Sort(want)
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := s.rsrs()
		if slices.Equal(got, want) {
			return
		}
		if !s.w.Running() {
			s.t.Fatalf("%s: weftd.exe exited: %v\n%s", what, s.w.ExitState(), s.w.LogTail(30))
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: routes to peers %q, want %q", what, got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rsrs are the network's RemoteSubnetRoutes (host-gw: the host's routes to peers),
// "<prefix> via <provider address>", sorted.
func (s *kubeProxyScene) rsrs() []string {
	if !s.overlay {
		routes, err := s.w.Host.Routes()
		if err != nil {
			return []string{err.Error()}
		}
		var out []string
		for _, r := range routes {
			if netip.MustParsePrefix("10.244.0.0/16").Contains(r.Dst.Addr()) && r.NextHop.IsValid() && !r.NextHop.IsUnspecified() {
				out = append(out, fmt.Sprintf("%s via %s", r.Dst, r.NextHop))
			}
		}
		slices.Sort(out)
		return out
	}
	out, err := s.w.RemoteSubnetRoutes(s.network)
	if err != nil {
		return []string{err.Error()}
	}
	return out
}

// check compares kube-proxy's objects with every Service (winnode.CheckServices): "" when
// all hold.
func (s *kubeProxyScene) check() string {
	svcs := make([]winnode.Service, len(s.services))
	for i, svc := range s.services {
		svcs[i] = svc.Service
	}
	remote := map[string]netip.Addr{}
	for name, n := range s.linux {
		remote[name] = n.IP
	}
	return s.w.CheckServices(svcs, winnode.Expect{Network: s.network, Overlay: s.overlay, DSR: s.dsr, SourceVIP: s.vip, Remote: remote})
}

// waitServices waits until check holds, or fails the test.
func (s *kubeProxyScene) waitServices(what string) {
	s.t.Helper()
	start := time.Now()
	deadline := start.Add(90 * time.Second)
	for {
		why := s.check()
		if why == "" {
			s.t.Logf("%s: every Service's load balancers hold (%v)", what, time.Since(start).Round(time.Millisecond))
			return
		}
		if exited := s.proxyExited(); exited != "" {
			s.t.Fatalf("%s: kube-proxy.exe exited: %s", what, exited)
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s, after %v:\n%s", what, time.Since(start).Round(time.Second), why)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// loadBalancerIDs are the IDs of HNS's load balancers.
func (s *kubeProxyScene) loadBalancerIDs() []string {
	s.t.Helper()
	ids, err := s.w.LoadBalancerIDs()
	if err != nil {
		s.t.Fatal(err)
	}
	return ids
}

// waitRemade waits until none of the load balancers old is left: a kube-proxy that starts
// deletes every load balancer HNS has and makes its own again.
func (s *kubeProxyScene) waitRemade(old []string) {
	s.t.Helper()
	if err := s.w.WaitRemade(s.proxy, old, 90*time.Second); err != nil {
		s.t.Fatal(err)
	}
}

// logLoadBalancers logs each load balancer with its endpoints, for the record.
func (s *kubeProxyScene) logLoadBalancers() {
	s.t.Logf("load balancers (HNS %s):\n%s", s.w.Version, s.w.RenderLoadBalancers())
}

// kubeProxyObjects renders kube-proxy's objects by ID, so that a change of any shows.
func (s *kubeProxyScene) kubeProxyObjects() string {
	out, err := s.w.KubeProxyObjects()
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// firstSteps: kube-proxy.exe starts, a pod moves from n2 to n1, a node joins.
func (s *kubeProxyScene) firstSteps() {
	s.waitServices("kube-proxy.exe started")
	s.logLoadBalancers()

	// A pod moves from n2 to n1: its endpoint follows, through n1.
	linux := s.services[0]
	s.setBackends(linux, []winnode.Endpoint{linux.Endpoints[0], {IP: cluster.PodCIDR(1).Addr().Next().Next().Next().Next(), Node: "n1"}})
	s.waitServices("a pod moved from n2 to n1")

	// A node joins: its subnet is routed, kube-proxy reaches its pod through it.
	s.addLinux(4)
	s.waitRSRs("n4 joined")
	s.setBackends(linux, append(slices.Clone(linux.Endpoints), winnode.Endpoint{IP: cluster.PodCIDR(4).Addr().Next().Next(), Node: "n4"}))
	s.waitServices("a pod on n4, which joined")
}

// guid is an HNS object ID as hcn writes it.
var guid = regexp.MustCompile(`(?i)\{?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\}?`)

// proxyRequests are kube-proxy's requests among calls that changed something (its load
// balancers, and the endpoints it makes, which have no name), each as its call and body with
// what differs between two runs of the scene named: object IDs, each Service's cluster IP
// and node port, the node's MAC.
func (s *kubeProxyScene) proxyRequests(calls []hnssim.Call) []string {
	var names []string
	for _, svc := range s.services {
		names = append(names, svc.ClusterIP.String(), "<"+svc.Name+" IP>")
		if svc.NodePort != 0 {
			names = append(names, fmt.Sprintf(`"ExternalPort":%d`, svc.NodePort), `"ExternalPort":<`+svc.Name+` node port>`)
		}
	}
	mac := strings.TrimSpace(nodeExec(s.t, s.w.Node.Node, "cat", "/sys/class/net/eth0/address"))
	names = append(names, mac, "<node MAC>", strings.ToUpper(strings.ReplaceAll(mac, ":", "-")), "<node MAC>")
	r := strings.NewReplacer(names...)
	var out []string
	for _, c := range calls {
		if !c.Mutates() || c.HResult != 0 {
			continue
		}
		var named struct{ Name string }
		_ = json.Unmarshal([]byte(c.Body), &named)
		if !strings.Contains(c.Name, "LoadBalancer") && !(strings.Contains(c.Name, "Endpoint") && named.Name == "" && c.Name != "HcnModifyEndpoint") {
			continue
		}
		out = append(out, c.Name+" "+guid.ReplaceAllString(r.Replace(c.Body), "<id>"))
	}
	slices.Sort(out)
	return out
}

// run takes the scene through its steps.
func (s *kubeProxyScene) run() {
	t := s.t
	s.firstSteps()

	// weftd.exe restarts, with kube-proxy's objects in place: it asks HNS for no change,
	// and kube-proxy's objects stay as they are, across its full Applies too.
	before := s.kubeProxyObjects()
	s.w.Server.ResetCalls()
	s.w.stop()
	s.w.start(s.daemonArgv)
	time.Sleep(5 * time.Second) // two full Applies (--resync-interval=2s)
	network, proxy := winnode.Writes(s.w.Server.Calls())
	t.Logf("weftd.exe restarted: HNS writes of the network %v, of load balancers and endpoints %v", network, proxy)
	if len(network)+len(proxy) != 0 {
		t.Errorf("weftd.exe's restart, with kube-proxy idle, wrote to HNS: %v %v\n%s", network, proxy, renderCalls(s.w.Server.Calls()))
	}
	if after := s.kubeProxyObjects(); after != before {
		t.Errorf("kube-proxy's objects changed across weftd.exe's restart:\n%s\nwere\n%s", after, before)
	}
	s.waitRSRs("after weftd.exe's restart")

	// A node leaves and comes back: weft drops its route and puts it back; kube-proxy's
	// objects are untouched by it.
	n2 := s.linux["n2"]
	if _, err := n2.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.kc.deleteNode(t, "n2")
	delete(s.linux, "n2")
	s.waitRSRs("n2 left")
	s.kc.createNode(t, "n2", cluster.PodCIDR(2))
	if err := n2.StartDaemon(append([]string{s.weftd}, n2.WeftdArgs()...)...); err != nil {
		t.Fatal(err)
	}
	if err := n2.WaitReady(readyTimeout); err != nil {
		t.Fatal(err)
	}
	s.linux["n2"] = n2
	s.waitRSRs("n2 came back")
	if after := s.kubeProxyObjects(); after != before {
		t.Errorf("kube-proxy's objects changed while n2 left and came back:\n%s\nwere\n%s", after, before)
	}
	s.waitServices("n2 came back")

	// kube-proxy.exe restarts: it deletes its load balancers and makes them again (hnslib's
	// DeleteAllHnsLoadBalancerPolicy at start), weft's network is not written.
	old := s.loadBalancerIDs()
	s.stopProxy()
	s.w.Server.ResetCalls()
	s.startProxy()
	s.waitRemade(old)
	s.waitServices("kube-proxy.exe restarted")
	network, proxy = winnode.Writes(s.w.Server.Calls())
	t.Logf("kube-proxy.exe restarted: HNS writes of the network %v, of load balancers and endpoints %v", network, proxy)
	if len(network) != 0 {
		t.Errorf("kube-proxy.exe's restart came with writes to the network: %v", network)
	}
	s.waitRSRs("after kube-proxy.exe's restart")

	if s.hnsRestart {
		s.restartHNS()
	}
	s.w.refused()
	s.checkPeers()
	s.logLoadBalancers()
}

// checkPeers checks that weftd.exe's peers, as its /status lists them, are the Linux nodes'
// leases, each programmed, and nothing of kube-proxy's: its endpoints on the network are no
// peers of weft's.
func (s *kubeProxyScene) checkPeers() {
	s.t.Helper()
	var want, got []string
	for _, n := range s.linux {
		want = append(want, cluster.PodCIDR(n.Index).String()+" programmed")
	}
	for _, p := range weftStatus(s.t, s.w.Node.Node).Peers {
		got = append(got, p.Subnet+" "+p.State)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		s.t.Errorf("weftd.exe's peers %q, want the Linux nodes' %q", got, want)
	}
}

// restartHNS restarts HNS under both programs: the network, which is not persistent, goes
// with every endpoint on it. weftd.exe makes the network again (a new ID) with its
// RemoteSubnetRoutes; the Windows pod is made again (its sandbox's network is gone, as on a
// real node) and its Services' EndpointSlices follow; kube-proxy.exe, finding a network of
// another ID, drops what it had and makes every load balancer and endpoint again on the new
// network.
func (s *kubeProxyScene) restartHNS() {
	s.t.Helper()
	before, err := s.w.HNS.NetworkByName(s.network)
	if err != nil {
		s.t.Fatal(err)
	}
	s.w.Server.ResetCalls()
	s.w.HNS.Stop()
	s.w.HNS.Start()
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := s.w.HNS.NetworkByName(s.network)
		if err == nil && n.ID != before.ID {
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("HNS restarted: the network %s is not made again (%v)", s.network, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.waitRSRs("HNS restarted")
	old := s.podIP
	s.podIP = s.addPod("7e2f1d3c4b5a6079889706b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5")
	for _, svc := range s.services {
		backends := slices.Clone(svc.Endpoints)
		changed := false
		for i, b := range backends {
			if b.IP == old {
				backends[i].IP, changed = s.podIP, true
			}
		}
		if changed {
			s.setBackends(svc, backends)
		}
	}
	s.waitServices("HNS restarted, the network and the pod made again")
	network, proxy := winnode.Writes(s.w.Server.Calls())
	s.t.Logf("HNS restarted: HNS writes of the network %v, of load balancers and endpoints %v (the pod's among them)", network, proxy)
}

// TestCompareProxyRequests: the comparison fails on a request one run made more often than
// the other, and on a listed difference that no longer differs; it passes equal runs, in any
// order, and a listed difference.
func TestCompareProxyRequests(t *testing.T) {
	a := []string{"HcnCreateLoadBalancer {}", "HcnCreateEndpoint {}", "HcnCreateEndpoint {}"}
	b := []string{"HcnCreateEndpoint {}", "HcnCreateLoadBalancer {}", "HcnCreateEndpoint {}"}
	if p := compareProxyRequests(a, b, nil); len(p) != 0 {
		t.Errorf("equal runs: %v", p)
	}
	if p := compareProxyRequests(a, b[:2], nil); len(p) != 1 || !strings.Contains(p[0], "2 times on weftd.exe's network, 1 times on flanneld.exe's") {
		t.Errorf("one request fewer: %v", p)
	}
	listed := map[string]string{"HcnCreateEndpoint {}": "a reason"}
	if p := compareProxyRequests(a, b[:2], listed); len(p) != 0 {
		t.Errorf("a listed difference: %v", p)
	}
	if p := compareProxyRequests(a, b, listed); len(p) != 1 || !strings.Contains(p[0], "no longer happens (a reason)") {
		t.Errorf("a listed difference gone: %v", p)
	}
}
