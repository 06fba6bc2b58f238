package kubecluster

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftnet/weft/e2e/cluster"
)

// TestServiceByNameAcrossNodes deploys weft, then CoreDNS as kubeadm does, and checks what
// flannel's users check of the cluster DNS: from a node that runs no CoreDNS pod (so that
// each query crosses the overlay to one), a ClusterIP Service backed by agnhost's netexec
// on yet another node is resolved by name (its full name over UDP and TCP, its short one
// through the pod's search path), and the answer is used: an HTTP request through the name
// reaches the server. The clients are the e2e tests' images: agnhost's (dig, curl) and
// busybox's (wget, whose lookup is the C library's).
func TestServiceByNameAcrossNodes(t *testing.T) {
	needLong(t)
	c := newCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	nodes := deployWeft(ctx, t, c)
	importE2EImages(ctx, t, c)
	if err := c.DeployCoreDNS(ctx); err != nil {
		t.Fatal(err)
	}

	podCIDR := map[string]netip.Prefix{}
	for _, n := range nodes {
		podCIDR[n.Name] = netip.MustParsePrefix(n.Spec.PodCIDR)
	}
	dnsPods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		t.Fatal(err)
	}
	withDNS := map[string]bool{}
	for _, p := range dnsPods.Items {
		ip, err := netip.ParseAddr(p.Status.PodIP)
		switch {
		case err != nil:
			t.Fatalf("CoreDNS pod %s: IP %q: %v", p.Name, p.Status.PodIP, err)
		case p.Spec.HostNetwork || !podCIDR[p.Spec.NodeName].Contains(ip):
			t.Fatalf("CoreDNS pod %s on node %s has IP %s, not on the pod network (%s)", p.Name, p.Spec.NodeName, ip, podCIDR[p.Spec.NodeName])
		}
		withDNS[p.Spec.NodeName] = true
		t.Logf("CoreDNS pod %s on node %s, IP %s", p.Name, p.Spec.NodeName, ip)
	}
	var clientNode, serverNode string
	for _, n := range c.Nodes() {
		if clientNode == "" && !withDNS[n.Name] {
			clientNode = n.Name
		}
	}
	if clientNode == "" {
		t.Fatalf("every node runs a CoreDNS pod; the test wants a client node without one")
	}
	for _, n := range c.Nodes() {
		if serverNode == "" && n.Name != clientNode {
			serverNode = n.Name
		}
	}
	t.Logf("server on %s, clients on %s", serverNode, clientNode)

	const ns = "dns-check"
	manifest := filepath.Join(t.TempDir(), "dns-check.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(dnsCheckManifest, ns, serverNode, AgnhostImage,
		clientNode, BusyBoxImage)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "apply", "-f", manifest); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "wait", "-n", ns, "--for=condition=Ready", "pod", "--all", "--timeout=3m"); err != nil {
		if out, kerr := c.Kubectl(context.Background(), "describe", "pods", "-n", ns); kerr == nil {
			t.Logf("pods:\n%s", out)
		}
		t.Fatal(err)
	}
	svc, err := c.Client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fqdn := "web." + ns + ".svc." + ClusterDomain

	// Each check is retried for a while: kube-proxy programs the Services' rules on each
	// node in its own time after the pods turn Ready.
	for _, check := range []struct {
		pod  string
		argv []string
		want string
	}{
		{"client-agnhost", []string{"dig", "+short", fqdn}, svc.Spec.ClusterIP},
		{"client-agnhost", []string{"dig", "+short", "+tcp", fqdn}, svc.Spec.ClusterIP},
		{"client-agnhost", []string{"dig", "+short", "+search", "web"}, svc.Spec.ClusterIP},
		{"client-agnhost", []string{"curl", "-sS", "--max-time", "5", "http://" + fqdn + "/hostname"}, "server"},
		{"client-busybox", []string{"timeout", "5", "wget", "-q", "-O", "-", "http://web/hostname"}, "server"},
	} {
		start := time.Now()
		var out string
		for {
			out, err = c.Kubectl(ctx, append([]string{"exec", "-n", ns, check.pod, "--"}, check.argv...)...)
			if err == nil && strings.Contains(out, check.want) {
				break
			}
			if time.Since(start) > time.Minute || ctx.Err() != nil {
				t.Fatalf("%s on %s: %s: want %q in the output: %v\n%s", check.pod, clientNode, strings.Join(check.argv, " "), check.want, err, out)
			}
			time.Sleep(time.Second)
		}
		t.Logf("%s on %s: %s (%v): %s", check.pod, clientNode, strings.Join(check.argv, " "),
			time.Since(start).Round(time.Millisecond), strings.Join(strings.Fields(out), " "))
	}
}

// dnsCheckManifest is TestServiceByNameAcrossNodes's namespace, server pod and Service, and
// client pods; its verbs are, in order: the namespace, the server's node, agnhost's image,
// the clients' node, busybox's image.
const dnsCheckManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: Pod
metadata:
  name: server
  namespace: %[1]s
  labels: {app: web}
spec:
  nodeName: %[2]s
  containers:
  - name: netexec
    image: %[3]s
    args: [netexec, --http-port=8080]
    readinessProbe:
      httpGet: {path: /hostname, port: 8080}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: %[1]s
spec:
  selector: {app: web}
  ports:
  - {port: 80, targetPort: 8080, protocol: TCP}
---
apiVersion: v1
kind: Pod
metadata:
  name: client-agnhost
  namespace: %[1]s
spec:
  nodeName: %[4]s
  containers:
  - name: agnhost
    image: %[3]s
---
apiVersion: v1
kind: Pod
metadata:
  name: client-busybox
  namespace: %[1]s
spec:
  nodeName: %[4]s
  containers:
  - name: busybox
    image: %[5]s
    command: [sleep, "3600"]
`

// importE2EImages builds the e2e tests' images (E2EImages) and imports them into every node.
func importE2EImages(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	images, err := E2EImages(ctx, repo, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	built := time.Since(start)
	if err := c.ImportImages(ctx, images...); err != nil {
		t.Fatal(err)
	}
	t.Logf("e2e images built in %v, imported into %d nodes in %v", built.Round(time.Second), len(c.Nodes()),
		(time.Since(start) - built).Round(time.Second))
}
