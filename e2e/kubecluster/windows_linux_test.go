package kubecluster

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/e2e/winnode"
	"github.com/weftnet/weft/internal/winetest"
	"github.com/weftnet/weft/status"
	"github.com/weftnet/weft/windows"
)

// needWindowsNode returns the options of a Windows node (the repository, weft's Windows
// programs, kube-proxy.exe; built the first time), or skips the test where Wine cannot run.
func needWindowsNode(t *testing.T, kubeBin string, dsr bool) WindowsOptions {
	t.Helper()
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	winetest.Need(t, repo)
	install(t, filepath.Join(repo, "tools", "kube", "install-kube.sh"), kubeBin, "kube-proxy.exe")
	programs, err := winnode.BuildPrograms(repo)
	if err != nil {
		t.Fatal(err)
	}
	return WindowsOptions{Repo: repo, Programs: programs, KubeProxyExe: filepath.Join(kubeBin, "kube-proxy.exe"), DSR: dsr}
}

// windowsPod makes a pod on the Windows node as containerd makes one (wincni.exe, the CNI
// configuration weft's DaemonSet installs) and returns its address, which must be in the
// node's podCIDR and not the source VIP.
func windowsPod(t *testing.T, w *WindowsNode, id string) netip.Addr {
	t.Helper()
	pod := w.RunPod(w.Programs, id)
	pod.Step("netns")
	added := pod.Step("add")
	if len(added.Result) != 1 || len(added.Result[0].IPs) != 1 {
		t.Fatalf("the Windows pod's ADD result %+v", added.Result)
	}
	addr, err := netip.ParsePrefix(added.Result[0].IPs[0].Address)
	if err != nil {
		t.Fatal(err)
	}
	sn, err := w.Subnet()
	if err != nil {
		t.Fatal(err)
	}
	if !sn.Contains(addr.Addr()) || addr.Addr() == w.SourceVIP {
		t.Fatalf("the Windows pod got %s: want an address of the node's %s other than the source VIP %s", addr, sn, w.SourceVIP)
	}
	return addr.Addr()
}

// windowsSlice publishes the Windows pod ip as an endpoint of the Service svc (port name
// and number as the Service's own EndpointSlices have them), as the EndpointSlice
// controller would if kubelet.exe ran the pod.
func windowsSlice(ctx context.Context, t *testing.T, c *Cluster, svc, node, port string, ip netip.Addr) {
	t.Helper()
	proto, number, ready := corev1.ProtocolTCP, int32(8080), true
	_, err := c.Client.DiscoveryV1().EndpointSlices(testNamespace).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc + "-windows", Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "weft-e2e"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip.String()}, NodeName: &node,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready}}},
		Ports: []discoveryv1.EndpointPort{{Name: &port, Protocol: &proto, Port: &number}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// clusterServices are the Services of the whole cluster, each port with the ready
// endpoints of its EndpointSlices (the controller-manager's and the test's), as
// kube-proxy.exe must express them: the API's truth, not HNS's. The Service kubernetes is
// left to CheckServices' own check, and a port without a ready endpoint is left out
// (kube-proxy makes no load balancer for it).
func clusterServices(ctx context.Context, c *Cluster) ([]winnode.Service, error) {
	svcs, err := c.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []winnode.Service
	for _, svc := range svcs.Items {
		if svc.Namespace == "default" && svc.Name == "kubernetes" || svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		slices, err := c.Client.DiscoveryV1().EndpointSlices(svc.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
		if err != nil {
			return nil, err
		}
		for _, sp := range svc.Spec.Ports {
			s := winnode.Service{Name: svc.Namespace + "/" + svc.Name + ":" + sp.Name, Protocol: sp.Protocol,
				ClusterIP: netip.MustParseAddr(svc.Spec.ClusterIP), Port: sp.Port, NodePort: sp.NodePort,
				Affinity: svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP,
				Local:    svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal}
			for _, es := range slices.Items {
				i := endpointPortIndex(es.Ports, sp)
				if i < 0 || es.Ports[i].Port == nil {
					continue
				}
				s.Target = *es.Ports[i].Port
				for _, ep := range es.Endpoints {
					if ep.Conditions.Ready != nil && !*ep.Conditions.Ready || ep.NodeName == nil {
						continue
					}
					for _, a := range ep.Addresses {
						s.Endpoints = append(s.Endpoints, winnode.Endpoint{IP: netip.MustParseAddr(a), Node: *ep.NodeName})
					}
				}
			}
			if len(s.Endpoints) > 0 {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// endpointPortIndex is the index of the EndpointSlice port of the Service port sp, -1 if none.
func endpointPortIndex(ports []discoveryv1.EndpointPort, sp corev1.ServicePort) int {
	return slices.IndexFunc(ports, func(p discoveryv1.EndpointPort) bool {
		return p.Name != nil && *p.Name == sp.Name && (p.Protocol == nil || *p.Protocol == sp.Protocol)
	})
}

// windowsCheck is what the Windows node must show beside the cluster's Services.
type windowsCheck struct {
	c *Cluster
	w *WindowsNode
	// dsr: kube-proxy.exe runs with --enable-dsr.
	dsr bool
}

// expect is winnode.Expect for the cluster: the Linux nodes by name with their IPs.
func (k windowsCheck) expect() winnode.Expect {
	remote := map[string]netip.Addr{}
	for _, n := range k.c.Nodes() {
		remote[n.Name] = n.IP
	}
	return winnode.Expect{Network: "flannel.4096", Overlay: true, DSR: k.dsr, SourceVIP: k.w.SourceVIP, Remote: remote}
}

// rsrs are the Overlay network's RemoteSubnetRoutes, "<prefix> via <provider address>",
// sorted; want are the Linux nodes' podCIDRs through their IPs.
func (k windowsCheck) rsrs(ctx context.Context) (got, want []string, err error) {
	for _, n := range k.c.Nodes() {
		node, err := k.c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return nil, nil, err
		}
		want = append(want, node.Spec.PodCIDR+" via "+n.IP.String())
	}
	slices.Sort(want)
	got, err = k.w.RemoteSubnetRoutes("flannel.4096")
	if errors.Is(err, windows.ErrNotFound) {
		err = nil // not made yet
	}
	return got, want, err
}

// waitRSRs waits until the Windows node reaches exactly the Linux nodes' podCIDRs, each
// through its node's IP.
func (k windowsCheck) waitRSRs(ctx context.Context, t *testing.T, what string) {
	t.Helper()
	for {
		got, want, err := k.rsrs(ctx)
		if err == nil && slices.Equal(got, want) {
			return
		}
		if !k.w.Running() {
			t.Fatalf("%s: weftd.exe exited: %v\n%s", what, k.w.ExitState(), k.w.LogTail(30))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: the Windows node's RemoteSubnetRoutes %q, want %q (%v)", what, got, want, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitServices waits until kube-proxy.exe's objects hold for every Service of the cluster.
func (k windowsCheck) waitServices(ctx context.Context, t *testing.T, what string) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var why string
	for {
		svcs, err := clusterServices(ctx, k.c)
		if err == nil {
			why = k.w.CheckServices(svcs, k.expect())
			if why == "" {
				t.Logf("%s: the load balancers of all %d Service ports hold (%v)", what, len(svcs), time.Since(start).Round(time.Millisecond))
				return
			}
		} else {
			why = err.Error()
		}
		if exited := k.w.Proxy.Exited(); exited != "" {
			t.Fatalf("%s: kube-proxy.exe exited: %s\n%s", what, exited, k.w.Proxy.LogTail(40))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s, after %v:\n%s\nload balancers:\n%s\nkube-proxy.exe's log:\n%s", what, time.Since(start).Round(time.Second), why,
				k.w.RenderLoadBalancers(), k.w.Proxy.LogTail(40))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// objects are kube-proxy's objects (winnode.KubeProxyObjects).
func (k windowsCheck) objects(t *testing.T) string {
	t.Helper()
	out, err := k.w.KubeProxyObjects()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// settle waits until kube-proxy's objects have not changed for 40 s (longer than its 30 s
// sync period), and returns them.
func (k windowsCheck) settle(ctx context.Context, t *testing.T) string {
	t.Helper()
	const quiet = 40 * time.Second
	last, since := k.objects(t), time.Now()
	for time.Since(since) < quiet {
		select {
		case <-ctx.Done():
			t.Fatal("kube-proxy's objects never settled")
		case <-time.After(time.Second):
		}
		if now := k.objects(t); now != last {
			last, since = now, time.Now()
		}
	}
	return last
}

// checkPeers checks that weftd.exe's peers, as its /status lists them, are the Linux
// nodes' leases, each programmed, and nothing of kube-proxy's.
func (k windowsCheck) checkPeers(ctx context.Context, t *testing.T) {
	t.Helper()
	_, want, err := k.rsrs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		want[i] = strings.Fields(w)[0] + " programmed"
	}
	code, body, err := k.w.Get("/status")
	var st status.Node
	if err == nil {
		err = json.Unmarshal([]byte(body), &st)
	}
	if err != nil || code != 200 {
		t.Fatalf("weftd.exe's /status: %d %q (%v)", code, body, err)
	}
	var got []string
	for _, p := range st.Peers {
		got = append(got, p.Subnet+" "+p.State)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("weftd.exe's peers %q, want the Linux nodes' %q", got, want)
	}
}

// TestWindowsNode: the Windows node in the real cluster (issue 34). Beside Linux nodes that
// run weft's DaemonSet under their kubelets, a Windows node (AddWindowsNode: weftd.exe in
// Kubernetes mode leasing from the cluster's API server, kube-proxy.exe in kernelspace mode
// with DSR, both under Wine on the simulated HNS; no kubelet) has a pod made as containerd
// makes one. CoreDNS runs on the Linux nodes; test Services select pods on the Linux nodes
// (their EndpointSlices the controller-manager's), the Windows pod (published by the test),
// and both. Checked after each step, for every Service of the cluster as the API server has
// it: kube-proxy.exe's load balancers and endpoints (winnode.CheckServices: a pod on a
// Linux node is a remote endpoint through the IP of the node that runs it), weft's source
// VIP, and the Windows node's RemoteSubnetRoutes (each Linux node's podCIDR through its
// IP), with the Linux nodes' routes to the Windows node's podCIDR. Steps: a Linux pod moves
// to another node; weftd.exe restarts (no HNS write, kube-proxy's objects unchanged); a
// Linux node's weft pod is deleted and its DaemonSet makes it again (kube-proxy's objects
// unchanged); a Linux node joins and a pod on it joins a Service; kube-proxy.exe restarts
// (its load balancers made again, weft's network not written). No call is refused; weftd.exe's
// peers are the Linux nodes only.
func TestWindowsNode(t *testing.T) {
	needLong(t)
	opts := needCluster(t)
	wopts := needWindowsNode(t, opts.KubeBin, true)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	c := newCluster(t, 2)
	deployWeft(ctx, t, c)
	importE2EImages(ctx, t, c)
	if err := c.DeployCoreDNS(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := c.AddWindowsNode(ctx, t, "win1", wopts)
	if err != nil {
		t.Fatal(err)
	}
	k := windowsCheck{c: c, w: w, dsr: wopts.DSR}
	k.waitRSRs(ctx, t, "the Windows node started")
	waitRoutesToWindows(ctx, t, c, w)
	podIP := windowsPod(t, w, "5c0d1e2f3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f")

	pods := podsUp(ctx, t, c, func(string) map[string]string { return map[string]string{"app": "net"} })
	for _, s := range []struct {
		name     string
		selector bool
		spec     corev1.ServiceSpec
	}{
		{"linux", true, corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort}},
		{"windows", false, corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal}},
		{"both", true, corev1.ServiceSpec{SessionAffinity: corev1.ServiceAffinityClientIP}},
	} {
		s.spec.Ports = []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http")}}
		if s.selector {
			s.spec.Selector = map[string]string{"app": "net"}
		} else {
			s.spec.Ports[0].TargetPort = intstr.FromInt32(8080)
		}
		if _, err := c.Client.CoreV1().Services(testNamespace).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: s.name}, Spec: s.spec}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if s.name != "linux" {
			windowsSlice(ctx, t, c, s.name, w.Name, "http", podIP)
		}
	}
	k.waitServices(ctx, t, "kube-proxy.exe started")
	t.Logf("load balancers:\n%s", w.RenderLoadBalancers())

	// A Linux pod moves: node1's is deleted and one like it starts on node2.
	if err := c.Client.CoreV1().Pods(testNamespace).Delete(ctx, pods["node1"].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods(testNamespace).Create(ctx, netPod("moved-node2", "node2", map[string]string{"app": "net"}),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodReady(ctx, t, c, "moved-node2")
	k.waitServices(ctx, t, "a pod moved from node1 to node2")

	// weftd.exe restarts: no HNS write, kube-proxy's objects as they were. kube-proxy.exe
	// first finishes with the pod that moved (it drops the endpoints nothing uses at a later
	// sync), so that what changes after is not its.
	before := k.settle(ctx, t)
	w.Server.ResetCalls()
	if _, err := w.Stop(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := w.StartWeftd(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	network, proxy := winnode.Writes(w.Server.Calls())
	t.Logf("weftd.exe restarted: HNS writes of the network %v, of load balancers and endpoints %v", network, proxy)
	if len(network) != 0 {
		t.Errorf("weftd.exe's restart wrote the network: %v", network)
	}
	if after := k.objects(t); after != before {
		t.Errorf("kube-proxy's objects changed across weftd.exe's restart:\n%s\nwere\n%s", after, before)
	}
	k.waitRSRs(ctx, t, "weftd.exe restarted")

	// node1's weft pod is deleted; the DaemonSet makes another, which adopts node1's lease.
	weftPods, err := c.Client.CoreV1().Pods("kube-flannel").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node1"})
	if err != nil || len(weftPods.Items) != 1 {
		t.Fatalf("node1's weft pod: %v (%d pods)", err, len(weftPods.Items))
	}
	w.Server.ResetCalls()
	if err := c.Client.CoreV1().Pods("kube-flannel").Delete(ctx, weftPods.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitNodes(ctx, NetworkReady); err != nil {
		t.Fatal(err)
	}
	for !replaced(agentPods(ctx, t, c, "", "node1"), weftPods.Items[0].UID) {
		select {
		case <-ctx.Done():
			t.Fatal("node1's weft pod is not made again")
		case <-time.After(500 * time.Millisecond):
		}
	}
	k.waitRSRs(ctx, t, "node1's weft pod made again")
	network, proxy = winnode.Writes(w.Server.Calls())
	t.Logf("node1's weft pod made again: HNS writes of the network %v, of load balancers and endpoints %v", network, proxy)
	if len(network) != 0 {
		t.Errorf("node1's weft restart rewrote the Windows node's network: %v", network)
	}
	if after := k.objects(t); after != before {
		t.Errorf("kube-proxy's objects changed across node1's weft restart:\n%s\nwere\n%s", after, before)
	}

	// A Linux node joins; a pod on it joins the Services that select app=net.
	n3, err := c.AddNode("node3")
	if err != nil {
		t.Fatal(err)
	}
	joinNode(ctx, t, c, n3)
	if _, err := c.WaitNodes(ctx, NetworkReady); err != nil {
		t.Fatal(err)
	}
	k.waitRSRs(ctx, t, "node3 joined")
	if _, err := c.Client.CoreV1().Pods(testNamespace).Create(ctx, netPod("net-node3", "node3", map[string]string{"app": "net"}),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodReady(ctx, t, c, "net-node3")
	p3, err := c.Client.CoreV1().Pods(testNamespace).Get(ctx, "net-node3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitEndpoint(ctx, t, c, netip.MustParseAddr(p3.Status.PodIP), "linux", "both")
	k.waitServices(ctx, t, "node3 joined, a pod on it")

	// kube-proxy.exe restarts: it deletes its load balancers and makes them again; weft's
	// network is not written.
	old, err := w.LoadBalancerIDs()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Proxy.Stop(); err != nil {
		t.Fatal(err)
	}
	w.Server.ResetCalls()
	if err := w.StartKubeProxy(); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitRemade(w.Proxy, old, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	k.waitServices(ctx, t, "kube-proxy.exe restarted")
	network, proxy = winnode.Writes(w.Server.Calls())
	t.Logf("kube-proxy.exe restarted: HNS writes of the network %v, of load balancers and endpoints %v", network, proxy)
	if len(network) != 0 {
		t.Errorf("kube-proxy.exe's restart came with writes to the network: %v", network)
	}
	for _, r := range w.Refused() {
		t.Error(r)
	}
	k.checkPeers(ctx, t)
	t.Logf("load balancers:\n%s", w.RenderLoadBalancers())
}

// waitRoutesToWindows waits until every Linux node routes the Windows node's podCIDR
// through weft's VXLAN device.
func waitRoutesToWindows(ctx context.Context, t *testing.T, c *Cluster, w *WindowsNode) {
	t.Helper()
	sn, err := w.Subnet()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		for {
			route, _ := n.RouteTo(sn)
			if strings.Contains(route, "flannel.4096") {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("node %s's route to the Windows node's %s: %q, want through flannel.4096", n.Name, sn, route)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	t.Logf("every Linux node routes the Windows node's %s through flannel.4096", sn)
}

// waitEndpoint waits until the EndpointSlices of each of the test Services svcs have the
// ready endpoint ip.
func waitEndpoint(ctx context.Context, t *testing.T, c *Cluster, ip netip.Addr, svcs ...string) {
	t.Helper()
	for {
		all, err := clusterServices(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		var missing []string
		for _, name := range svcs {
			i := slices.IndexFunc(all, func(s winnode.Service) bool {
				return s.Name == testNamespace+"/"+name+":http" &&
					slices.ContainsFunc(s.Endpoints, func(e winnode.Endpoint) bool { return e.IP == ip })
			})
			if i < 0 {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the Services %v have no ready endpoint %s", missing, ip)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitPodReady waits until the test pod name is Ready.
func waitPodReady(ctx context.Context, t *testing.T, c *Cluster, name string) {
	t.Helper()
	for {
		p, err := c.Client.CoreV1().Pods(testNamespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil && podReady(p) && p.Status.PodIP != "" {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s not ready: %v", name, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// replaced says whether pods are one ready pod other than the one of UID old.
func replaced(pods []corev1.Pod, old types.UID) bool {
	return len(pods) == 1 && pods[0].UID != old && podReady(&pods[0])
}

// joinNode gives a node added after deployWeft what deployWeft and importE2EImages gave the
// others: the CNI plugins, the base images and the e2e images.
func joinNode(ctx context.Context, t *testing.T, c *Cluster, n *Node) {
	t.Helper()
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.InstallCNIPlugins(needCNIPlugins(t, repo)); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	images, err := BaseImages(ctx, repo, work)
	if err != nil {
		t.Fatal(err)
	}
	more, err := E2EImages(ctx, repo, work)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range append(images, more...) {
		if err := n.ImportImage(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
}
