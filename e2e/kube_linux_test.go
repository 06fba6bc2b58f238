package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/internal/kubetest"
	"github.com/weftnet/weft/subnet/kube"
)

const (
	// kubeEtcdPrefix keeps the API server's objects apart from the etcd-mode keys the
	// harness writes into the same etcd.
	kubeEtcdPrefix = "/weft-e2e-kube/registry"
	// The namespace and service account of dist/kubernetes/rbac.yaml, bound to the weft
	// ClusterRole.
	weftNamespace      = "kube-flannel"
	weftServiceAccount = "weft"
	// kubeOpTimeout bounds each request the test makes to the API server.
	kubeOpTimeout = 10 * time.Second
)

// kubeCluster is a cluster in Kubernetes mode with its API server, which runs inside the
// underlay namespace on the cluster's etcd.
type kubeCluster struct {
	*cluster.Cluster
	srv   *kubetest.Server
	admin kubernetes.Interface
}

// needKubeAPIServer skips the test when there is no kube-apiserver binary to run.
func needKubeAPIServer(t *testing.T) {
	t.Helper()
	if _, err := kubetest.Binary(); err != nil {
		t.Skipf("kube-apiserver missing, so Kubernetes mode cannot be tested: %v (tools/kube/install-kube.sh builds it)", err)
	}
}

// newKubeCluster makes a Kubernetes-mode cluster with the backend's config: the underlay
// and etcd, then kube-apiserver inside the underlay on https://192.0.2.1:6443, with dist's
// RBAC applied. Each node's weftd authenticates as the weft service account, so that a
// permission the dist ClusterRole lacks fails the test. If the test fails, the Node objects
// and each node's network state are logged before anything goes. With weftd empty, nodes
// start no daemon: the caller starts one (weftd or flanneld) on each.
func newKubeCluster(t *testing.T, bins binaries, b backend, weftd string) *kubeCluster {
	t.Helper()
	return newKubeClusterWith(t, bins, b, weftd, kubeClusterOptions{})
}

// kubeClusterOptions vary the cluster of newKubeClusterWith; the zero value makes
// newKubeCluster's.
type kubeClusterOptions struct {
	// weftdArgs are added to every weftd's flags.
	weftdArgs []string
	// kubeconfig, if set, makes each node's kubeconfig, in place of one that holds a token
	// of the node's own inline. The API server runs when it is called.
	kubeconfig func(kc *kubeCluster, n *cluster.Node) ([]byte, error)
}

// newKubeClusterWith is newKubeCluster with options.
func newKubeClusterWith(t *testing.T, bins binaries, b backend, weftd string, opts kubeClusterOptions) *kubeCluster {
	t.Helper()
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kc := &kubeCluster{}
	c, err := cluster.New(t, cluster.Options{
		NetConf: b.netConf, Weftd: weftd, WeftdArgs: opts.weftdArgs, CNIBin: bins.cniBin, WeftCNI: bins.weftCNI,
		Kube: &cluster.KubeOptions{Kubeconfig: func(n *cluster.Node) ([]byte, error) {
			// kc.srv is set below, before the first AddNode.
			if opts.kubeconfig != nil {
				return opts.kubeconfig(kc, n)
			}
			// A token of its own per node, as each weftd pod would have.
			rc := kc.srv.ServiceAccountConfig(t, weftNamespace, weftServiceAccount)
			return cluster.Kubeconfig(rc.Host, rc.CAData, rc.BearerToken)
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	kc.Cluster = c
	// Registered after New's cleanup, so that kubetest's, registered by Start, kills the
	// API server before the cluster's Close removes the underlay it runs in.
	kc.srv = kubetest.Start(t, c.APIServerOptions(kubeEtcdPrefix))
	if kc.srv.URL() != cluster.APIServerURL {
		t.Fatalf("API server at %s, want %s", kc.srv.URL(), cluster.APIServerURL)
	}
	kubetest.Apply(t, kc.srv.Admin(), filepath.Join(repo, "dist", "kubernetes", "rbac.yaml"))
	if kc.admin, err = kubernetes.NewForConfig(kc.srv.Admin()); err != nil {
		t.Fatal(err)
	}
	// Registered last, so it runs first, while the API server and the nodes still exist.
	t.Cleanup(func() {
		if t.Failed() {
			kc.dump(t)
			dumpCluster(t, c)
		}
	})
	return kc
}

// podCIDR is the podCIDR the test gives node n<i>.
func podCIDR(i int) netip.Prefix { return cluster.PodCIDR(i) }

// createNode creates the Node object of a node, with its podCIDRs (the first is also its
// podCIDR), as the kubelet and kube-controller-manager would before weftd starts on it.
func (kc *kubeCluster) createNode(t *testing.T, name string, cidrs ...netip.Prefix) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	if err := cluster.CreateNode(ctx, kc.admin, name, nil, cidrs...); err != nil {
		t.Fatal(err)
	}
}

// addNodes adds the nodes n<i> for each index i, as a cluster would: the Node object with
// podCIDR(i) first, then weftd; it waits until every weftd is ready. The nodes must be
// added in the order of their indices, which the cluster gives them.
func (kc *kubeCluster) addNodes(t *testing.T, indices ...int) []*cluster.Node {
	t.Helper()
	var names []string
	for _, i := range indices {
		names = append(names, fmt.Sprintf("n%d", i))
		kc.createNode(t, names[len(names)-1], podCIDR(i))
	}
	nodes := startNodes(t, kc.Cluster, names...)
	for i, n := range nodes {
		if n.Index != indices[i] {
			t.Fatalf("node %s has index %d, so its pods and its podCIDR %s would not match", n.Name, n.Index, podCIDR(indices[i]))
		}
	}
	return nodes
}

// deleteNode deletes a Node object, as an operator removing a dead node would.
func (kc *kubeCluster) deleteNode(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	if err := kc.admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting Node %s: %v", name, err)
	}
}

func (kc *kubeCluster) getNode(name string) (*corev1.Node, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	n, err := kc.admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Node %s: %w", name, err)
	}
	return n, nil
}

// annotation is the key of one of flannel's node annotations under the default prefix.
func annotation(name string) string { return kube.DefaultAnnotationPrefix + "/" + name }

// vxlanDeviceMAC is the MAC address of the node's VXLAN device, as the kernel has it.
func vxlanDeviceMAC(t *testing.T, n *cluster.Node) string {
	t.Helper()
	var links []struct {
		Address string `json:"address"`
	}
	out := nodeExec(t, n, "ip", "-j", "link", "show", vxlanDevice)
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		t.Fatalf("node %s: ip -j link show %s: %q (%v)", n.Name, vxlanDevice, out, err)
	}
	return strings.ToLower(links[0].Address)
}

// checkNode checks what a ready node shows: subnet.env holds its podCIDR; its Node carries
// flannel's annotations with this node's backend and public IP (and, with vxlan, the MAC
// of its flannel.1 as VtepMAC), and the condition NetworkUnavailable=False. The annotations
// and the condition may trail readiness by a patch, so they are waited for.
func (kc *kubeCluster) checkNode(t *testing.T, n *cluster.Node, b backend, cidr netip.Prefix) {
	t.Helper()
	env, err := n.SubnetEnv()
	if err != nil {
		t.Fatal(err)
	}
	wantMTU := 1500
	if b.vxlan() {
		wantMTU = 1450 // the underlay's 1500 less VXLAN's 50
	}
	if env.Network != netip.MustParsePrefix("10.244.0.0/16") || env.Subnet.Masked() != cidr ||
		env.Subnet.Addr() != cidr.Addr().Next() || env.MTU != wantMTU {
		t.Errorf("node %s subnet.env: %+v; want Network 10.244.0.0/16, Subnet %s/%d (the podCIDR's first address), MTU %d",
			n.Name, env, cidr.Addr().Next(), cidr.Bits(), wantMTU)
	}

	wantData := "null" // what flannel writes for host-gw
	if b.vxlan() {
		wantData = fmt.Sprintf(`{"VNI":1,"VtepMAC":%q}`, vxlanDeviceMAC(t, n))
	}
	want := map[string]string{
		annotation("kube-subnet-manager"): "true",
		annotation("backend-type"):        b.name,
		annotation("backend-data"):        wantData,
		annotation("public-ip"):           n.IP.String(),
	}
	check := func() error {
		node, err := kc.getNode(n.Name)
		if err != nil {
			return err
		}
		var errs []error
		for k, v := range want {
			got, ok := node.Annotations[k]
			if !ok {
				errs = append(errs, fmt.Errorf("annotation %s missing, want %q", k, v))
				continue
			}
			if k == annotation("backend-data") && b.vxlan() {
				// Compared as JSON: key order and MAC case are the writer's choice.
				got, err = normalVXLANData(got)
				if err != nil {
					errs = append(errs, fmt.Errorf("annotation %s: %w", k, err))
					continue
				}
			}
			if got != v {
				errs = append(errs, fmt.Errorf("annotation %s = %q, want %q", k, got, v))
			}
		}
		var cond *corev1.NodeCondition
		for i := range node.Status.Conditions {
			if node.Status.Conditions[i].Type == corev1.NodeNetworkUnavailable {
				cond = &node.Status.Conditions[i]
			}
		}
		switch {
		case cond == nil:
			errs = append(errs, errors.New("no NetworkUnavailable condition"))
		case cond.Status != corev1.ConditionFalse || cond.Reason != kube.ReadyReason:
			errs = append(errs, fmt.Errorf("condition NetworkUnavailable=%s reason %q, want False reason %q",
				cond.Status, cond.Reason, kube.ReadyReason))
		}
		return errors.Join(errs...)
	}
	start := time.Now()
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Since(start) > convergeTimeout {
			t.Fatalf("node %s: Node object after %v: %v", n.Name, convergeTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// normalVXLANData re-encodes a vxlan backend-data annotation as {"VNI":..,"VtepMAC":..} with
// a lower-case MAC.
func normalVXLANData(s string) (string, error) {
	var d struct {
		VNI     int
		VtepMAC string
	}
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		return "", fmt.Errorf("%q: %w", s, err)
	}
	return fmt.Sprintf(`{"VNI":%d,"VtepMAC":%q}`, d.VNI, strings.ToLower(d.VtepMAC)), nil
}

// annotatedVtepMAC is the VtepMAC a vxlan node publishes in its backend-data annotation.
func (kc *kubeCluster) annotatedVtepMAC(t *testing.T, name string) string {
	t.Helper()
	node, err := kc.getNode(name)
	if err != nil {
		t.Fatal(err)
	}
	var d struct{ VtepMAC string }
	data := node.Annotations[annotation("backend-data")]
	if err := json.Unmarshal([]byte(data), &d); err != nil || d.VtepMAC == "" {
		t.Fatalf("Node %s: backend-data %q has no VtepMAC (%v)", name, data, err)
	}
	return strings.ToLower(d.VtepMAC)
}

// dump logs every Node object's podCIDRs, weft's annotations and conditions, for a failed
// test.
func (kc *kubeCluster) dump(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	nodes, err := kc.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing Node objects: %v", err)
		return
	}
	for _, n := range nodes.Items {
		var b strings.Builder
		for k, v := range n.Annotations {
			if strings.HasPrefix(k, kube.DefaultAnnotationPrefix+"/") {
				fmt.Fprintf(&b, "\n  %s=%s", k, v)
			}
		}
		for _, c := range n.Status.Conditions {
			fmt.Fprintf(&b, "\n  condition %s=%s (%s)", c.Type, c.Status, c.Reason)
		}
		t.Logf("Node %s: podCIDRs %v%s", n.Name, n.Spec.PodCIDRs, b.String())
	}
}

// TestKubeMode runs the cluster in Kubernetes mode (weftd --kube-subnet-mgr) against a real
// kube-apiserver, for each backend: three nodes take their podCIDRs as subnets and publish
// flannel's annotations and NetworkUnavailable=False; pods ping across nodes and a TCP
// stream passes; deleting a Node makes the others drop its subnet; a node joining late
// becomes reachable.
func TestKubeMode(t *testing.T) {
	bins := needBinaries(t)
	needKubeAPIServer(t)
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { testKubeMode(t, bins, b) })
	}
}

func testKubeMode(t *testing.T, bins binaries, b backend) {
	kc := newKubeCluster(t, bins, b, bins.weftd)
	nodes := kc.addNodes(t, 1, 2, 3)
	for i, n := range nodes {
		kc.checkNode(t, n, b, podCIDR(i+1))
	}
	pods := onePodEach(t, kc.Cluster, nodes)
	pingAll(t, pods)
	stream(t, pods[0], pods[2])

	// A Node deleted: the others forget its subnet. Its weftd is stopped first, as the
	// node would be gone, so that nothing of it answers.
	gone, sn := nodes[2], podCIDR(3)
	mac := ""
	if b.vxlan() {
		mac = kc.annotatedVtepMAC(t, gone.Name)
	}
	for _, n := range nodes[:2] {
		if d := peerState(t, n, sn, mac); d.route == "" || (b.vxlan() && (d.neigh == "" || d.fdb == "")) {
			t.Fatalf("node %s before Node %s is deleted: %v; want all present", n.Name, gone.Name, d)
		}
	}
	if _, err := gone.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	kc.deleteNode(t, gone.Name)
	start := time.Now()
	for _, n := range nodes[:2] {
		for {
			d := peerState(t, n, sn, mac)
			if d == (dataPlane{}) {
				break
			}
			if time.Since(start) > convergeTimeout {
				t.Fatalf("node %s still has, %v after Node %s was deleted: %v", n.Name, convergeTimeout, gone.Name, d)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("Node %s (%s) was forgotten by the other nodes within %v", gone.Name, sn, time.Since(start).Round(time.Millisecond))
	if sent, recv, err := cluster.Ping(pods[0], pods[2].IP, 2, 20*time.Millisecond); err != nil || recv != 0 {
		t.Errorf("ping to the pod of the deleted node: %d of %d answered (%v); want none", recv, sent, err)
	}
	waitReachable(t, pods[0], pods[1], convergeTimeout) // the others are untouched

	// A node joining late: its Node appears, its weftd starts, and its pod and the pods
	// already there reach each other.
	late := kc.addNodes(t, 4)[0]
	kc.checkNode(t, late, b, podCIDR(4))
	lp := addPod(t, kc.Cluster, late, "p4")
	for _, p := range pods[:2] {
		waitReachable(t, p, lp, convergeTimeout)
		waitReachable(t, lp, p, convergeTimeout)
	}
}
