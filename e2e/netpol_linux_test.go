package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/internal/kubetest"
	"github.com/weftnet/weft/status"
)

const (
	// policyTimeout bounds how long weftd may take to enforce a change of Pods, labels or
	// NetworkPolicies: the watch event, a compile, one nftables transaction. Generous, as the
	// tests share a loaded machine.
	policyTimeout = 20 * time.Second
	// dialTimeout bounds one connection of the test. A SYN that policy drops is never
	// answered, so each denied connection costs this long.
	dialTimeout = time.Second

	// Every policy pod serves TCP on both ports. httpPort is its container port named
	// "http", the name policies use; otherPort is named nowhere.
	httpPort  = 8080
	otherPort = 8081
)

// policyPod is a pod of the harness (a network namespace on a node) and what the Pod object
// the test makes for it says: its namespace and labels; its name is the harness pod's.
type policyPod struct {
	*cluster.Pod
	namespace string
	labels    map[string]string
}

func (p *policyPod) String() string { return p.namespace + "/" + p.Name }

// flow is a TCP connection from one pod to a port of another, and whether policy lets it
// through.
type flow struct {
	from, to *policyPod
	port     int
	allowed  bool
}

func allow(from, to *policyPod, port int) flow { return flow{from, to, port, true} }
func deny(from, to *policyPod, port int) flow  { return flow{from, to, port, false} }

func (f flow) String() string {
	verdict := "denied"
	if f.allowed {
		verdict = "allowed"
	}
	return fmt.Sprintf("%s (node %s) -> %s:%d (node %s) %s", f.from, f.from.Node.Name, f.to, f.port, f.to.Node.Name, verdict)
}

// TestNetworkPolicy runs weftd --network-policy on a two-node vxlan cluster in Kubernetes
// mode, with five pods in three namespaces, and checks with TCP connections (between the
// nodes, and between the pods of one node) what each step of NetworkPolicy allows:
//
//  1. Before the pods have Pod objects, weftd has matched none of their addresses, and drops
//     their traffic both ways (fail closed); a pod whose Pod is Running with its address is
//     let through, and the others are not. With every Pod in, everything flows (no policy),
//     and every pod counts as not isolated.
//  2. A default deny of ingress in namespace prod: nothing reaches prod's pods, the pods of
//     other namespaces are still reached, and a prod pod still connects out.
//  3. Ingress from role=frontend to the named port "http" of prod's web pod: the frontend
//     reaches 8080 and not 8081, another prod pod reaches neither, until it is relabelled
//     role=frontend, which rewrites no chain of the node's table.
//  4. Ingress from namespaces labelled team=ops, on every port.
//  5. A default deny of egress on a pod of namespace dev: it connects nowhere, and is still
//     reached.
//  6. Restarting weftd on the node of the web pod keeps what is denied denied and what is
//     allowed allowed, while it is stopped, as it starts and after: the table stays.
//  7. Deleting the policies lets everything through again.
//
// weft_network_policy_pods counts the pods of each node by isolation at each step.
func TestNetworkPolicy(t *testing.T) {
	bins := needBinaries(t)
	needKubeAPIServer(t)
	vxlan := backends()[slices.IndexFunc(backends(), backend.vxlan)]
	kc := newKubeClusterWith(t, bins, vxlan, bins.weftd, kubeClusterOptions{weftdArgs: []string{"--network-policy"}})
	kc.grantPolicyRead(t)
	nodes := kc.addNodes(t, 1, 2)
	n1, n2 := nodes[0], nodes[1]
	// Registered after the cluster's cleanups, so it runs first, while the nodes still exist.
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range nodes {
				dumpPolicy(t, n)
			}
		}
	})

	newPod := func(n *cluster.Node, name, namespace string, labels map[string]string) *policyPod {
		p := &policyPod{Pod: addPod(t, kc.Cluster, n, name), namespace: namespace, labels: labels}
		serve(t, p, httpPort, otherPort)
		return p
	}
	web := newPod(n1, "web", "prod", map[string]string{"app": "web"})
	api := newPod(n1, "api", "dev", map[string]string{"app": "api"})
	front := newPod(n2, "front", "prod", map[string]string{"role": "frontend"})
	other := newPod(n2, "other", "prod", map[string]string{"role": "backend"})
	tool := newPod(n2, "tool", "ops", map[string]string{"app": "tool"})
	pods := []*policyPod{web, api, front, other, tool}
	// Every connection of a pod to another's named port: between the nodes, and on one node
	// (over its cni0 bridge, which br_netfilter hands to the forward hook).
	var all []flow
	for _, a := range pods {
		for _, b := range pods {
			if a != b {
				all = append(all, allow(a, b, httpPort))
			}
		}
	}

	t.Run("fail closed", func(t *testing.T) {
		// The policy loop has listed the cluster (no pods yet) once the gauge is set.
		awaitPolicyPods(t, n1, "none=0 ingress=0 egress=0 both=0")
		awaitPolicyPods(t, n2, "none=0 ingress=0 egress=0 both=0")
		none := slices.Clone(all)
		for i := range none {
			none[i].allowed = false
		}
		awaitFlows(t, "pods without Pod objects", none, policyTimeout)
		if sent, recv, err := cluster.Ping(front.Pod, web.IP, 3, 20*time.Millisecond); err != nil || recv != 0 {
			t.Errorf("ping %s -> %s without Pod objects: %d of %d answered (%v); want none", front, web, recv, sent, err)
		}
		t.Logf("node %s's policy table with no Pods:\n%s", n1.Name, policyTable(t, n1, false))

		kc.createNamespace(t, "prod", map[string]string{"env": "prod"})
		kc.createNamespace(t, "dev", map[string]string{"env": "dev"})
		kc.createNamespace(t, "ops", map[string]string{"team": "ops"})
		// Every Pod but web's: each pod is let through once weftd knows its address, and not
		// before.
		for _, p := range pods[1:] {
			kc.createPodObject(t, p)
		}
		some := slices.Clone(all)
		for i, f := range some {
			some[i].allowed = f.from != web && f.to != web
		}
		awaitFlows(t, "Pods of all but web", some, policyTimeout)
		kc.createPodObject(t, web)
		took := untilConnects(t, front, web, httpPort, policyTimeout)
		t.Logf("%s reached %s (another node) %v after %s's Pod was Running with its address", front, web, took.Round(time.Millisecond), web)
		awaitFlows(t, "Pods of all", all, policyTimeout)
		var cps []*cluster.Pod
		for _, p := range pods {
			cps = append(cps, p.Pod)
		}
		pingAll(t, cps)
		awaitPolicyPods(t, n1, "none=2 ingress=0 egress=0 both=0")
		awaitPolicyPods(t, n2, "none=3 ingress=0 egress=0 both=0")
	})
	if t.Failed() {
		return
	}

	t.Run("default deny ingress", func(t *testing.T) {
		kc.createPolicy(t, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "default-deny-ingress"},
			Spec: networkingv1.NetworkPolicySpec{
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			},
		})
		awaitFlows(t, "prod denies ingress", []flow{
			deny(front, web, httpPort),
			deny(tool, web, httpPort),
			deny(api, front, httpPort),
			deny(api, other, httpPort),
			deny(api, web, httpPort),    // on one node
			deny(tool, other, httpPort), // on one node
			allow(tool, api, httpPort),  // another namespace
			allow(api, tool, httpPort),
			allow(front, tool, httpPort), // on one node
			allow(web, tool, httpPort),   // prod's egress, and the replies
			allow(web, api, httpPort),    // on one node
		}, policyTimeout)
		awaitPolicyPods(t, n1, "none=1 ingress=1 egress=0 both=0")
		awaitPolicyPods(t, n2, "none=1 ingress=2 egress=0 both=0")
	})
	if t.Failed() {
		return
	}

	t.Run("from pods to a named port", func(t *testing.T) {
		kc.createPolicy(t, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "web-from-frontend"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "frontend"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: new(intstr.FromString("http"))}},
				}},
			},
		})
		awaitFlows(t, "web allows role=frontend on port http", []flow{
			allow(front, web, httpPort),
			deny(front, web, otherPort),
			deny(other, web, httpPort),
			deny(tool, web, httpPort),
		}, policyTimeout)

		chains := chainsOnly(policyTable(t, n1, true))
		other.labels = map[string]string{"role": "frontend"}
		kc.relabelPod(t, other)
		took := untilConnects(t, other, web, httpPort, policyTimeout)
		t.Logf("%s, relabelled role=frontend, reached %s %v after its Pod was updated", other, web, took.Round(time.Millisecond))
		awaitFlows(t, "pod other relabelled role=frontend", []flow{
			allow(other, web, httpPort),
			deny(other, web, otherPort),
		}, policyTimeout)
		// Which pods a rule lets through lives in sets: a label rewrites set elements only.
		if after := chainsOnly(policyTable(t, n1, true)); after != chains {
			t.Errorf("node %s: relabelling a peer rewrote chains of its policy table; before:\n%s\nafter:\n%s", n1.Name, chains, after)
		} else {
			t.Logf("node %s: the relabel changed no chain of the policy table (rule handles equal)", n1.Name)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("from a namespace", func(t *testing.T) {
		kc.createPolicy(t, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "web-from-ops"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ops"}}}},
				}},
			},
		})
		awaitFlows(t, "web allows namespaces team=ops on every port", []flow{
			allow(tool, web, httpPort),
			allow(tool, web, otherPort),
			allow(front, web, httpPort),
			deny(front, web, otherPort), // prod is not team=ops
		}, policyTimeout)
	})
	if t.Failed() {
		return
	}

	t.Run("default deny egress", func(t *testing.T) {
		kc.createPolicy(t, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "dev", Name: "api-deny-egress"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			},
		})
		awaitFlows(t, "api denies egress", []flow{
			deny(api, tool, httpPort),
			deny(api, tool, otherPort),
			deny(api, web, httpPort),   // on one node
			allow(tool, api, httpPort), // its ingress, and the replies
			allow(web, api, httpPort),  // on one node
			allow(web, tool, httpPort), // another pod of its node
		}, policyTimeout)
		awaitPolicyPods(t, n1, "none=0 ingress=1 egress=1 both=0")
		awaitPolicyPods(t, n2, "none=1 ingress=2 egress=0 both=0")
		// /status (weftctl status) names the isolated pods and the policies that select them.
		untilStatus(t, "dev/api isolated for egress by dev/api-deny-egress", n1, policyTimeout, func(st status.Node) bool {
			np := st.NetworkPolicy
			return np != nil && np.Written != nil && slices.ContainsFunc(np.Pods, func(p status.PolicyPod) bool {
				return p.Pod == "dev/api" && p.Egress && !p.Ingress && slices.Contains(p.Policies, "dev/api-deny-egress")
			})
		})
	})
	if t.Failed() {
		return
	}

	t.Run("weftd restart", func(t *testing.T) {
		flows := []flow{
			deny(front, web, otherPort),
			deny(api, tool, httpPort), // egress, enforced on the restarted node
			deny(api, front, httpPort),
			allow(front, web, httpPort),
			allow(other, web, httpPort),
			allow(tool, web, otherPort),
			allow(tool, api, httpPort),
		}
		awaitFlows(t, "before the restart", flows, policyTimeout)
		table := policyTable(t, n1, true)

		watch := watchFlows(t, flows)
		stopped := stopDaemon(t, n1)
		t.Logf("weftd on %s stopped in %v", n1.Name, stopped.Round(time.Millisecond))
		if got := policyTable(t, n1, true); got != table {
			t.Errorf("node %s: weftd's stop changed the policy table; before:\n%s\nafter:\n%s", n1.Name, table, got)
		}
		checkFlows(t, "while weftd is stopped", flows)
		if err := n1.Start(); err != nil {
			t.Fatal(err)
		}
		checkFlows(t, "as weftd starts", flows)
		if err := n1.WaitReady(readyTimeout); err != nil {
			t.Fatal(err)
		}
		// The restarted weftd has listed the cluster and compiled once the gauge is set.
		awaitPolicyPods(t, n1, "none=0 ingress=1 egress=1 both=0")
		awaitFlows(t, "after the restart", flows, policyTimeout)
		rounds := watch()
		t.Logf("every connection was checked %d times from the stop until the restarted weftd enforced", rounds)
		if got := policyTable(t, n1, true); got != table {
			// One transaction either way; but adoption should leave an equal table alone.
			t.Logf("node %s: the restarted weftd rewrote parts of the policy table; before:\n%s\nafter:\n%s", n1.Name, table, got)
		} else {
			t.Logf("node %s: the restarted weftd adopted the policy table as it was (rule handles equal)", n1.Name)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("drift repaired", func(t *testing.T) {
		flows := []flow{
			deny(front, web, otherPort),
			deny(api, tool, httpPort),
			allow(front, web, httpPort),
			allow(tool, api, httpPort),
		}
		before := counter(t, n1, "weft_network_policy_drift_repaired_total")
		nodeExec(t, n1, "nft", "flush", "table", "inet", "weft_policy")
		start := time.Now()
		awaitFlows(t, "after the table was flushed by hand", flows, 2*policyResync)
		for counter(t, n1, "weft_network_policy_drift_repaired_total") <= before {
			if time.Since(start) > 2*policyResync {
				t.Fatalf("node %s: weft_network_policy_drift_repaired_total still %v", n1.Name, before)
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("node %s: the flushed table written back and counted within %v", n1.Name, time.Since(start).Round(100*time.Millisecond))
	})
	if t.Failed() {
		return
	}

	t.Run("policies deleted", func(t *testing.T) {
		for _, name := range []string{"prod/default-deny-ingress", "prod/web-from-frontend", "prod/web-from-ops", "dev/api-deny-egress"} {
			kc.deletePolicy(t, name)
		}
		awaitFlows(t, "no policy", append(slices.Clone(all),
			allow(front, web, otherPort),
			allow(api, tool, otherPort),
		), policyTimeout)
		awaitPolicyPods(t, n1, "none=2 ingress=0 egress=0 both=0")
		awaitPolicyPods(t, n2, "none=3 ingress=0 egress=0 both=0")
		for _, n := range nodes {
			if got := counter(t, n, "weft_network_policy_refused"); got != 0 {
				t.Errorf("node %s: weft_network_policy_refused %v; want 0: every policy of the test is enforceable", n.Name, got)
			}
			writes := policyWrites(t, n)
			t.Logf("node %s: %s", n.Name, writes)
			// The series of a result appears with its first write.
			if strings.Contains(writes, `result="error"`) {
				t.Errorf("node %s: weftd failed to write its policy table: %s", n.Name, writes)
			}
		}
	})
}

// serve answers "ok" to every TCP connection to the ports of the pod, until the test ends.
func serve(t *testing.T, p *policyPod, ports ...int) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // after the listeners close: cleanups run last first
	for _, port := range ports {
		var l net.Listener
		var lerr error
		if err := cluster.InNetns(p.NS, func() error {
			l, lerr = net.Listen("tcp", fmt.Sprintf(":%d", port))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if lerr != nil {
			t.Fatalf("pod %s: listening on TCP port %d: %v", p, port, lerr)
		}
		t.Cleanup(func() { l.Close() })
		wg.Go(func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_ = c.SetWriteDeadline(time.Now().Add(dialTimeout))
				_, _ = c.Write([]byte("ok"))
				c.Close()
			}
		})
	}
}

// hello connects from one pod to a port of another, within timeout, and reads the
// listener's "ok" within as long again: nil when that exchange completed, else why not.
// Failing to enter the pod's namespace fails the test.
func hello(t *testing.T, from, to *policyPod, port int, timeout time.Duration) error {
	var c net.Conn
	var derr error
	if err := cluster.InNetns(from.NS, func() error {
		d := net.Dialer{Timeout: timeout}
		c, derr = d.Dial("tcp", net.JoinHostPort(to.IP.String(), strconv.Itoa(port)))
		return nil
	}); err != nil {
		t.Errorf("pod %s: %v", from, err)
		return err
	}
	if derr != nil {
		return derr
	}
	defer c.Close()
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	got, err := io.ReadAll(c)
	if err != nil {
		return fmt.Errorf("connected, then: %w", err)
	}
	if string(got) != "ok" {
		return fmt.Errorf("connected, then read %q; want \"ok\"", got)
	}
	return nil
}

// wrongFlows tries every flow at once, and describes those that policy did not treat as
// they say.
func wrongFlows(t *testing.T, flows []flow) []string {
	wrong := make([]string, len(flows))
	var wg sync.WaitGroup
	for i, f := range flows {
		wg.Go(func() {
			err := hello(t, f.from, f.to, f.port, dialTimeout)
			switch {
			case f.allowed && err != nil:
				wrong[i] = fmt.Sprintf("%v, but: %v", f, err)
			case !f.allowed && err == nil:
				wrong[i] = fmt.Sprintf("%v, but it connected", f)
			}
		})
	}
	wg.Wait()
	return slices.DeleteFunc(wrong, func(s string) bool { return s == "" })
}

// awaitFlows tries the flows until policy treats all as they say, fails the test if that
// takes longer than timeout, and returns how long it took. Then it tries them once more: what
// policy has come to must hold.
func awaitFlows(t *testing.T, what string, flows []flow, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		wrong := wrongFlows(t, flows)
		if len(wrong) == 0 {
			break
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: after %v, %d of %d connections not as policy says:\n  %s",
				what, timeout, len(wrong), len(flows), strings.Join(wrong, "\n  "))
		}
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("%s: %d connections as policy says after %v", what, len(flows), took.Round(time.Millisecond))
	if wrong := wrongFlows(t, flows); len(wrong) > 0 {
		t.Errorf("%s, tried again: %d of %d connections not as policy says:\n  %s",
			what, len(wrong), len(flows), strings.Join(wrong, "\n  "))
	}
	return took
}

// checkFlows tries the flows once; each not as policy says is an error of the test.
func checkFlows(t *testing.T, what string, flows []flow) {
	t.Helper()
	if wrong := wrongFlows(t, flows); len(wrong) > 0 {
		t.Errorf("%s: %d of %d connections not as policy says:\n  %s", what, len(wrong), len(flows), strings.Join(wrong, "\n  "))
		return
	}
	t.Logf("%s: %d connections as policy says", what, len(flows))
}

// untilConnects tries a connection from one pod to a port of another every 20 ms, each
// given 100 ms (a dropped SYN would be sent again only after a second), until one completes,
// and returns how long that took, to within about 120 ms; it fails the test after timeout.
func untilConnects(t *testing.T, from, to *policyPod, port int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := hello(t, from, to, port, 100*time.Millisecond)
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s cannot connect to %s:%d after %v: %v", from, to, port, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watchFlows tries the flows round after round until the function it returns is called. That
// function fails the test with every connection that was not as policy says, and when, and
// returns how many rounds ran.
func watchFlows(t *testing.T, flows []flow) func() int {
	t.Helper()
	start := time.Now()
	stop := make(chan struct{})
	type result struct {
		rounds int
		wrong  []string
	}
	done := make(chan result, 1)
	go func() {
		var res result
		for {
			for _, w := range wrongFlows(t, flows) {
				res.wrong = append(res.wrong, fmt.Sprintf("%v: %s", time.Since(start).Round(time.Millisecond), w))
			}
			res.rounds++
			select {
			case <-stop:
				done <- res
				return
			default:
			}
		}
	}()
	var once sync.Once
	var res result
	finish := func() {
		close(stop)
		res = <-done
	}
	t.Cleanup(func() { once.Do(finish) }) // the test may end first
	return func() int {
		t.Helper()
		once.Do(finish)
		if len(res.wrong) > 0 {
			t.Errorf("%d connections not as policy says while watched (time since the watch began):\n  %s",
				len(res.wrong), strings.Join(res.wrong, "\n  "))
		}
		return res.rounds
	}
}

// grantPolicyRead lets weft's service account list and watch what --network-policy reads,
// with the RBAC weft ships for it, applied as a user applies it.
func (kc *kubeCluster) grantPolicyRead(t *testing.T) {
	t.Helper()
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubetest.Apply(t, kc.srv.Admin(), filepath.Join(repo, "dist", "kubernetes", "network-policy.yaml"))
}

// createNamespace creates a namespace with the labels, and its default service account, which
// the API server's admission wants of every Pod and no controller makes here.
func (kc *kubeCluster) createNamespace(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := kc.admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Namespace %s: %v", name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "default"}}
	if _, err := kc.admin.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ServiceAccount %s/default: %v", name, err)
	}
}

// createPodObject creates the Pod object of a harness pod, as the scheduler and the kubelet
// would: bound to the pod's node, with one container whose port httpPort is named "http",
// then Running with the pod's addresses.
func (kc *kubeCluster) createPodObject(t *testing.T, p *policyPod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, Name: p.Name, Labels: p.labels},
		Spec: corev1.PodSpec{
			NodeName: p.Node.Name,
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.k8s.io/pause:3.10",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: httpPort, Protocol: corev1.ProtocolTCP}},
			}},
		},
	}
	pods := kc.admin.CoreV1().Pods(p.namespace)
	pod, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Pod %s: %v", p, err)
	}
	pod.Status.Phase = corev1.PodRunning
	for _, a := range p.Addrs() {
		pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: a.String()})
	}
	pod.Status.PodIP = pod.Status.PodIPs[0].IP
	if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting the status of Pod %s: %v", p, err)
	}
}

// relabelPod gives the Pod object of p the labels p has now.
func (kc *kubeCluster) relabelPod(t *testing.T, p *policyPod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	pods := kc.admin.CoreV1().Pods(p.namespace)
	pod, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading Pod %s: %v", p, err)
	}
	pod.Labels = p.labels
	if _, err := pods.Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("relabelling Pod %s %v: %v", p, p.labels, err)
	}
}

func (kc *kubeCluster) createPolicy(t *testing.T, np *networkingv1.NetworkPolicy) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	if _, err := kc.admin.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating NetworkPolicy %s/%s: %v", np.Namespace, np.Name, err)
	}
}

// deletePolicy deletes the NetworkPolicy "namespace/name".
func (kc *kubeCluster) deletePolicy(t *testing.T, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	ns, name, _ := strings.Cut(key, "/")
	if err := kc.admin.NetworkingV1().NetworkPolicies(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting NetworkPolicy %s: %v", key, err)
	}
}

// policyPods is weft_network_policy_pods of the node's weftd, as "none=.. ingress=..
// egress=.. both=..", each "?" while weftd has not set it.
func policyPods(t *testing.T, n *cluster.Node) string {
	t.Helper()
	got := map[string]string{}
	for line := range strings.Lines(mustGet(t, n, "/metrics")) {
		rest, ok := strings.CutPrefix(line, `weft_network_policy_pods{isolated="`)
		if !ok {
			continue
		}
		if kind, value, ok := strings.Cut(strings.TrimSpace(rest), `"} `); ok {
			got[kind] = value
		}
	}
	var b strings.Builder
	for _, kind := range []string{"none", "ingress", "egress", "both"} {
		v, ok := got[kind]
		if !ok {
			v = "?"
		}
		fmt.Fprintf(&b, " %s=%s", kind, v)
	}
	return b.String()[1:]
}

// awaitPolicyPods waits until the node's weft_network_policy_pods is want (as policyPods
// writes it).
func awaitPolicyPods(t *testing.T, n *cluster.Node, want string) {
	t.Helper()
	start := time.Now()
	for {
		got := policyPods(t, n)
		if got == want {
			t.Logf("node %s: weft_network_policy_pods %s", n.Name, got)
			return
		}
		if time.Since(start) > policyTimeout {
			t.Fatalf("node %s: weft_network_policy_pods %s after %v; want %s", n.Name, got, policyTimeout, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// policyWrites is weft_network_policy_writes_total of the node's weftd, for the log.
func policyWrites(t *testing.T, n *cluster.Node) string {
	t.Helper()
	var lines []string
	for line := range strings.Lines(mustGet(t, n, "/metrics")) {
		if strings.HasPrefix(line, "weft_network_policy_writes_total{") {
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	return strings.Join(lines, ", ")
}

// policyResync is weftd's period of checking its policy table against the kernel.
const policyResync = 10 * time.Second

// policyTable is `nft list table inet weft_policy` in the node, with each rule's handle if
// handles, and without the counters' values, which traffic changes.
func policyTable(t *testing.T, n *cluster.Node, handles bool) string {
	t.Helper()
	args := []string{"nft", "list", "table", "inet", "weft_policy"}
	if handles {
		args = slices.Insert(args, 1, "-a")
	}
	counters := regexp.MustCompile(`counter packets \d+ bytes \d+`)
	return counters.ReplaceAllString(nodeExec(t, n, args...), "counter")
}

// chainsOnly is a table as nft lists it less its sets and maps: its chains and their rules.
func chainsOnly(table string) string {
	var b strings.Builder
	depth := 0 // of the set or map being skipped; 0 outside one
	for line := range strings.Lines(table) {
		f := strings.Fields(line)
		if depth == 0 && len(f) > 0 && (f[0] == "set" || f[0] == "map") {
			depth = strings.Count(line, "{") - strings.Count(line, "}")
			continue
		}
		if depth > 0 {
			depth += strings.Count(line, "{") - strings.Count(line, "}")
			continue
		}
		if len(f) > 0 {
			b.WriteString(line)
		}
	}
	return b.String()
}

// dumpPolicy logs the node's policy table and its weftd's last lines about policy, for a
// failed test.
func dumpPolicy(t *testing.T, n *cluster.Node) {
	table, err := n.Exec("nft", "list", "table", "inet", "weft_policy")
	if err != nil {
		table = "(" + err.Error() + ")"
	}
	var lines []string
	if data, err := os.ReadFile(n.LogPath); err != nil {
		lines = append(lines, "("+err.Error()+")")
	} else {
		for line := range strings.Lines(string(data)) {
			if strings.Contains(line, "network-policy") || strings.Contains(line, "NetworkPolic") {
				lines = append(lines, strings.TrimRight(line, "\n"))
			}
		}
	}
	t.Logf("node %s: nft list table inet weft_policy:\n%s\n--- weftd's lines about policy (last 30):\n%s",
		n.Name, table, strings.Join(lines[max(0, len(lines)-30):], "\n"))
}
