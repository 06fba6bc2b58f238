package windows_test

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/weftnet/weft/netpol"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnsfile"
	"github.com/weftnet/weft/windows/hnstest"
)

// policyScene is a Windows node (overlay, subnet 10.244.3.0/24, peers as remote endpoints
// so that kube-proxy-like endpoints share the network) with pod endpoints made as the CNI
// plugin makes them, and the cluster whose policies its NetworkPolicy enforces.
type policyScene struct {
	t       *testing.T
	n       *winNode
	netID   string
	cluster netpol.Cluster
	subnets []netip.Prefix
}

const policyNode = "win"

// operatorACLs are ACLs a CNI config may carry (an operator's, of priorities not weft's): no
// pod reaches the cloud's metadata service, everything else passes (HNS denies by default
// what an endpoint with ACLs does not allow).
var operatorACLs = []windows.Policy{
	windows.ACLPolicy(windows.ACLSettings{Action: windows.ACLBlock, Direction: windows.ACLOut,
		RemoteAddresses: "169.254.169.254", RuleType: "Switch", Priority: 200}),
	windows.ACLPolicy(windows.ACLSettings{Action: windows.ACLAllow, Direction: windows.ACLOut, RuleType: "Switch", Priority: 65000}),
	windows.ACLPolicy(windows.ACLSettings{Action: windows.ACLAllow, Direction: windows.ACLIn, RuleType: "Switch", Priority: 65000}),
}

func newPolicyScene(t *testing.T) *policyScene {
	n := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.10", hns10, windows.Config{Peers: windows.PeersRemoteEndpoints})
	n.mustAcquire("10.244.3.0/24")
	peer := vxlanLease(t, "10.244.1.0/24", "192.168.1.11", "0e:2a:0a:00:00:01")
	n.mustConverge(nil)
	n.mustConverge([]subnet.Lease{peer})
	s := &policyScene{t: t, n: n, netID: n.network("flannel.4096").ID, subnets: []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24")}}
	s.cluster = netpol.Cluster{Namespaces: map[string]netpol.Namespace{
		"prod": {Name: "prod", Labels: map[string]string{"kubernetes.io/metadata.name": "prod"}},
	}}
	s.pod("a", "web", policyNode, "10.244.3.5")
	s.pod("b", "dns-client", policyNode, "10.244.3.2")
	s.pod("d", "free", policyNode, "10.244.3.8")
	s.pod("e", "free", policyNode, "10.244.3.9")
	s.pod("client", "client", "linux1", "10.244.1.9")
	s.pod("other", "other", "linux1", "10.244.1.10")
	for _, e := range []struct {
		name, ip        string
		foreign, closed bool
	}{{"a", "10.244.3.5", true, false}, {"b", "10.244.3.2", false, false}, {"c", "10.244.3.7", false, false},
		{"d", "10.244.3.8", true, false}, {"e", "10.244.3.9", false, true}} {
		ep := &windows.HostComputeEndpoint{Name: "pod-" + e.name, HostComputeNetwork: s.netID,
			IPConfigurations: []windows.IPConfig{{IPAddress: e.ip, PrefixLength: 24}}}
		if e.foreign {
			ep.Policies = operatorACLs
		}
		if e.closed {
			// As the CNI plugin makes it when hns.json says NetworkPolicy.
			for _, raw := range hnsfile.ClosedEndpointACLs() {
				var p windows.Policy
				if err := json.Unmarshal(raw, &p); err != nil {
					t.Fatal(err)
				}
				ep.Policies = append(ep.Policies, p)
			}
		}
		if _, err := n.hns.CreateEndpoint(ep); err != nil {
			t.Fatal(err)
		}
	}
	prod := func(name string, sel map[string]string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
		spec.PodSelector = metav1.LabelSelector{MatchLabels: sel}
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: name}, Spec: spec}
	}
	tcp, udp := protocol(corev1.ProtocolTCP), protocol(corev1.ProtocolUDP)
	port := func(p *corev1.Protocol, n int) networkingv1.NetworkPolicyPort {
		v := intstr.FromInt32(int32(n))
		return networkingv1.NetworkPolicyPort{Protocol: p, Port: &v}
	}
	s.cluster.Policies = []*networkingv1.NetworkPolicy{
		// a: in from the client pods on TCP 80 only.
		prod("web-in", map[string]string{"app": "web"}, networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
				Ports: []networkingv1.NetworkPolicyPort{port(tcp, 80)},
			}},
		}),
		// b: out to 10.0.0.0/8 but 10.1.0.0/16, on UDP 53 only.
		prod("dns-out", map[string]string{"app": "dns-client"}, networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16"}}}},
				Ports: []networkingv1.NetworkPolicyPort{port(udp, 53)},
			}},
		}),
	}
	return s
}

func (s *policyScene) pod(name, app, node, ip string) {
	s.cluster.Pods = append(s.cluster.Pods, netpol.Pod{Namespace: "prod", Name: name, Node: node,
		Labels: map[string]string{"app": app}, IPs: []netip.Addr{netip.MustParseAddr(ip)}})
}

// enforce compiles the cluster for the node and enforces it, and returns what it wrote.
func (s *policyScene) enforce(np *windows.NetworkPolicy) string {
	s.t.Helper()
	rules := netpol.Compile(s.cluster, policyNode, np.Options())
	written, err := np.Enforce(rules, s.subnets, true)
	if err != nil {
		s.t.Fatalf("Enforce: %v", err)
	}
	return written
}

// flow is one connection the scene judges: to (In) or from the pod at local.
type flow struct {
	local  string
	in     bool
	proto  int
	remote string
	port   uint16
	want   bool
}

func (s *policyScene) check(step string, flows ...flow) {
	s.t.Helper()
	for _, f := range flows {
		ok, rule, err := s.n.hns.ACLAllows(netip.MustParseAddr(f.local), hnstest.Flow{In: f.in, Protocol: f.proto, Remote: netip.MustParseAddr(f.remote), Port: f.port})
		if err != nil {
			s.t.Fatalf("%s: %v", step, err)
		}
		if ok != f.want {
			dir := "from"
			if !f.in {
				dir = "to"
			}
			s.t.Errorf("%s: pod %s, protocol %d %s %s port %d: allowed %v, want %v (decided by %s)", step, f.local, f.proto, dir, f.remote, f.port, ok, f.want, rule)
		}
	}
}

// aclWrites counts the ModifyEndpoint requests since the last call.
func (s *policyScene) aclWrites() int {
	n := 0
	for _, r := range s.n.mutations() {
		if r.Op == "ModifyEndpoint" {
			n++
		}
	}
	return n
}

// TestNetworkPolicyACLs: weftd's NetworkPolicy on Windows, as HNS ACLs on the pods'
// endpoints, judged by the simulator's reading of HNS's ACL rules (windows/hnstest acl.go):
// each isolated direction allows what the policies allow and nothing else, the node's own
// addresses reach a pod, a direction not isolated stays open, a pod nothing isolates keeps
// no ACL, an endpoint of no known pod is blocked both ways, an operator's ACLs and
// kube-proxy's remote endpoints are left alone, a second Enforce writes nothing, drift is
// repaired, and Remove takes only weft's ACLs away (also before the network is known).
func TestNetworkPolicyACLs(t *testing.T) {
	const tcp, udp, icmp = hnstest.ProtoTCP, hnstest.ProtoUDP, hnstest.ProtoICMP
	s := newPolicyScene(t)
	np := s.n.plane.NetworkPolicy()
	s.n.mutations()
	s.check("the CNI plugin's closed endpoint, before weftd", flow{"10.244.3.9", true, hnstest.ProtoTCP, "10.244.1.9", 80, false},
		flow{"10.244.3.9", false, hnstest.ProtoTCP, "10.244.1.9", 80, false})
	written := s.enforce(np)
	for _, want := range []string{"prod/a: 4 ACLs", "prod/b: 3 ACLs", "unknown endpoint pod-c: 2 ACLs", "prod/e: 0 ACLs"} {
		if !strings.Contains(written, want) {
			t.Errorf("Enforce wrote %q: want %q in it", written, want)
		}
	}
	if strings.Contains(written, "prod/d") {
		t.Errorf("Enforce wrote %q: pod d, which nothing isolates, needs no ACL", written)
	}
	if n := s.aclWrites(); n != 4 {
		t.Errorf("the first Enforce made %d ModifyEndpoint requests, want 4 (a, b, the unknown c, e opened)", n)
	}
	enforced := []flow{
		{"10.244.3.5", true, tcp, "10.244.1.9", 80, true},        // a: the client on 80
		{"10.244.3.5", true, tcp, "10.244.1.9", 81, false},       // not on 81
		{"10.244.3.5", true, udp, "10.244.1.9", 80, false},       // nor over UDP
		{"10.244.3.5", true, tcp, "10.244.1.10", 80, false},      // nor from another pod
		{"10.244.3.5", true, icmp, "10.244.3.1", 0, true},        // the node itself, always
		{"10.244.3.5", false, tcp, "10.244.1.10", 443, true},     // a's egress is not isolated
		{"10.244.3.5", false, tcp, "169.254.169.254", 80, false}, // but the operator's block holds
		{"10.244.3.2", false, udp, "10.2.3.4", 53, true},         // b: DNS in 10/8
		{"10.244.3.2", false, udp, "10.1.2.3", 53, false},        // not in the except
		{"10.244.3.2", false, tcp, "10.2.3.4", 53, false},        // not over TCP
		{"10.244.3.2", false, udp, "192.168.0.1", 53, false},     // not outside 10/8
		{"10.244.3.2", true, tcp, "10.244.1.10", 22, true},       // b's ingress is not isolated
		{"10.244.3.7", true, tcp, "10.244.1.9", 80, false},       // c: no known pod, closed
		{"10.244.3.7", false, udp, "10.2.3.4", 53, false},
		{"10.244.3.8", true, tcp, "10.244.1.10", 80, true}, // d: nothing isolates it
		{"10.244.3.8", false, tcp, "169.254.169.254", 80, false},
		{"10.244.3.9", true, tcp, "10.244.1.10", 80, true}, // e: known, open now
		{"10.244.3.9", false, tcp, "10.244.1.10", 80, true},
	}
	s.check("enforced", enforced...)

	if w := s.enforce(np); w != "" || s.aclWrites() != 0 {
		t.Errorf("a second Enforce of the same rules wrote %q", w)
	}
	eps, err := s.n.hns.NetworkEndpoints(s.netID)
	if err != nil {
		t.Fatal(err)
	}
	var remote int
	for _, ep := range eps {
		if ep.Flags&windows.EndpointRemote == 0 {
			continue
		}
		remote++
		if slices.ContainsFunc(ep.Policies, func(p windows.Policy) bool { return p.Type == windows.PolicyACL }) {
			t.Errorf("remote endpoint %s got an ACL: %s", ep.Name, ep.Policies)
		}
	}
	if remote == 0 {
		t.Fatal("the scene has no remote endpoint: the check of them proves nothing")
	}

	// Drift: a's ACLs removed by hand come back; the operator's stays.
	a := endpointByName(t, eps, "pod-a")
	if err := s.n.hns.ModifyEndpointSettings(a.ID, windows.EndpointPolicyRequest(windows.RequestUpdate, operatorACLs...)); err != nil {
		t.Fatal(err)
	}
	s.check("drifted", flow{"10.244.3.5", true, tcp, "10.244.1.10", 80, true}) // the operator's allow-all alone
	if w := s.enforce(np); !strings.Contains(w, "prod/a") {
		t.Errorf("Enforce after a's ACLs were removed wrote %q, want prod/a", w)
	}
	s.check("repaired", enforced...)

	// c's pod becomes known, isolated by nothing: its block goes.
	s.pod("c", "late", policyNode, "10.244.3.7")
	if w := s.enforce(np); !strings.Contains(w, "prod/c: 0 ACLs") {
		t.Errorf("Enforce once c's pod is known wrote %q, want its ACLs removed", w)
	}
	s.check("c known", flow{"10.244.3.7", true, tcp, "10.244.1.9", 80, true})

	// A policy with SCTP ports is refused on Windows and fails closed.
	sctp := protocol(corev1.ProtocolSCTP)
	v := intstr.FromInt32(9000)
	s.cluster.Policies = append(s.cluster.Policies, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "sctp"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "free"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: sctp, Port: &v}}}},
		},
	})
	if rules := netpol.Compile(s.cluster, policyNode, np.Options()); len(rules.Refused) != 1 {
		t.Errorf("the SCTP policy: refused %v, want it refused", rules.Refused)
	}
	s.enforce(np)
	s.check("sctp refused", flow{"10.244.3.8", true, tcp, "10.244.1.9", 9000, false}, flow{"10.244.3.8", false, tcp, "10.244.1.9", 80, true})

	// Remove: weft's ACLs go, the operator's stay.
	if err := np.Remove(); err != nil {
		t.Fatal(err)
	}
	s.check("removed", flow{"10.244.3.2", false, tcp, "10.2.3.4", 53, true}, flow{"10.244.3.7", true, tcp, "10.244.1.10", 1, true},
		flow{"10.244.3.5", false, tcp, "169.254.169.254", 80, false})
	eps, _ = s.n.hns.NetworkEndpoints(s.netID)
	for _, ep := range eps {
		if want := 0; ep.Name == "pod-a" || ep.Name == "pod-d" {
			want = len(operatorACLs)
			if got := countACLs(ep); got != want {
				t.Errorf("after Remove endpoint %s has %d ACLs, want the operator's alone", ep.Name, got)
			}
		} else if got := countACLs(ep); got != want {
			t.Errorf("after Remove endpoint %s has %d ACLs, want none", ep.Name, got)
		}
	}

	// Remove before the network is known (weftd started with policy off after a run with it
	// on): done by the next Prepare.
	s.enforce(np)
	s.n.restart()
	if err := s.n.plane.NetworkPolicy().Remove(); err != nil {
		t.Fatal(err)
	}
	s.check("before Prepare", flow{"10.244.3.2", false, tcp, "10.2.3.4", 80, false}) // b's ACLs still hold
	s.n.mustAcquire("10.244.3.0/24")
	s.check("after Prepare", flow{"10.244.3.2", false, tcp, "10.2.3.4", 80, true}, flow{"10.244.3.5", true, tcp, "10.244.1.10", 80, true})
}

func protocol(p corev1.Protocol) *corev1.Protocol { return &p }

func endpointByName(t *testing.T, eps []windows.HostComputeEndpoint, name string) windows.HostComputeEndpoint {
	t.Helper()
	for _, ep := range eps {
		if ep.Name == name {
			return ep
		}
	}
	t.Fatalf("no endpoint %s", name)
	return windows.HostComputeEndpoint{}
}

func countACLs(ep windows.HostComputeEndpoint) int {
	n := 0
	for _, p := range ep.Policies {
		if p.Type == windows.PolicyACL {
			n++
		}
	}
	return n
}
