package kubecluster

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/internal/promtest"
)

// testNamespace holds the pods and Services the network tests make.
const testNamespace = "weft-e2e"

// bigFileBytes is the size of the file each test pod serves, which a TCP stream fetches.
const bigFileBytes = 16 << 20

// netPod is a busybox pod on node that serves, with busybox's httpd on port 8080, its own name
// at / and bigFileBytes of zeros at /big. Its readiness probe is an HTTP GET from the kubelet,
// which is a connection from the node to the pod.
func netPod(name, node string, labels map[string]string) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, Labels: labels},
		Spec: corev1.PodSpec{
			// The scheduler places it: a nodeSelector, not nodeName, so that it waits for
			// the node's network like any pod.
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:  "net",
				Image: BusyBoxImage,
				Command: []string{"sh", "-c", fmt.Sprintf("mkdir -p /www && printf %%s \"$POD_NAME\" >/www/index.html && "+
					"head -c %d /dev/zero >/www/big && exec httpd -f -p 8080 -h /www", bigFileBytes)},
				Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

// podsUp creates one netPod per node, named after it ("net-node1"), and waits until each is
// Ready; it returns them by node name with their IPs filled in.
func podsUp(ctx context.Context, t *testing.T, c *Cluster, labels func(node string) map[string]string) map[string]*corev1.Pod {
	t.Helper()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", testNamespace, err)
	}
	for _, n := range c.Nodes() {
		if _, err := c.Client.CoreV1().Pods(testNamespace).Create(ctx, netPod("net-"+n.Name, n.Name, labels(n.Name)),
			metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating the pod of node %s: %v", n.Name, err)
		}
	}
	pods := map[string]*corev1.Pod{}
	for {
		list, err := c.Client.CoreV1().Pods(testNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var waiting []string
		for i := range list.Items {
			p := &list.Items[i]
			if !podReady(p) || p.Status.PodIP == "" {
				waiting = append(waiting, fmt.Sprintf("%s (%s)", p.Name, p.Status.Phase))
				continue
			}
			pods[p.Spec.NodeName] = p
		}
		if len(waiting) == 0 && len(pods) == len(c.Nodes()) {
			return pods
		}
		select {
		case <-ctx.Done():
			out, _ := c.Kubectl(context.Background(), "describe", "pods", "-n", testNamespace)
			t.Fatalf("pods not ready: %v\n%s", waiting, out)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// exec runs a command in the pod's container with kubectl exec, as a user would, and returns
// its output.
func (c *Cluster) exec(ctx context.Context, pod string, argv ...string) (string, error) {
	return c.Kubectl(ctx, append([]string{"exec", "-n", testNamespace, pod, "--"}, argv...)...)
}

// TestPodNetwork deploys weft on three nodes and checks what flannel's users check on a
// cluster (issue 19, item 4): pods on different nodes ping and stream TCP to each other, a
// ClusterIP Service and a NodePort reach a pod on another node through kube-proxy, weft's
// Events are on the Node, `kubectl exec` runs weftctl status and doctor in a weft pod (the
// doctor finds no problem), a real Prometheus scrapes every node as the README says, and a
// rolling restart of the DaemonSet loses no packet of two pods pinging each other every 10 ms
// and keeps each node's podCIDR and VTEP MAC. Then NetworkPolicy is turned on as README.md
// says (a rolling update, which loses no packet either), and Kubernetes' own e2e suite judges
// the cluster: SIG Network's conformance specs and a core of the Netpol specs (coreFocus),
// failing on any spec that fails, is skipped or is not reached.
func TestPodNetwork(t *testing.T) {
	c := newCluster(t, 3)
	// The cluster's own checks take a few minutes; the e2e suite's build (the first time) and
	// its specs most of the rest.
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	nodes := deployWeft(ctx, t, c)
	needTestImages(ctx, t, c)
	before := nodeNetworks(t, nodes)
	pods := podsUp(ctx, t, c, func(node string) map[string]string {
		l := map[string]string{"app": "net"}
		if node == "node3" {
			l["web"] = "yes"
		}
		return l
	})
	names := []string{"node1", "node2", "node3"}

	t.Run("Ping", func(t *testing.T) {
		for _, from := range names {
			for _, to := range names {
				if from == to {
					continue
				}
				ip := pods[to].Status.PodIP
				out, err := c.exec(ctx, pods[from].Name, "ping", "-c", "3", "-i", "0.2", "-W", "2", ip)
				if err != nil {
					t.Errorf("%s → %s (%s): %v", pods[from].Name, pods[to].Name, ip, err)
					continue
				}
				if !strings.Contains(out, "3 packets received") {
					t.Errorf("%s → %s (%s):\n%s", pods[from].Name, pods[to].Name, ip, out)
				}
			}
		}
	})

	t.Run("TCPStream", func(t *testing.T) {
		for _, from := range names {
			for _, to := range names {
				if from == to {
					continue
				}
				url := fmt.Sprintf("http://%s/big", netip.AddrPortFrom(netip.MustParseAddr(pods[to].Status.PodIP), 8080))
				start := time.Now()
				out, err := c.exec(ctx, pods[from].Name, "sh", "-c", "wget -q -O - "+url+" | wc -c")
				if err != nil {
					t.Errorf("%s → %s: %v", pods[from].Name, url, err)
					continue
				}
				if got := strings.TrimSpace(out); got != strconv.Itoa(bigFileBytes) {
					t.Errorf("%s → %s: %s bytes, want %d", pods[from].Name, url, got, bigFileBytes)
					continue
				}
				t.Logf("%s → %s: %d MiB in %v", pods[from].Name, pods[to].Name, bigFileBytes>>20, time.Since(start).Round(time.Millisecond))
			}
		}
	})

	t.Run("Services", func(t *testing.T) {
		// A Service of node3's pod alone, asked from node1's pod: the ClusterIP through
		// node1's kube-proxy, the NodePort through node2's (which sends it on to node3).
		svc, err := c.Client.CoreV1().Services(testNamespace).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: corev1.ServiceSpec{
				Type:     corev1.ServiceTypeNodePort,
				Selector: map[string]string{"web": "yes"},
				Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node2 := c.Nodes()[1]
		for _, target := range []struct{ what, url string }{
			{"ClusterIP", fmt.Sprintf("http://%s/", netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80))},
			{"NodePort of node2", fmt.Sprintf("http://%s/", netip.AddrPortFrom(node2.IP, uint16(svc.Spec.Ports[0].NodePort)))},
		} {
			// kube-proxy programs a Service once it sees its endpoints: retried until then.
			var out string
			var err error
			wait, cancel := context.WithTimeout(ctx, time.Minute)
			for wait.Err() == nil {
				// busybox's own timeout: its wget -T (1.35, Debian's) crashes.
				out, err = c.exec(wait, pods["node1"].Name, "timeout", "3", "wget", "-q", "-O", "-", target.url)
				if err == nil {
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
			cancel()
			if err != nil {
				t.Errorf("%s %s from %s: %v", target.what, target.url, pods["node1"].Name, err)
				continue
			}
			if out != pods["node3"].Name {
				t.Errorf("%s %s from %s answered %q, want %q", target.what, target.url, pods["node1"].Name, out, pods["node3"].Name)
				continue
			}
			t.Logf("%s %s from %s: answered by %s", target.what, target.url, pods["node1"].Name, out)
		}
	})

	t.Run("Events", func(t *testing.T) {
		for _, n := range names {
			out, err := c.Kubectl(ctx, "describe", "node", n)
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(`(?m)^\s+Normal\s+LeaseAcquired\s+.*weft`).MatchString(out) {
				t.Errorf("kubectl describe node %s shows no LeaseAcquired Event from weft:\n%s", n, out)
			}
		}
	})

	t.Run("WeftctlStatus", func(t *testing.T) {
		out, err := c.Kubectl(ctx, "get", "pods", "-n", "kube-flannel", "-l", "app.kubernetes.io/name=weft",
			"--field-selector=spec.nodeName=node2", "-o", "jsonpath={.items[0].metadata.name}")
		if err != nil || out == "" {
			t.Fatalf("the weft pod of node2: %q, %v", out, err)
		}
		status, err := c.Kubectl(ctx, "exec", "-n", "kube-flannel", out, "--", "weftctl", "status")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{nodes[1].Spec.PodCIDR, pods["node1"].Status.HostIP} {
			if !strings.Contains(status, want) {
				t.Errorf("weftctl status in %s does not show %s:\n%s", out, want, status)
			}
		}
	})

	// weftctl doctor in a weft pod, given weftd's arguments of the DaemonSet as the README
	// says: its service account, NODE_NAME and WEFTD_HEALTHZ_IP are the pod's.
	t.Run("WeftctlDoctor", func(t *testing.T) {
		pod, err := c.Kubectl(ctx, "get", "pods", "-n", "kube-flannel", "-l", "app.kubernetes.io/name=weft",
			"--field-selector=spec.nodeName=node3", "-o", "jsonpath={.items[0].metadata.name}")
		if err != nil || pod == "" {
			t.Fatalf("the weft pod of node3: %q, %v", pod, err)
		}
		out, err := c.Kubectl(ctx, "exec", "-n", "kube-flannel", pod, "-c", "weftd", "--",
			"weftctl", "doctor", "--kube-subnet-mgr", "--net-config-path=/etc/kube-flannel/net-conf.json", "--ip-masq")
		if err != nil || !strings.Contains(out, "no problems found") || !strings.Contains(out, ", Node node3") {
			t.Errorf("weftctl doctor in %s: %v\n%s", pod, err, out)
		} else {
			t.Logf("weftctl doctor in %s:\n%s", pod, out)
		}
	})

	t.Run("Prometheus", func(t *testing.T) {
		scrapeNodes(ctx, t, c, names)
	})

	// Two pods of their own, on node1 and node2, ping each other every 10 ms through the
	// DaemonSet's rolling updates.
	states, err := c.RunPods(ctx, PingPod("ping-node1", "node1", BusyBoxImage), PingPod("ping-node2", "node2", BusyBoxImage))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("RollingRestart", func(t *testing.T) {
		noLossDuring(ctx, t, c, states, "rollout restart of ds/weft", func() error {
			if _, err := c.Kubectl(ctx, "rollout", "restart", "-n", "kube-flannel", "ds/weft"); err != nil {
				return err
			}
			if out, err := c.Kubectl(ctx, "rollout", "status", "-n", "kube-flannel", "ds/weft", "--timeout=4m"); err != nil {
				return fmt.Errorf("%w\n%s", err, out)
			}
			return nil
		})
		after, err := c.WaitNodes(ctx, NetworkReady)
		if err != nil {
			t.Fatal(err)
		}
		got := nodeNetworks(t, after)
		for name, b := range before {
			if got[name] != b {
				t.Errorf("node %s: before the restart %+v, after %+v", name, b, got[name])
			}
		}
	})

	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("NetworkPolicyOn", func(t *testing.T) {
		noLossDuring(ctx, t, c, states, "turning NetworkPolicy on", func() error {
			return c.EnableNetworkPolicy(ctx, repo, t.TempDir())
		})
	})

	t.Run("Conformance", func(t *testing.T) {
		start := time.Now()
		needE2E(t, c.opts.KubeBin)
		prepareSuite(ctx, t, c, repo, start)
		skipped := maps.Clone(e2eSkipped)
		maps.Copy(skipped, netpolSkipped)
		runSuite(ctx, t, c, filepath.Join(repo, ".cache", "conformance-core"), c.opts.KubeBin, suiteFocus(coreFocus()), skipped, 0)
	})
}

// noLossDuring runs do while the pods of states ping each other, and fails the test unless
// every ping sent came back, and the pods are as they were (not restarted, not moved). The
// network's losses are counted in the pods' namespaces (StartPings says why ping's own count
// is not enough).
func noLossDuring(ctx context.Context, t *testing.T, c *Cluster, states []PodState, what string, do func() error) {
	t.Helper()
	pings, err := c.StartPings(ctx, states)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := do(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Logf("%s done in %v", what, time.Since(start).Round(time.Millisecond))
	// A second of pings after the last node's new weftd, then stop them.
	time.Sleep(time.Second)
	results, err := pings.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		t.Logf("during %s: %s", what, r.Describe(pings.Start()))
		if r.NetSent < 100 || r.NetSent != r.NetReceived {
			t.Errorf("%s: ping %s -> %s: %d requests left, %d replies came back; want no loss", what, r.From, r.To, r.NetSent, r.NetReceived)
		}
	}
	for _, s := range states {
		now, err := c.PodState(ctx, "default", s.Name)
		if err != nil {
			t.Fatal(err)
		}
		if now != s {
			t.Errorf("pod %s changed during %s: %+v, now %+v", s.Name, what, s, now)
		}
	}
}

// nodeNetwork is what a node's network is known by to its peers.
type nodeNetwork struct {
	PodCIDR string
	VtepMAC string
}

// nodeNetworks reads each node's podCIDR and its VTEP MAC from the backend-data annotation
// (flannel's, which weft writes).
func nodeNetworks(t *testing.T, nodes []corev1.Node) map[string]nodeNetwork {
	t.Helper()
	out := map[string]nodeNetwork{}
	for _, n := range nodes {
		var data struct{ VtepMAC string }
		raw := n.Annotations["flannel.alpha.coreos.com/backend-data"]
		if err := json.Unmarshal([]byte(raw), &data); err != nil || data.VtepMAC == "" {
			t.Fatalf("node %s: backend-data annotation %q: %v", n.Name, raw, err)
		}
		out[n.Name] = nodeNetwork{PodCIDR: n.Spec.PodCIDR, VtepMAC: data.VtepMAC}
	}
	return out
}

// scrapeNodes runs a real Prometheus in the underlay that scrapes the weft DaemonSet's
// metrics port on every node, and waits until it has scraped weft on every node, with its
// peers programmed.
func scrapeNodes(ctx context.Context, t *testing.T, c *Cluster, names []string) {
	t.Helper()
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	promtest.Need(t, repo)
	prom, err := c.StartPrometheus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := len(names) - 1
	var last string
	for ctx.Err() == nil {
		res, err := prom.Query(ctx, `weft_peers{job="weft",state="programmed"}`)
		last = fmt.Sprintf("%v %v", res, err)
		if err == nil && len(res) == len(names) {
			ok := true
			for _, s := range res {
				if s.Value != strconv.Itoa(want) {
					ok = false
				}
			}
			if ok {
				t.Logf("prometheus scraped weft on every node: %v", res)
				return
			}
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("prometheus did not scrape weft on every node with %d peers programmed: %s", want, last)
}

// needTestImages imports the images the network tests run into every node: busybox
// (BusyBoxArchive), the one that needs no build.
func needTestImages(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	out, err := BusyBoxArchive(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImages(ctx, out); err != nil {
		t.Fatal(err)
	}
}
