package winnode

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/internal/hnssim"
	"github.com/weftnet/weft/windows"
)

// ShippedKubeProxy is the command line of dist/kubernetes/kube-proxy-windows.yaml's
// container in repo: weftctl.exe's path in the image, then its arguments.
func ShippedKubeProxy(repo string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(repo, "dist", "kubernetes", "kube-proxy-windows.yaml"))
	if err != nil {
		return nil, err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if err != nil {
			return nil, fmt.Errorf("kube-proxy-windows.yaml: no DaemonSet (%w)", err)
		}
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal(doc, &ds); err != nil {
			return nil, fmt.Errorf("kube-proxy-windows.yaml: %w", err)
		}
		if ds.Kind == "DaemonSet" {
			c := ds.Spec.Template.Spec.Containers[0]
			return append(slices.Clone(c.Command), c.Args...), nil
		}
	}
}

// KubeProxyCommand is shipped (ShippedKubeProxy) as the node runs it: weftctl.exe of
// programs in place of the image's, and the node's name for $(NODE_NAME). weftctl.exe must
// be weft's and its --subnet-file, if given, the one the node's weftd.exe writes.
func (w *Node) KubeProxyCommand(shipped []string, programs string) ([]string, error) {
	var argv []string
	for i, a := range shipped {
		switch {
		case i == 0 && strings.HasSuffix(a, `\weft\weftctl.exe`):
			a = filepath.Join(programs, "weftctl.exe")
		case i == 0:
			return nil, fmt.Errorf("the DaemonSet runs %s, not weft's weftctl.exe", a)
		case strings.Contains(a, "$(NODE_NAME)"):
			a = strings.ReplaceAll(a, "$(NODE_NAME)", w.Name)
		case strings.HasPrefix(a, "--subnet-file=") && a != "--subnet-file="+w.WinSubnetFile:
			return nil, fmt.Errorf("the DaemonSet's %s is not weftd.exe's --subnet-file=%s", a, w.WinSubnetFile)
		}
		argv = append(argv, a)
	}
	return argv, nil
}

// KubeProxy is kube-proxy.exe (or weftctl.exe running it) under Wine on the node.
type KubeProxy struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has exited and its ProcessState is set
	// Log is its output.
	Log string
}

// StartKubeProxy runs argv under Wine in the node, as its own process group, with NODE_NAME
// set as the DaemonSet sets it, its output appended to logPath; it is killed when the test
// ends.
func (w *Node) StartKubeProxy(argv []string, logPath string) (*KubeProxy, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))
	cmd := exec.Command("ip", append([]string{"netns", "exec", w.NS}, w.Wine(argv[0], argv[1:]...)...)...)
	cmd.Env = append(os.Environ(), "NODE_NAME="+w.Name)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	k := &KubeProxy{cmd: cmd, done: make(chan struct{}), Log: logPath}
	go func() { _ = cmd.Wait(); close(k.done) }()
	w.tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-k.done:
		case <-time.After(10 * time.Second):
		}
	})
	return k, nil
}

// Exited says how it exited, "" while it runs.
func (k *KubeProxy) Exited() string {
	select {
	case <-k.done:
		return k.cmd.ProcessState.String()
	default:
		return ""
	}
}

// Stop kills it, as a crash or a node's restart of its service would, and waits until its
// every process is gone.
func (k *KubeProxy) Stop() error {
	_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(-k.cmd.Process.Pid, 0) == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-proxy.exe did not exit")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// LogTail is the last n lines of its log.
func (k *KubeProxy) LogTail(n int) string {
	data, err := os.ReadFile(k.Log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Service is one port of a Service of the cluster and the pods behind it, as kube-proxy.exe
// must express it in HNS.
type Service struct {
	Name      string
	Protocol  corev1.Protocol
	ClusterIP netip.Addr
	Port      int32 // the Service's
	Target    int32 // the pods'
	NodePort  int32 // 0: none
	Affinity  bool  // sessionAffinity: ClientIP
	Local     bool  // externalTrafficPolicy: Local
	Endpoints []Endpoint
}

// Endpoint is one pod behind a Service: its address and the node it runs on.
type Endpoint struct {
	IP   netip.Addr
	Node string
}

// Expect is what kube-proxy.exe's objects must show on the node beside the Services.
type Expect struct {
	// Network is the HNS network weft made, Overlay whether it is one.
	Network string
	Overlay bool
	// DSR: kube-proxy.exe runs with --enable-dsr.
	DSR bool
	// SourceVIP is weft's source VIP (overlay), which kube-proxy's one local endpoint has.
	SourceVIP netip.Addr
	// Remote are the other nodes by name, with their IPs: a pod on one of them is a remote
	// endpoint through that IP. A pod on a node not named here must be on this node.
	Remote map[string]netip.Addr
}

// The flags kube-proxy sets (hcsshim hcn/hcnloadbalancer.go): the load balancer's DSR, and a
// port mapping's distribution by source IP (session affinity).
const (
	lbDSR               = 1
	lbDistributionSrcIP = 2
)

// proxyState is what kube-proxy made in HNS: its load balancers, and every endpoint by ID.
type proxyState struct {
	lbs []hnssim.LoadBalancer
	eps map[string]windows.HostComputeEndpoint // by lower-case ID
}

func (w *Node) proxyState() (proxyState, error) {
	lbs, err := w.Server.LoadBalancers()
	if err != nil {
		return proxyState{}, err
	}
	all, err := w.HNS.Endpoints()
	if err != nil {
		return proxyState{}, err
	}
	st := proxyState{lbs: lbs, eps: map[string]windows.HostComputeEndpoint{}}
	for _, ep := range all {
		st.eps[strings.ToLower(ep.ID)] = ep
	}
	return st, nil
}

// CheckServices compares kube-proxy.exe's objects in the node's HNS with svcs: "" when they
// hold, else every difference, one a line. For each Service, a ClusterIP load balancer (and
// for a NodePort Service, a node port one) with its frontend, ports, distribution, source VIP
// and DSR; its endpoints the Service's pods: the node's own pod through the CNI's endpoint, a
// pod on another node through a remote endpoint whose provider address is that node's IP
// (overlay; none on L2Bridge, where the host routes). And the source VIP: kube-proxy's one
// local endpoint on overlay, no pod's. The Service kubernetes is checked too.
func (w *Node) CheckServices(svcs []Service, e Expect) string {
	st, err := w.proxyState()
	if err != nil {
		return err.Error()
	}
	c := checker{w: w, e: e, st: st}
	var errs []string
	var vipEPs []string
	if !e.Overlay {
		vipEPs = []string{`"" remote=false`} // none: kube-proxy takes none on L2Bridge
	}
	for _, ep := range st.eps {
		if e.Overlay && ep.IP() == e.SourceVIP {
			vipEPs = append(vipEPs, fmt.Sprintf("%q remote=%v", ep.Name, ep.Flags&windows.EndpointRemote != 0))
		}
	}
	if len(vipEPs) != 1 || vipEPs[0] != `"" remote=false` {
		errs = append(errs, fmt.Sprintf("endpoints of the source VIP %s: %v, want kube-proxy's one local endpoint", e.SourceVIP, vipEPs))
	}
	for _, svc := range svcs {
		errs = append(errs, c.service(svc)...)
	}
	errs = append(errs, c.apiServer()...)
	return strings.Join(errs, "\n")
}

// checker holds what CheckServices compares.
type checker struct {
	w  *Node
	e  Expect
	st proxyState
}

// sourceVIP is the source VIP of the load balancers of pods: weft's on overlay; on L2Bridge
// kube-proxy sets none (it reads --source-vip on overlay networks only).
func (c checker) sourceVIP() string {
	if c.e.Overlay {
		return c.e.SourceVIP.String()
	}
	return ""
}

// providerAddress is the provider address kube-proxy gives a remote endpoint on a node of IP
// ip: that IP on overlay, where it reads it from weft's RemoteSubnetRoutes; none on L2Bridge.
func (c checker) providerAddress(ip netip.Addr) netip.Addr {
	if c.e.Overlay {
		return ip
	}
	return netip.Addr{}
}

// find is the load balancer of frontend vip ("": a node port's) and port.
func (c checker) find(vip string, port int32, proto uint32) *hnssim.LoadBalancer {
	var want []string
	if vip != "" {
		want = []string{vip}
	}
	for i, lb := range c.st.lbs {
		if slices.Equal(lb.FrontendVIPs, want) && len(lb.PortMappings) == 1 && lb.PortMappings[0].ExternalPort == uint16(port) &&
			lb.PortMappings[0].Protocol == proto {
			return &c.st.lbs[i]
		}
	}
	return nil
}

// service checks svc's ClusterIP load balancer and, for a NodePort Service, its node port's.
func (c checker) service(svc Service) []string {
	proto := uint32(6)
	if svc.Protocol == corev1.ProtocolUDP {
		proto = 17
	}
	// kube-proxy asks for the distribution by source IP whatever HNS's version (below 12.0,
	// which does not apply it, after logging so).
	affinity := uint32(0)
	if svc.Affinity {
		affinity = lbDistributionSrcIP
	}
	var errs []string
	clusterIP := c.find(svc.ClusterIP.String(), svc.Port, proto)
	if clusterIP == nil {
		errs = append(errs, fmt.Sprintf("Service %s: no load balancer for %s:%d/%s", svc.Name, svc.ClusterIP, svc.Port, svc.Protocol))
	} else {
		pm := clusterIP.PortMappings[0]
		if pm.InternalPort != uint16(svc.Target) || pm.DistributionType != affinity || clusterIP.SourceVIP != c.sourceVIP() ||
			(clusterIP.Flags&lbDSR != 0) != c.e.DSR {
			errs = append(errs, fmt.Sprintf("Service %s: load balancer %+v, want internal port %d, distribution %d, source VIP %q, DSR %v",
				svc.Name, clusterIP, svc.Target, affinity, c.sourceVIP(), c.e.DSR))
		}
		errs = append(errs, c.endpoints(svc, "ClusterIP", clusterIP, svc.Endpoints)...)
	}
	if svc.NodePort == 0 {
		return errs
	}
	nodePort := c.find("", svc.NodePort, proto)
	if nodePort == nil {
		return append(errs, fmt.Sprintf("Service %s: no load balancer for node port %d", svc.Name, svc.NodePort))
	}
	want := svc.Endpoints
	if svc.Local {
		// externalTrafficPolicy: Local keeps the node's own pods only, and kube-proxy returns
		// their traffic directly (DSR) to keep the client's address.
		want = slices.DeleteFunc(slices.Clone(want), func(b Endpoint) bool { return b.Node != c.w.Name })
		if nodePort.Flags&lbDSR == 0 {
			errs = append(errs, fmt.Sprintf("Service %s: node port load balancer %+v without DSR, want it for externalTrafficPolicy: Local", svc.Name, nodePort))
		}
	}
	if nodePort.PortMappings[0].InternalPort != uint16(svc.Target) {
		errs = append(errs, fmt.Sprintf("Service %s: node port load balancer %+v, want internal port %d", svc.Name, nodePort, svc.Target))
	}
	return append(errs, c.endpoints(svc, "NodePort", nodePort, want)...)
}

// endpoints checks that lb's endpoints are want's pods: the node's own pod through its
// endpoint, a pod on another node through a remote endpoint whose provider address is that
// node's IP.
func (c checker) endpoints(svc Service, kind string, lb *hnssim.LoadBalancer, want []Endpoint) []string {
	var errs []string
	var got, wantIPs []string
	for _, id := range lb.HostComputeEndpoints {
		ep, ok := c.st.eps[strings.ToLower(id)]
		if !ok {
			errs = append(errs, fmt.Sprintf("Service %s (%s): load balancer %s names endpoint %s, which HNS does not have", svc.Name, kind, lb.ID, id))
			continue
		}
		got = append(got, ep.IP().String())
		i := slices.IndexFunc(want, func(b Endpoint) bool { return b.IP == ep.IP() })
		if i < 0 {
			continue
		}
		remote := ep.Flags&windows.EndpointRemote != 0
		if nodeIP, ok := c.e.Remote[want[i].Node]; ok {
			if !remote || ep.ProviderAddress() != c.providerAddress(nodeIP) {
				errs = append(errs, fmt.Sprintf("Service %s (%s): the pod %s on %s has endpoint %s (remote %v, provider address %v), want a remote endpoint through %s",
					svc.Name, kind, ep.IP(), want[i].Node, ep.ID, remote, ep.ProviderAddress(), nodeIP))
			}
		} else if remote || !strings.HasSuffix(ep.Name, "_"+c.e.Network) {
			errs = append(errs, fmt.Sprintf("Service %s (%s): the node's own pod %s has endpoint %s %q (remote %v), want its own, the CNI's", svc.Name, kind, ep.IP(), ep.ID, ep.Name, remote))
		}
	}
	for _, b := range want {
		wantIPs = append(wantIPs, b.IP.String())
	}
	slices.Sort(got)
	slices.Sort(wantIPs)
	if !slices.Equal(got, wantIPs) {
		errs = append(errs, fmt.Sprintf("Service %s (%s): load balancer endpoints %v, want %v", svc.Name, kind, got, wantIPs))
	}
	return errs
}

// apiServer checks the load balancer of the Service kubernetes, whose one endpoint, the API
// server at 192.0.2.1, is in no node's subnet: a remote endpoint through the node's own IP,
// and the node's IP as the source VIP (kube-proxy's rule for an endpoint outside the
// cluster).
func (c checker) apiServer() []string {
	for _, lb := range c.st.lbs {
		if len(lb.PortMappings) != 1 || lb.PortMappings[0].ExternalPort != 443 || len(lb.FrontendVIPs) != 1 {
			continue
		}
		if len(lb.HostComputeEndpoints) != 1 {
			return []string{fmt.Sprintf("Service kubernetes: load balancer %+v, want one endpoint", lb)}
		}
		ep, ok := c.st.eps[strings.ToLower(lb.HostComputeEndpoints[0])]
		wantVIP := ""
		if c.e.Overlay {
			wantVIP = c.w.IP.String()
		}
		if !ok || ep.IP().String() != cluster.APIServerHost || ep.Flags&windows.EndpointRemote == 0 || ep.ProviderAddress() != c.providerAddress(c.w.IP) ||
			lb.SourceVIP != wantVIP || lb.PortMappings[0].InternalPort != 6443 {
			return []string{fmt.Sprintf("Service kubernetes: load balancer %+v with endpoint %+v, want 6443 on the API server through the node's own IP %s, sourced from it", lb, ep, c.w.IP)}
		}
		return nil
	}
	return []string{"Service kubernetes: no load balancer for port 443"}
}

// LoadBalancerIDs are the IDs of HNS's load balancers.
func (w *Node) LoadBalancerIDs() ([]string, error) {
	lbs, err := w.Server.LoadBalancers()
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, lb := range lbs {
		ids = append(ids, lb.ID)
	}
	return ids, nil
}

// RenderLoadBalancers renders each load balancer with its endpoints, one a line, sorted,
// for the record.
func (w *Node) RenderLoadBalancers() string {
	st, err := w.proxyState()
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, lb := range st.lbs {
		var eps []string
		for _, id := range lb.HostComputeEndpoints {
			ep := st.eps[strings.ToLower(id)]
			kind := "local " + ep.Name
			if ep.Flags&windows.EndpointRemote != 0 {
				kind = "remote via " + ep.ProviderAddress().String()
			}
			eps = append(eps, ep.IP().String()+" ("+kind+")")
		}
		pm := lb.PortMappings[0]
		lines = append(lines, fmt.Sprintf("  %v:%d/%d -> %d src %s flags %d pm-flags %d distribution %d: %s",
			lb.FrontendVIPs, pm.ExternalPort, pm.Protocol, pm.InternalPort, lb.SourceVIP, lb.Flags, pm.Flags, pm.DistributionType, strings.Join(eps, ", ")))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// KubeProxyObjects renders kube-proxy's objects by ID: its load balancers with their
// documents' fields and the endpoints it made, so that a change of any shows.
func (w *Node) KubeProxyObjects() (string, error) {
	st, err := w.proxyState()
	if err != nil {
		return "", err
	}
	var lines []string
	for _, lb := range st.lbs {
		lines = append(lines, fmt.Sprintf("lb %s %+v", lb.ID, lb))
	}
	for id, ep := range st.eps {
		if ep.Name == "" { // kube-proxy's endpoints have no name; the CNI's and weft's do
			lines = append(lines, fmt.Sprintf("endpoint %s %s flags %d pa %v mac %s", id, ep.IP(), ep.Flags, ep.ProviderAddress(), ep.MacAddress))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), nil
}

// Writes counts the HNS writes that succeeded among calls, by call: weft's kinds (the
// network and its policies) in network, kube-proxy's (load balancers, endpoints) in proxy.
func Writes(calls []hnssim.Call) (network, proxy map[string]int) {
	network, proxy = map[string]int{}, map[string]int{}
	for _, c := range calls {
		if !c.Mutates() || c.HResult != 0 {
			continue
		}
		if strings.Contains(c.Name, "Network") {
			network[c.Name]++
		} else {
			proxy[c.Name]++
		}
	}
	return network, proxy
}

// Refused lists every call the node's HNS refused as a request it does not take (its JSON,
// an argument, a call it lacks): a caller would have logged and retried, not stopped.
func (w *Node) Refused() []string {
	var out []string
	for _, call := range w.Server.Calls() {
		switch call.HResult {
		case windows.HCNInvalidJSON, windows.InvalidArg, windows.NotImpl:
			out = append(out, fmt.Sprintf("HNS refused %s %s %s %s: %v", call.Name, call.Method, call.Object, call.Body, call.HResult))
		}
	}
	return out
}

// WindowsBuild is the build number NodeObject's Node says (kubelet.exe's label
// node.kubernetes.io/windows-build): Windows Server 2022.
const WindowsBuild = "10.0.20348"

// NodeObject is the Node object of the node as kubelet.exe registers a Windows node: the
// labels kubernetes.io/os=windows, arch, hostname and windows-build (Windows Server 2022's),
// the kubelet's annotation (flanneld v0.28.10 panics on a Node with no annotations at all:
// its kube subnet manager writes into a nil map), and, in its status, the InternalIP,
// which kube-proxy takes as the node's IP. spec (its podCIDR) is the caller's.
func (w *Node) NodeObject(spec corev1.NodeSpec) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: w.Name, Labels: map[string]string{
			"kubernetes.io/os": "windows", "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": w.Name,
			"node.kubernetes.io/windows-build": WindowsBuild,
		},
			Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
		},
		Spec: spec,
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: w.IP.String()}, {Type: corev1.NodeHostName, Address: w.Name}},
			NodeInfo:  corev1.NodeSystemInfo{OperatingSystem: "windows", Architecture: "amd64", OSImage: "Windows Server 2022 Datacenter"},
		},
	}
}

// RemoteSubnetRoutes are the RemoteSubnetRoute policies of the HNS network, each
// "<prefix> via <provider address>", sorted.
func (w *Node) RemoteSubnetRoutes(network string) ([]string, error) {
	n, err := w.HNS.NetworkByName(network)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range n.PoliciesOf(windows.PolicyRemoteSubnetRoute) {
		var rs windows.RemoteSubnetRouteSettings
		if err := p.Decode(&rs); err != nil {
			return nil, err
		}
		out = append(out, rs.DestinationPrefix+" via "+rs.ProviderAddress)
	}
	slices.Sort(out)
	return out, nil
}

// WaitRemade waits until none of the load balancers old is left, as a kube-proxy that starts
// deletes every load balancer HNS has and makes its own again; it fails if k exits or
// timeout passes first.
func (w *Node) WaitRemade(k *KubeProxy, old []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ids, err := w.LoadBalancerIDs()
		if err != nil {
			return err
		}
		left := slices.DeleteFunc(ids, func(id string) bool { return !slices.Contains(old, id) })
		if len(left) == 0 {
			return nil
		}
		if exited := k.Exited(); exited != "" || time.Now().After(deadline) {
			return fmt.Errorf("kube-proxy.exe restarted (exited: %q), and the load balancers %v of the one before are still there", exited, left)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
