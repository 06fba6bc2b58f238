package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/subnet"
)

const (
	// readyTimeout bounds a weftd start: lease, subnet.env, first convergence.
	readyTimeout = 30 * time.Second
	// convergeTimeout bounds how long a ready node may take to program a peer that it
	// learns of through the etcd watch (a node that joined or left after it).
	convergeTimeout = 10 * time.Second
	// repairTimeout bounds how long weftd may take to put back a route, a neighbour or an
	// FDB entry deleted behind its back. DESIGN.md has it react to netlink notifications
	// of drift; the periodic resync alone (30 s by default) would be too slow for this.
	repairTimeout = 10 * time.Second

	vxlanDevice = "flannel.1" // VNI 1, the Linux default
	streamBytes = 8 << 20
)

// backend is a network config the tests run with.
type backend struct {
	name    string
	netConf string
}

func (b backend) vxlan() bool { return b.name == "vxlan" }

func backends() []backend {
	return []backend{
		{"vxlan", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`},
		{"host-gw", `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`},
	}
}

// binaries are what a cluster runs.
type binaries struct {
	weftd, cniBin string
	weftCNI       string // the weft CNI plugin; "" if the repository has none
}

// forEachBackend runs fn as one subtest per backend, or skips the whole test when this
// machine cannot run a cluster (not root, no weftd, no CNI plugins).
func forEachBackend(t *testing.T, fn func(t *testing.T, bins binaries, b backend)) {
	bins := needBinaries(t)
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { fn(t, bins, b) })
	}
}

func needBinaries(t *testing.T) binaries {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the cluster is made of network namespaces")
	}
	weftd := os.Getenv(envWeftd)
	if weftd == "" {
		t.Skip("weftd binary missing: the repository has no cmd/weftd and " + envWeftd + " is not set")
	}
	if _, err := os.Stat(weftd); err != nil {
		t.Skipf("weftd binary missing: %s=%s: %v", envWeftd, weftd, err)
	}
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cni, err := cluster.PrepareCNI(repo)
	if err != nil {
		t.Skipf("CNI plugins missing: %v", err)
	}
	return binaries{weftd: weftd, cniBin: cni, weftCNI: os.Getenv(envWeftCNI)}
}

// newCluster makes a cluster with the backend's config. If the test fails, the network
// state of every node and the end of its log are logged before the cluster goes.
func newCluster(t *testing.T, bins binaries, b backend) *cluster.Cluster {
	t.Helper()
	return newClusterWith(t, bins, b, cluster.Options{})
}

// newClusterWith is newCluster with more options; their network config and binaries are
// the backend's and bins'.
func newClusterWith(t *testing.T, bins binaries, b backend, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	opts.NetConf, opts.Weftd, opts.CNIBin, opts.WeftCNI = b.netConf, bins.weftd, bins.cniBin, bins.weftCNI
	c, err := cluster.New(t, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after New's own cleanup, so it runs first, while the nodes still exist.
	t.Cleanup(func() {
		if t.Failed() {
			dumpCluster(t, c)
		}
	})
	return c
}

// startNodes adds the nodes and waits until each weftd is ready.
func startNodes(t *testing.T, c *cluster.Cluster, names ...string) []*cluster.Node {
	t.Helper()
	nodes := make([]*cluster.Node, 0, len(names))
	for _, name := range names {
		n, err := c.AddNode(name)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	// They start together; waiting in turn costs no more than the slowest.
	for _, n := range nodes {
		if err := n.WaitReady(readyTimeout); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

// addPod adds a pod named after its node ("p" + the node's index, and a letter if more).
func addPod(t *testing.T, c *cluster.Cluster, n *cluster.Node, name string) *cluster.Pod {
	t.Helper()
	p, err := c.AddPod(n, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// onePodEach gives every node a pod, p<index>.
func onePodEach(t *testing.T, c *cluster.Cluster, nodes []*cluster.Node) []*cluster.Pod {
	t.Helper()
	pods := make([]*cluster.Pod, 0, len(nodes))
	for _, n := range nodes {
		pods = append(pods, addPod(t, c, n, fmt.Sprintf("p%d", n.Index)))
	}
	return pods
}

// waitReachable pings from one pod to another until a reply comes (a node learns of a peer
// through the etcd watch, a moment after the peer's lease appears), then requires 3 of 3.
func waitReachable(t *testing.T, from, to *cluster.Pod, timeout time.Duration) {
	t.Helper()
	waitReachableAt(t, from, to, to.IP, timeout)
}

// waitReachableAt is waitReachable to the pod's address addr (of either family).
func waitReachableAt(t *testing.T, from, to *cluster.Pod, addr netip.Addr, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		_, recv, err := cluster.Ping(from, addr, 1, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if recv == 1 {
			break
		}
		if time.Since(start) > timeout {
			t.Fatalf("pod %s (node %s) cannot reach pod %s %s (node %s) after %v",
				from.Name, from.Node.Name, to.Name, addr, to.Node.Name, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("pod %s -> pod %s: reachable after %v", from.Name, to.Name, waited.Round(time.Millisecond))
	}
	sent, recv, err := cluster.Ping(from, addr, 3, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if sent != 3 || recv != 3 {
		t.Fatalf("ping pod %s (node %s) -> pod %s %s (node %s): %d of %d answered",
			from.Name, from.Node.Name, to.Name, addr, to.Node.Name, recv, sent)
	}
}

// pingRun is how many requests each ping of watchPings sends, about 1.6 s of them. The runs
// follow each other until the watched window ends and each is left to finish, so that the
// window may take as long as it takes and no request in flight at its end counts as lost.
const pingRun = 100

// watchPings pings from one pod to another every 10 ms while fn runs, with a second of
// traffic before (the ping is known to work) and a settling second after, and requires that
// not one request was lost.
func watchPings(t *testing.T, what string, from, to *cluster.Pod, fn func()) {
	t.Helper()
	type total struct {
		sent, recv int
		err        error
	}
	stop, done := make(chan struct{}), make(chan total, 1)
	go func() {
		var tot total
		for {
			sent, recv, err := cluster.Ping(from, to.IP, pingRun, 10*time.Millisecond)
			tot.sent, tot.recv, tot.err = tot.sent+sent, tot.recv+recv, err
			select {
			case <-stop:
			default:
				if err == nil {
					continue
				}
			}
			done <- tot
			return
		}
	}()
	stopOnce := sync.OnceFunc(func() { close(stop) })
	defer stopOnce() // fn may end the test: the pings end with their run
	time.Sleep(time.Second)
	start := time.Now()
	fn()
	time.Sleep(time.Second)
	window := time.Since(start)
	stopOnce()
	tot := <-done
	if tot.err != nil {
		t.Fatalf("%s: %v", what, tot.err)
	}
	t.Logf("%s, watched for %v: ping %s (node %s) -> %s (node %s) every 10 ms: %d transmitted, %d received",
		what, window.Round(time.Millisecond), from.Name, from.Node.Name, to.Name, to.Node.Name, tot.sent, tot.recv)
	if tot.sent == 0 || tot.recv != tot.sent {
		t.Errorf("%s: %d of %d pings lost", what, tot.sent-tot.recv, tot.sent)
	}
}

// pingAll checks that every pod reaches every other pod (over IPv4).
func pingAll(t *testing.T, pods []*cluster.Pod) {
	t.Helper()
	pingAllAt(t, pods, func(p *cluster.Pod) netip.Addr { return p.IP }, convergeTimeout)
}

// pingAllAt checks that every pod reaches every other pod at the address addr picks (its
// family's), each within timeout.
func pingAllAt(t *testing.T, pods []*cluster.Pod, addr func(*cluster.Pod) netip.Addr, timeout time.Duration) {
	t.Helper()
	for _, from := range pods {
		for _, to := range pods {
			if from != to {
				waitReachableAt(t, from, to, addr(to), timeout)
			}
		}
	}
}

// stream runs an 8 MiB TCP stream between two pods and logs its speed.
func stream(t *testing.T, from, to *cluster.Pod) {
	t.Helper()
	res, err := cluster.Stream(from, to, streamBytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("TCP %s (node %s) -> %s (node %s): %d bytes in %v, %.0f Mbit/s",
		from.Name, from.Node.Name, to.Name, to.Node.Name, res.Bytes, res.Elapsed.Round(time.Microsecond), res.Mbps())
}

// mustSubnet is the node's pod subnet from its subnet.env.
func mustSubnet(t *testing.T, n *cluster.Node) netip.Prefix {
	t.Helper()
	sn, err := n.Subnet()
	if err != nil {
		t.Fatal(err)
	}
	return sn
}

// freeSubnets lists every /24 of 10.244.0.0/16 that none of the nodes holds, in order: the
// subnets a test may write leases of its own on without overwriting a live node's.
func freeSubnets(t *testing.T, nodes []*cluster.Node) []netip.Prefix {
	t.Helper()
	held := map[netip.Prefix]bool{}
	for _, n := range nodes {
		held[mustSubnet(t, n)] = true
	}
	var free []netip.Prefix
	for i := range 256 {
		sn := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24)
		if !held[sn] {
			free = append(free, sn)
		}
	}
	return free
}

// leaseOf finds the lease of a subnet (of either family) in etcd.
func leaseOf(t *testing.T, c *cluster.Cluster, sn netip.Prefix) subnet.Lease {
	t.Helper()
	leases, err := c.Leases()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if l.Subnet == sn || l.IPv6Subnet == sn {
			return l
		}
	}
	t.Fatalf("no lease of %s in etcd (leases: %v)", sn, leases)
	return subnet.Lease{}
}

// vtepMAC is the VtepMAC a vxlan lease publishes.
func vtepMAC(t *testing.T, l subnet.Lease) string {
	t.Helper()
	var data struct {
		VNI     int
		VtepMAC string
	}
	if err := json.Unmarshal(l.Attrs.BackendData, &data); err != nil || data.VtepMAC == "" {
		t.Fatalf("lease %s: BackendData %s: want {\"VNI\":..,\"VtepMAC\":..} (%v)", l.Key(), l.Attrs.BackendData, err)
	}
	return strings.ToLower(data.VtepMAC)
}

// nodeExec runs a command in a node and fails the test if it fails.
func nodeExec(t *testing.T, n *cluster.Node, args ...string) string {
	t.Helper()
	out, err := n.Exec(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// dataPlane is what a node has programmed for one peer subnet: the route, and with vxlan the
// neighbour of the peer's <subnet>.0 and the FDB entry of its VTEP MAC, each as `ip` and
// `bridge` print them ("" if absent).
type dataPlane struct {
	route, neigh, fdb string
}

func (d dataPlane) String() string {
	show := func(s string) string {
		if s == "" {
			return "(none)"
		}
		return s
	}
	return fmt.Sprintf("route %s; neighbour %s; fdb %s", show(d.route), show(d.neigh), show(d.fdb))
}

// peerState reads what node n has programmed for the peer subnet sn (whose VTEP MAC is mac,
// "" for host-gw).
func peerState(t *testing.T, n *cluster.Node, sn netip.Prefix, mac string) dataPlane {
	t.Helper()
	return peerStateOn(t, n, sn, mac, vxlanDevice)
}

// peerStateOn is peerState with the overlay device dev (flannel-v6.1 for IPv6 subnets).
func peerStateOn(t *testing.T, n *cluster.Node, sn netip.Prefix, mac, dev string) dataPlane {
	t.Helper()
	var d dataPlane
	var err error
	if d.route, err = n.RouteTo(sn); err != nil {
		t.Fatal(err)
	}
	if mac == "" {
		return d
	}
	d.neigh = strings.TrimSpace(nodeExec(t, n, "ip", "neigh", "show", sn.Addr().String(), "dev", dev))
	for line := range strings.Lines(nodeExec(t, n, "bridge", "fdb", "show", "dev", dev)) {
		if strings.HasPrefix(strings.ToLower(line), mac+" ") {
			d.fdb = strings.TrimSpace(line)
		}
	}
	return d
}

// dumpCluster logs each node's routes, neighbours, FDB and the end of its weftd log, for a
// failed test.
func dumpCluster(t *testing.T, c *cluster.Cluster) {
	leases, err := c.Leases()
	t.Logf("leases in etcd: %v (%v)", leases, err)
	for _, n := range c.Nodes() {
		var b strings.Builder
		for _, args := range [][]string{
			{"ip", "-br", "addr"},
			{"ip", "route"},
			{"ip", "neigh"},
			{"bridge", "fdb", "show", "dev", vxlanDevice},
		} {
			out, err := n.Exec(args...)
			if err != nil {
				out = "(" + err.Error() + ")"
			}
			fmt.Fprintf(&b, "$ %s\n%s\n", strings.Join(args, " "), strings.TrimRight(out, "\n"))
		}
		t.Logf("node %s (%s, weftd running: %v):\n%s--- end of %s:\n%s", n.Name, n.NS, n.Running(),
			b.String(), n.LogPath, n.LogTail(20))
	}
}

// waitRoutes waits until each node routes to every subnet of want but its own and to none
// of gone, and returns how long that took.
func waitRoutes(t *testing.T, nodes []*cluster.Node, want, gone []netip.Prefix, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		var wrong []string
		for _, n := range nodes {
			own := mustSubnet(t, n)
			for _, sn := range want {
				if r := peerState(t, n, sn, "").route; sn != own && r == "" {
					wrong = append(wrong, fmt.Sprintf("%s has no route to %s", n.Name, sn))
				}
			}
			for _, sn := range gone {
				if r := peerState(t, n, sn, "").route; r != "" {
					wrong = append(wrong, fmt.Sprintf("%s still routes %s: %s", n.Name, sn, r))
				}
			}
		}
		if len(wrong) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("not converged %v on: %s", timeout, strings.Join(wrong, "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
