package kubecluster

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

// windowsPodObject publishes the Windows pod made through the CNI plugin (id, at ip) as a Pod
// of the API, bound to node and Running at ip, as kubelet.exe would report it (it cannot run
// here).
func windowsPodObject(ctx context.Context, t *testing.T, c *Cluster, name, node string, ip netip.Addr, labels map[string]string) {
	t.Helper()
	p, err := c.Client.CoreV1().Pods(testNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:     node,
			NodeSelector: map[string]string{"kubernetes.io/os": "windows"},
			Containers: []corev1.Container{{Name: "server", Image: "mcr.microsoft.com/windows/nanoserver:ltsc2022",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}},
		HostIP: "", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if _, err := c.Client.CoreV1().Pods(testNamespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// aclCase is a flow to the Windows pod (In) or from it that its endpoint's ACLs must allow
// or not.
type aclCase struct {
	in     bool
	remote netip.Addr
	port   uint16
	allow  bool
}

func (a aclCase) String() string {
	dir := "from"
	if !a.in {
		dir = "to"
	}
	return fmt.Sprintf("TCP %s %s port %d allowed %v", dir, a.remote, a.port, a.allow)
}

// waitACLs waits until the ACLs of the Windows pod at ip judge every case as wanted (the
// simulated HNS's reading of HNS's ACL rules, windows/hnstest acl.go).
func waitACLs(ctx context.Context, t *testing.T, hns *hnstest.HNS, ip netip.Addr, what string, cases ...aclCase) {
	t.Helper()
	start := time.Now()
	for {
		var wrong []string
		for _, cs := range cases {
			ok, rule, err := hns.ACLAllows(ip, hnstest.Flow{In: cs.in, Protocol: hnstest.ProtoTCP, Remote: cs.remote, Port: cs.port})
			if err != nil || ok != cs.allow {
				wrong = append(wrong, fmt.Sprintf("%v: got %v by %s (%v)", cs, ok, rule, err))
			}
		}
		if len(wrong) == 0 {
			t.Logf("%s: the Windows pod's ACLs hold after %v", what, time.Since(start).Round(10*time.Millisecond))
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: the Windows pod's ACLs, after %v: %q", what, time.Since(start).Round(time.Second), wrong)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestWindowsNetworkPolicy: NetworkPolicy on the Windows node of the real cluster (issue 35).
// weft is deployed with policy on (DeployWeftWithPolicy) and weftd.exe runs with
// --network-policy, on the cluster's real pods, namespaces and policies. A Windows pod made
// through the CNI plugin is blocked both ways while the API has no pod of its address (fail
// closed), open once its Pod is there and no policy selects it, then isolated by a real
// NetworkPolicy to what it allows (from the Linux pods on TCP 8080, the node itself), open
// again once the policy is deleted; kube-proxy's remote endpoints never get an ACL.
func TestWindowsNetworkPolicy(t *testing.T) {
	needLong(t)
	opts := needCluster(t)
	wopts := needWindowsNode(t, opts.KubeBin, false)
	wopts.NetworkPolicy = true
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c := newCluster(t, 2)
	deployWeftWith(ctx, t, c, (*Cluster).DeployWeftWithPolicy)
	importE2EImages(ctx, t, c)
	w, err := c.AddWindowsNode(ctx, t, "win1", wopts)
	if err != nil {
		t.Fatal(err)
	}
	k := windowsCheck{c: c, w: w}
	k.waitRSRs(ctx, t, "the Windows node started")
	pods := podsUp(ctx, t, c, func(string) map[string]string { return map[string]string{"app": "net"} })
	linuxPod := netip.MustParseAddr(pods["node1"].Status.PodIP)
	podIP := windowsPod(t, w, "7a0d1e2f3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f")
	sn, err := w.Subnet()
	if err != nil {
		t.Fatal(err)
	}
	stranger := netip.MustParseAddr("10.244.250.9") // no pod's, inside the cluster CIDR
	gateway := sn.Masked().Addr().Next()

	waitACLs(ctx, t, w.HNS, podIP, "no Pod of the endpoint's address yet",
		aclCase{true, linuxPod, 8080, false}, aclCase{false, linuxPod, 8080, false})
	windowsPodObject(ctx, t, c, "win-server", w.Name, podIP, map[string]string{"app": "win-server"})
	waitACLs(ctx, t, w.HNS, podIP, "its Pod published, no policy",
		aclCase{true, linuxPod, 8080, true}, aclCase{true, stranger, 22, true}, aclCase{false, stranger, 443, true})

	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(8080)
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "win-server-in", Namespace: testNamespace},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "win-server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "net"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}},
		},
	}
	if _, err := c.Client.NetworkingV1().NetworkPolicies(testNamespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	isolated := []aclCase{
		{true, linuxPod, 8080, true},
		{true, linuxPod, 8081, false},
		{true, stranger, 8080, false},
		{true, gateway, 22, true}, // the node itself
		{false, stranger, 443, true},
	}
	for _, p := range pods {
		isolated = append(isolated, aclCase{true, netip.MustParseAddr(p.Status.PodIP), 8080, true})
	}
	waitACLs(ctx, t, w.HNS, podIP, "NetworkPolicy win-server-in created", isolated...)

	eps, err := w.HNS.Endpoints()
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps {
		for _, p := range ep.Policies {
			if p.Type == windows.PolicyACL && ep.Flags&windows.EndpointRemote != 0 {
				t.Errorf("kube-proxy's remote endpoint %s (%v) got an ACL: %s", ep.Name, ep.IPs(), p.Settings)
			}
		}
	}

	if err := c.Client.NetworkingV1().NetworkPolicies(testNamespace).Delete(ctx, np.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitACLs(ctx, t, w.HNS, podIP, "NetworkPolicy win-server-in deleted",
		aclCase{true, stranger, 8080, true}, aclCase{true, linuxPod, 8081, true})
	for _, r := range w.Refused() {
		t.Error(r)
	}
}
