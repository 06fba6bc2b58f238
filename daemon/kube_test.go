package daemon

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"github.com/weftnet/weft/netif"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/internal/kubetest"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/kube"
)

func TestKubeConfigFlags(t *testing.T) {
	k := DefaultKubeConfig()
	fs := flag.NewFlagSet("weftd", flag.ContinueOnError)
	k.AddFlags(fs)
	if err := k.Validate(); err != nil {
		t.Errorf("etcd mode: %v", err)
	}
	err := fs.Parse([]string{"--kube-subnet-mgr", "--kubeconfig-file=/k", "--kube-api-url=https://api:6443",
		"--kube-annotation-prefix=example.com/weft", "--net-config-path=/etc/weft/net-conf.json"})
	if err != nil {
		t.Fatal(err)
	}
	want := KubeConfig{KubeSubnetMgr: true, KubeconfigFile: "/k", KubeAPIURL: "https://api:6443",
		KubeAnnotationPrefix: "example.com/weft", NetConfigPath: "/etc/weft/net-conf.json"}
	if k != want {
		t.Errorf("flags gave %+v, want %+v", k, want)
	}
	if err := k.Validate(); err == nil || !strings.Contains(err.Error(), "NODE_NAME") {
		t.Errorf("no node name: %v, want an error naming NODE_NAME", err)
	}
	k.NodeName = "n1"
	if err := k.Validate(); err != nil {
		t.Error(err)
	}
}

// TestKubeManager: the manager is built from the flags (a kubeconfig file here), takes the
// node-public-ip annotation over --public-ip, and setReady marks the node's network up.
func TestKubeManager(t *testing.T) {
	srv := kubetest.Start(t, kubetest.Options{})
	admin, err := kubernetes.NewForConfig(srv.Admin())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = admin.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{kube.DefaultAnnotationPrefix + "/node-public-ip": "198.51.100.7"}},
		Spec:       corev1.NodeSpec{PodCIDR: "10.42.1.0/24"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	rc := srv.Admin()
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, certificate-authority-data: %s}
users:
- name: test
  user: {token: %q}
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
`, rc.Host, base64.StdEncoding.EncodeToString(rc.CAData), rc.BearerToken)), 0o600); err != nil {
		t.Fatal(err)
	}
	netConf := filepath.Join(dir, "net-conf.json")
	if err := os.WriteFile(netConf, []byte(`{"Network":"10.42.0.0/16","Backend":{"Type":"host-gw"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	k := DefaultKubeConfig()
	k.KubeSubnetMgr, k.KubeconfigFile, k.NetConfigPath, k.NodeName = true, kubeconfig, netConf, "n1"
	log := slog.New(slog.DiscardHandler)
	publicIP := "192.0.2.1"
	m, err := newKubeManager(ctx, k, &publicIP, new(string), log, newMetrics())
	if err != nil {
		t.Fatal(err)
	}
	if publicIP != "198.51.100.7" {
		t.Errorf("public IP %s, want the annotation's 198.51.100.7", publicIP)
	}
	cfg, err := m.GetConfig(ctx)
	if err != nil || cfg.Backend.Type != subnet.BackendHostGW {
		t.Fatalf("GetConfig = %+v, %v", cfg, err)
	}
	if !setReady(ctx, m, log) {
		t.Fatal("setReady failed")
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Status.Conditions) != 1 || n.Status.Conditions[0].Type != corev1.NodeNetworkUnavailable || n.Status.Conditions[0].Status != corev1.ConditionFalse {
		t.Errorf("conditions %+v, want NetworkUnavailable=False", n.Status.Conditions)
	}
}

// TestDaemonKubeMode runs the daemon on the kube manager: the lease is the node's podCIDR,
// published in its annotations; an annotated peer node becomes a route, and its deletion
// removes the route.
// kubeCluster is a real kube-apiserver with an admin client, for the daemon in Kubernetes mode.
type kubeCluster struct {
	srv   *kubetest.Server
	admin *kubernetes.Clientset
}

func startKube(t *testing.T) kubeCluster {
	srv := kubetest.Start(t, kubetest.Options{})
	admin, err := kubernetes.NewForConfig(srv.Admin())
	if err != nil {
		t.Fatal(err)
	}
	return kubeCluster{srv: srv, admin: admin}
}

// node creates a Node with its podCIDRs (the first is also its podCIDR) and annotations.
func (k kubeCluster) node(t *testing.T, name string, cidrs []string, ann map[string]string) {
	t.Helper()
	_, err := k.admin.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Spec: corev1.NodeSpec{PodCIDR: cidrs[0], PodCIDRs: cidrs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// run runs weftd in Kubernetes mode as Node "self" under the network config conf, on deps'
// planes (and testIfaces unless deps has interfaces), until the test ends; it returns the
// daemon's config.
func (k kubeCluster) run(t *testing.T, conf string, deps Deps) Config {
	dir := t.TempDir()
	netConf := filepath.Join(dir, "net-conf.json")
	if err := os.WriteFile(netConf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	km, err := kube.New(kube.Config{REST: k.srv.Admin(), NetConfPath: netConf, NodeName: "self", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.SubnetFile = filepath.Join(dir, "subnet.env")
	cfg.HealthzPort = 0
	cfg.ResyncInterval = time.Second
	cfg.Ifaces = []string{"eth0"}
	deps.Manager = km
	if deps.Interfaces == nil {
		deps.Interfaces = func() ([]netif.Interface, error) { return testIfaces, nil }
	}
	deps.DefaultIf = func() (string, error) { return "eth0", nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunWith(ctx, cfg, log, deps) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunWith: %v", err)
		}
	})
	return cfg
}

func TestDaemonKubeMode(t *testing.T) {
	k := startKube(t)
	admin, ctx := k.admin, context.Background()
	p := kube.DefaultAnnotationPrefix + "/"
	k.node(t, "self", []string{"10.244.1.0/24"}, nil)
	k.node(t, "peer", []string{"10.244.2.0/24"}, map[string]string{p + "kube-subnet-manager": "true", p + "backend-type": "host-gw",
		p + "backend-data": "null", p + "public-ip": "192.0.2.20"})
	plane := &fakePlane{}
	cfg := k.run(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`, Deps{Plane: plane})

	hasRoutes := func(want ...string) func() bool {
		return func() bool { st, _ := plane.last(); return slices.Equal(routes(st), want) }
	}
	eventually(t, "the route to the peer", hasRoutes("10.244.2.0/24"))
	env, err := os.ReadFile(cfg.SubnetFile)
	if err != nil || !strings.Contains(string(env), "FLANNEL_SUBNET=10.244.1.1/24") {
		t.Errorf("subnet.env: %q, %v", env, err)
	}
	self, err := admin.CoreV1().Nodes().Get(ctx, "self", metav1.GetOptions{})
	if err != nil || self.Annotations[p+"public-ip"] != "192.0.2.10" || self.Annotations[p+"backend-type"] != "host-gw" ||
		self.Annotations[p+"backend-data"] != "null" || self.Annotations[p+"kube-subnet-manager"] != "true" {
		t.Errorf("own annotations %v, %v", self.Annotations, err)
	}
	eventually(t, "NetworkUnavailable=False", func() bool {
		n, err := admin.CoreV1().Nodes().Get(ctx, "self", metav1.GetOptions{})
		return err == nil && len(n.Status.Conditions) == 1 && n.Status.Conditions[0].Reason == kube.ReadyReason &&
			n.Status.Conditions[0].Status == corev1.ConditionFalse
	})
	if err := admin.CoreV1().Nodes().Delete(ctx, "peer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the route to the deleted peer gone", hasRoutes())
}

// TestDaemonKubeModeDualStack: on the real API server, a node with podCIDRs of both families:
// weftd takes both as its lease, publishes public-ip and public-ipv6, backend-data and
// backend-v6-data (each family's device MAC) as flanneld does, writes both subnets to
// subnet.env, and programs each family's half of a dual-stack peer node on its plane; a peer
// whose public-ipv6 annotation is no IPv6 address is programmed for IPv4 only.
func TestDaemonKubeModeDualStack(t *testing.T) {
	k := startKube(t)
	admin, ctx := k.admin, context.Background()
	p := kube.DefaultAnnotationPrefix + "/"
	peer := func(ip, ip6, mac, mac6 string) map[string]string {
		return map[string]string{p + "kube-subnet-manager": "true", p + "backend-type": "vxlan",
			p + "backend-data": `{"VNI":1,"VtepMAC":"` + mac + `"}`, p + "backend-v6-data": `{"VNI":1,"VtepMAC":"` + mac6 + `"}`,
			p + "public-ip": ip, p + "public-ipv6": ip6}
	}
	k.node(t, "self", []string{"10.244.1.0/24", "fd00:10:244:1::/64"}, nil)
	k.node(t, "peer", []string{"10.244.2.0/24", "fd00:10:244:2::/64"}, peer("192.0.2.20", "fd77:77::20", "0e:00:00:00:00:20", "0e:00:00:00:06:20"))
	k.node(t, "bad6", []string{"10.244.3.0/24", "fd00:10:244:3::/64"}, peer("192.0.2.30", "192.0.2.30", "0e:00:00:00:00:30", "0e:00:00:00:06:30"))

	plane4 := &fakePlane{mac: backend.MAC{0x0e, 4, 4, 4, 4, 4}}
	plane6 := &fakePlane{mac: backend.MAC{0x0e, 6, 6, 6, 6, 6}}
	cfg := k.run(t, `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}`,
		Deps{Plane: plane4, PlaneV6: plane6, Interfaces: func() ([]netif.Interface, error) { return dualIfaces, nil }})
	eventually(t, "both families' routes", func() bool {
		st4, _ := plane4.last()
		st6, _ := plane6.last()
		return slices.Equal(routes(st4), []string{"10.244.2.0/24", "10.244.3.0/24"}) && slices.Equal(routes(st6), []string{"fd00:10:244:2::/64"})
	})
	env, err := os.ReadFile(cfg.SubnetFile)
	if err != nil || !strings.Contains(string(env), "FLANNEL_SUBNET=10.244.1.1/24") || !strings.Contains(string(env), "FLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64") ||
		!strings.Contains(string(env), "FLANNEL_IPV6_NETWORK=fd00:10:244::/56") {
		t.Errorf("subnet.env: %q, %v", env, err)
	}
	self, err := admin.CoreV1().Nodes().Get(ctx, "self", metav1.GetOptions{})
	if err != nil || self.Annotations[p+"public-ip"] != "192.0.2.10" || self.Annotations[p+"public-ipv6"] != "fd77:77::10" ||
		self.Annotations[p+"backend-data"] != `{"VNI":1,"VtepMAC":"0e:04:04:04:04:04"}` ||
		self.Annotations[p+"backend-v6-data"] != `{"VNI":1,"VtepMAC":"0e:06:06:06:06:06"}` {
		t.Errorf("own annotations %v, %v", self.Annotations, err)
	}
}
