package daemon

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/events"
	"github.com/weftnet/weft/internal/kubetest"
	"github.com/weftnet/weft/netif"
	"github.com/weftnet/weft/probe"
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
		KubeAnnotationPrefix: "example.com/weft", NetConfigPath: "/etc/weft/net-conf.json", SetNodeNetworkUnavailable: true}
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
	c := DefaultConfig()
	c.KubeSubnetMgr, c.KubeconfigFile, c.NetConfigPath, c.NodeName = true, kubeconfig, netConf, "n1"
	c.PublicIP = "192.0.2.1"
	log := slog.New(slog.DiscardHandler)
	m, err := newKubeManager(ctx, &c, log, newMetrics(), noEvents{})
	if err != nil {
		t.Fatal(err)
	}
	if c.PublicIP != "198.51.100.7" || c.PublicIPv6 != "" {
		t.Errorf("public IPs %q %q, want the annotation's 198.51.100.7 and none", c.PublicIP, c.PublicIPv6)
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
	// weftd is the identity weftd runs as; the administrator when nil.
	weftd *rest.Config
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

// weftIdentity applies dist's RBAC and returns the config of its service account, which
// weftd runs as in a cluster; a request the API server refuses it fails the test.
func (k kubeCluster) weftIdentity(t *testing.T) *rest.Config {
	kubetest.Apply(t, k.srv.Admin(), "../dist/kubernetes/rbac.yaml")
	return kubetest.FailDenied(t, k.srv.ServiceAccountConfig(t, "kube-flannel", "weft"))
}

// run runs weftd in Kubernetes mode as Node "self" under the network config conf, on deps'
// planes (and testIfaces unless deps has interfaces), until the test ends; it returns the
// daemon's config. The manager's hooks are Run's; an *events.Recorder in deps posts through
// it.
func (k kubeCluster) run(t *testing.T, conf string, deps Deps) Config {
	return k.runWith(t, conf, deps, nil)
}

// runWith is run with the daemon's config changed by tweak first, when not nil.
func (k kubeCluster) runWith(t *testing.T, conf string, deps Deps, tweak func(*Config)) Config {
	dir := t.TempDir()
	netConf := filepath.Join(dir, "net-conf.json")
	if err := os.WriteFile(netConf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	if deps.Events == nil {
		deps.Events = noEvents{}
	}
	deps.metrics = newMetrics()
	kc := kubeManagerConfig(KubeConfig{NetConfigPath: netConf, NodeName: "self"}, log, deps.metrics, deps.Events)
	if kc.REST = k.weftd; kc.REST == nil {
		kc.REST = k.srv.Admin()
	}
	km, err := kube.New(kc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.SubnetFile = filepath.Join(dir, "subnet.env")
	cfg.HealthzPort = 0
	cfg.ResyncInterval = time.Second
	cfg.Ifaces = []string{"eth0"}
	cfg.KubeSubnetMgr = true // as weftd's: the lease is the Node's, with no node identity
	if tweak != nil {
		tweak(&cfg)
	}
	deps.Manager = km
	if deps.Interfaces == nil {
		deps.Interfaces = func() ([]netif.Interface, error) { return testIfaces, nil }
	}
	deps.DefaultIf = func() (string, error) { return "eth0", nil }
	ctx, cancel := context.WithCancel(context.Background())
	var posting sync.WaitGroup
	if rec, ok := deps.Events.(*events.Recorder); ok {
		posting.Go(func() { rec.Run(ctx, eventSink(km)) })
	}
	done := make(chan error, 1)
	go func() { done <- RunWith(ctx, cfg, log, deps) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunWith: %v", err)
		}
		posting.Wait()
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

// TestDaemonKubeWritesBackOwnAnnotations: the node's annotations overwritten by another
// writer are written back, and so are they when overwritten again right after, within the
// least gap between two such renewals, with no other event to wake the daemon (the periodic
// resync is an hour here). Before, the second write stayed until the resync, 30 s by default
// (the Kubernetes-mode soak's tampering makes the case).
func TestDaemonKubeWritesBackOwnAnnotations(t *testing.T) {
	k := startKube(t)
	p := kube.DefaultAnnotationPrefix + "/"
	k.node(t, "self", []string{"10.244.1.0/24"}, nil)
	k.runWith(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`, Deps{Plane: &fakePlane{}},
		func(c *Config) { c.ResyncInterval = time.Hour })
	publicIP := func() string {
		n, err := k.admin.CoreV1().Nodes().Get(context.Background(), "self", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		return n.Annotations[p+"public-ip"]
	}
	eventually(t, "the own annotations", func() bool { return publicIP() == "192.0.2.10" })
	for i := range 2 {
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"192.0.2.99"}}}`, p+"public-ip")
		if _, err := k.admin.CoreV1().Nodes().Patch(context.Background(), "self", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, fmt.Sprintf("the own public-ip written back after overwrite %d", i+1), func() bool { return publicIP() == "192.0.2.10" })
	}
}

// TestDaemonKubeModeLeavesNetworkUnavailable: with --set-node-network-unavailable=false the
// Node's conditions are left as they are, through convergences, as flanneld leaves them.
func TestDaemonKubeModeLeavesNetworkUnavailable(t *testing.T) {
	k := startKube(t)
	p := kube.DefaultAnnotationPrefix + "/"
	k.node(t, "self", []string{"10.244.1.0/24"}, nil)
	k.node(t, "peer", []string{"10.244.2.0/24"}, map[string]string{p + "kube-subnet-manager": "true", p + "backend-type": "host-gw",
		p + "backend-data": "null", p + "public-ip": "192.0.2.20"})
	plane := &fakePlane{}
	k.runWith(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`, Deps{Plane: plane},
		func(c *Config) { c.SetNodeNetworkUnavailable = false })
	applies := func() int { plane.mu.Lock(); defer plane.mu.Unlock(); return len(plane.states) }
	eventually(t, "the route to the peer", func() bool { st, _ := plane.last(); return slices.Equal(routes(st), []string{"10.244.2.0/24"}) })
	// The resync (1s) converges again: past a convergence after the first, setReady would have run.
	first := applies()
	eventually(t, "a second convergence", func() bool { return applies() > first })
	n, err := k.admin.CoreV1().Nodes().Get(context.Background(), "self", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Status.Conditions) != 0 {
		t.Errorf("conditions %+v, want none: --set-node-network-unavailable=false", n.Status.Conditions)
	}
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

// lossyPinger answers the overlay probes of every address but those it is told to lose.
type lossyPinger struct {
	mu   sync.Mutex
	lose map[netip.Addr]bool
}

func (p *lossyPinger) Ping(ctx context.Context, dst netip.Addr, _ int) (time.Duration, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lose[dst] {
		return 0, probe.ErrLost
	}
	return time.Millisecond, nil
}

func (p *lossyPinger) set(dst netip.Addr, lose bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose[dst] = lose
}

// TestDaemonKubeEvents: weftd in Kubernetes mode, as dist's service account (a refused request
// fails the test), posts Events on its own Node where `kubectl describe node` finds them:
// LeaseAcquired at start; for a burst of 50 bad peer Nodes (40 whose annotations cannot be
// read, 10 of another backend) at most three PeerSkipped Events that count all 50, with
// examples; DataplaneError while the plane fails and DataplaneRecovered after;
// PeersUnreachable when the overlay probes of a peer are lost, PeersReachable when they are
// answered again.
func TestDaemonKubeEvents(t *testing.T) {
	k := startKube(t)
	k.weftd = k.weftIdentity(t)
	ctx := context.Background()
	p := kube.DefaultAnnotationPrefix + "/"
	k.node(t, "self", []string{"10.244.1.0/24"}, nil)
	k.node(t, "good", []string{"10.244.2.0/24"}, map[string]string{p + "kube-subnet-manager": "true", p + "backend-type": "host-gw",
		p + "backend-data": "null", p + "public-ip": "192.0.2.20"})
	self, err := k.admin.CoreV1().Nodes().Get(ctx, "self", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const interval = 2 * time.Second // a token per reason: the default minute, shortened
	rec := events.New(events.Options{Interval: interval})
	plane := &fakePlane{}
	pinger := &lossyPinger{lose: map[netip.Addr]bool{}}
	k.run(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`, Deps{Plane: plane, Pinger: pinger, Events: rec})

	// about lists the Events about the Node self with reason, as kubectl describe node asks
	// for them: by the Node's kind, name and UID, in every namespace.
	about := func(reason string) []corev1.Event {
		t.Helper()
		sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": "self", "involvedObject.uid": string(self.UID), "reason": reason}
		l, err := k.admin.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	// posted waits for an Event of reason whose message holds want.
	posted := func(reason, typ, want string) {
		t.Helper()
		eventually(t, reason+" saying "+want, func() bool {
			return slices.ContainsFunc(about(reason), func(e corev1.Event) bool {
				return e.Type == typ && strings.Contains(e.Message, want) && e.Namespace == metav1.NamespaceDefault &&
					e.Source.Component == kube.EventComponent
			})
		})
	}

	posted(events.ReasonLeaseAcquired, corev1.EventTypeNormal, "lease acquired: subnet 10.244.1.0/24, public IP 192.0.2.10, backend host-gw")
	eventually(t, "the first convergence", func() bool { _, n := plane.last(); return n > 0 })

	start := time.Now()
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Go(func() {
			for i := w * 5; i < w*5+5; i++ {
				ann := map[string]string{p + "kube-subnet-manager": "true", p + "backend-type": "host-gw", p + "backend-data": "null", p + "public-ip": "not-an-ip"}
				name := fmt.Sprintf("bad-%d", i)
				if i >= 40 {
					ann[p+"backend-type"], ann[p+"backend-data"], ann[p+"public-ip"] = "vxlan", fmt.Sprintf(`{"VNI":1,"VtepMAC":"0e:00:00:00:00:%02x"}`, i), fmt.Sprintf("192.0.2.%d", 100+i)
					name = fmt.Sprintf("vxlan-%d", i)
				}
				cidr := fmt.Sprintf("10.244.%d.0/24", 10+i)
				_, err := k.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
					Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}, metav1.CreateOptions{})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("50 bad Nodes created in %v", time.Since(start))
	var skipped []corev1.Event
	eventually(t, "PeerSkipped Events counting 50 skips", func() bool {
		skipped = about(events.ReasonPeerSkipped)
		n := 0
		for _, e := range skipped {
			n += int(e.Count)
		}
		return n == 50
	})
	var msgs []string
	for _, e := range skipped {
		msgs = append(msgs, fmt.Sprintf("%s x%d: %s", e.Type, e.Count, e.Message))
	}
	all := strings.Join(msgs, "\n")
	t.Logf("PeerSkipped Events:\n%s", all)
	if len(skipped) > 3 {
		t.Errorf("%d PeerSkipped Events for a burst of 50, want at most 3", len(skipped))
	}
	if !strings.Contains(all, "malformed (e.g. bad-") || !strings.Contains(all, "backend_type (e.g. 10.244.") {
		t.Errorf("PeerSkipped Events name no examples of both reasons")
	}

	plane.mu.Lock()
	plane.fail = errors.New("injected: no route to host")
	plane.mu.Unlock()
	posted(events.ReasonDataplaneError, corev1.EventTypeWarning, "programming the data plane failed, retrying: IPv4: injected: no route to host")
	plane.mu.Lock()
	plane.fail = nil
	plane.mu.Unlock()
	posted(events.ReasonDataplaneRecovered, corev1.EventTypeNormal, "the data plane is programmed again, after ")

	gateway := netip.MustParseAddr("10.244.2.1") // where a routed peer answers
	pinger.set(gateway, true)
	posted(events.ReasonPeersUnreachable, corev1.EventTypeWarning, "peers unreachable over the overlay: 1 (e.g. 10.244.2.0-24)")
	pinger.set(gateway, false)
	posted(events.ReasonPeersReachable, corev1.EventTypeNormal, "every peer is reachable over the overlay again")

	if n := len(about(events.ReasonLeaseAcquired)); n != 1 {
		t.Errorf("%d LeaseAcquired Events, want 1", n)
	}
}

// TestDaemonKubeReadyzFrozenAPIServer: the API server stops answering (frozen by SIGSTOP:
// its connections stay open, the node watch says nothing) under a daemon in Kubernetes
// mode: /readyz says the datastore is unreachable within the test's bound, as with a frozen
// etcd, and the node is ready again once the server answers.
func TestDaemonKubeReadyzFrozenAPIServer(t *testing.T) {
	k := startKube(t)
	k.node(t, "self", []string{"10.244.1.0/24"}, nil)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	k.runWith(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`, Deps{Plane: &fakePlane{}},
		func(c *Config) { c.HealthzPort = port })
	eventually(t, "ready", func() bool { code, _ := get(base + "/readyz"); return code == http.StatusOK })

	k.srv.Freeze(t)
	start := time.Now()
	eventually(t, "/readyz failing with the API server frozen", func() bool {
		code, body := get(base + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "datastore unreachable")
	})
	t.Logf("/readyz failed %v after the API server froze", time.Since(start))
	k.srv.Thaw(t)
	eventually(t, "ready once the API server answers", func() bool { code, _ := get(base + "/readyz"); return code == http.StatusOK })
}
