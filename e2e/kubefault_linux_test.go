package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/weftnet/weft/e2e/cluster"
)

// pingChunk is how many requests one run of a pingLoop sends, every 10 ms: at about 62 a
// second here a run lasts 1.6 s, the longest a stop waits.
const pingChunk = 100

// pingLoop pings from one pod to another every 10 ms until stopped, in runs of pingChunk
// requests one after another, so that a fault of any length is watched without a count
// guessed to outlast it. Between two runs the next ping starts within a few milliseconds,
// less than the interval: no request goes unsent.
type pingLoop struct {
	from, to *cluster.Pod
	stop     chan struct{}
	once     sync.Once
	done     chan struct{}
	// Set before done is closed.
	sent, recv int
	err        error
}

func startPingLoop(from, to *cluster.Pod) *pingLoop {
	p := &pingLoop{from: from, to: to, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			sent, recv, err := cluster.Ping(from, to.IP, pingChunk, 10*time.Millisecond)
			p.sent, p.recv = p.sent+sent, p.recv+recv
			if err != nil {
				p.err = err
				return
			}
			select {
			case <-p.stop:
				return
			default:
			}
		}
	}()
	return p
}

// halt stops the loop after its current run and returns its totals.
func (p *pingLoop) halt() (sent, recv int, err error) {
	p.once.Do(func() { close(p.stop) })
	<-p.done
	return p.sent, p.recv, p.err
}

// traffic is pods pinging each other while a fault runs its course.
type traffic []*pingLoop

// startTraffic starts a pingLoop from the first pod of each pair to the second, stopped at
// the test's end if check has not stopped it.
func startTraffic(t *testing.T, pairs ...[2]*cluster.Pod) traffic {
	t.Helper()
	var tr traffic
	for _, p := range pairs {
		tr = append(tr, startPingLoop(p[0], p[1]))
	}
	t.Cleanup(func() {
		for _, p := range tr {
			_, _, _ = p.halt() // reported by check, if it ran
		}
	})
	time.Sleep(500 * time.Millisecond) // traffic before the fault
	return tr
}

// check stops the pings, logs what each sent and lost during what, and fails the test for
// every request lost.
func (tr traffic) check(t *testing.T, what string) {
	t.Helper()
	for _, p := range tr {
		sent, recv, err := p.halt()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("ping %s (node %s) -> %s (node %s) every 10 ms %s: %d sent, %d lost",
			p.from.Name, p.from.Node.Name, p.to.Name, p.to.Node.Name, what, sent, sent-recv)
		if recv != sent {
			t.Errorf("%d of %d pings %s -> %s lost %s", sent-recv, sent, p.from.Name, p.to.Name, what)
		}
	}
}

// counter reads a counter (or gauge) without labels from the node weftd's /metrics.
func counter(t *testing.T, n *cluster.Node, name string) float64 {
	t.Helper()
	for line := range strings.Lines(mustGet(t, n, "/metrics")) {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatalf("node %s: /metrics: %q: %v", n.Name, line, err)
			}
			return v
		}
	}
	t.Fatalf("node %s: /metrics has no %s", n.Name, name)
	return 0
}

// logWatchCounters logs each node's counts of node watch restarts and relists.
func logWatchCounters(t *testing.T, nodes []*cluster.Node) {
	t.Helper()
	for _, n := range nodes {
		t.Logf("node %s: weft_watch_restarts_total %v, weft_watch_relists_total %v", n.Name,
			counter(t, n, "weft_watch_restarts_total"), counter(t, n, "weft_watch_relists_total"))
	}
}

// listNodes lists the Node objects.
func (kc *kubeCluster) listNodes(t *testing.T) *corev1.NodeList {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	l, err := kc.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing Node objects: %v", err)
	}
	return l
}

// logLeases logs every Node's lease as weft publishes it, one line a Node: its podCIDRs,
// its public-ip and backend-data annotations.
func (kc *kubeCluster) logLeases(t *testing.T, when string) {
	t.Helper()
	var b strings.Builder
	for _, n := range kc.listNodes(t).Items {
		fmt.Fprintf(&b, "\n  %s: podCIDRs %v, public-ip %s, backend-data %s", n.Name, n.Spec.PodCIDRs,
			n.Annotations[annotation("public-ip")], n.Annotations[annotation("backend-data")])
	}
	t.Logf("leases %s:%s", when, b.String())
}

// removeNode takes a node out as it would leave a cluster: its weftd stops, then its Node
// object is deleted.
func (kc *kubeCluster) removeNode(t *testing.T, n *cluster.Node) {
	t.Helper()
	if _, err := n.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	kc.deleteNode(t, n.Name)
}

// TestKubeAPIServerRestart: the API server of a three-node vxlan cluster in Kubernetes mode
// is killed and started again while the pods ping each other every 10 ms: not one request
// is lost, the data plane being the kernel's. Readiness as weftd reports it: with
// --datastore-timeout=2s, each /readyz answers 503 "datastore unreachable ... kube:
// watching nodes: ... connection refused" while the API server is down (the node watch's
// calls fail), and 200 again once it is back, without a weftd restart. (With the default
// 30 s, a restart this short leaves every node ready: the data plane works meanwhile.) After
// the restart a node joins and one leaves, and every weftd follows.
func TestKubeAPIServerRestart(t *testing.T) {
	bins := needBinaries(t)
	needKubeAPIServer(t)
	kc := newKubeClusterWith(t, bins, backends()[0], bins.weftd,
		kubeClusterOptions{weftdArgs: []string{"--datastore-timeout=" + datastoreTimeout.String()}})
	nodes := kc.addNodes(t, 1, 2, 3)
	pods := onePodEach(t, kc.Cluster, nodes)
	pingAll(t, pods)
	kc.logLeases(t, "before the API server restart")

	tr := startTraffic(t, [2]*cluster.Pod{pods[0], pods[1]}, [2]*cluster.Pod{pods[1], pods[2]}, [2]*cluster.Pod{pods[2], pods[0]})
	kc.srv.Stop(t)
	stopped := time.Now()
	for _, n := range nodes {
		why := waitReadyz(t, n, http.StatusServiceUnavailable, 20*time.Second)
		t.Logf("node %s: /readyz 503 %v after the API server stopped: %s", n.Name, time.Since(stopped).Round(time.Millisecond), why)
		if !strings.Contains(why, "datastore unreachable") {
			t.Errorf("node %s: /readyz while the API server is down: %q; want it to say the datastore is unreachable", n.Name, why)
		}
	}
	kc.srv.Restart(t)
	up := time.Now()
	t.Logf("API server down for %v", up.Sub(stopped).Round(time.Millisecond))
	for _, n := range nodes {
		waitReadyz(t, n, http.StatusOK, 30*time.Second)
		t.Logf("node %s: /readyz 200 %v after the API server was back", n.Name, time.Since(up).Round(time.Millisecond))
	}
	tr.check(t, "across the API server restart")
	logWatchCounters(t, nodes)

	// The cluster moves on: n4 joins, n3 leaves.
	late := kc.addNodes(t, 4)[0]
	kc.removeNode(t, nodes[2])
	took := waitRoutes(t, []*cluster.Node{nodes[0], nodes[1], late}, []netip.Prefix{podCIDR(1), podCIDR(2), podCIDR(4)},
		[]netip.Prefix{podCIDR(3)}, convergeTimeout)
	t.Logf("every weftd routes the newcomer n4 and forgot n3 %v after", took.Round(time.Millisecond))
	pingAll(t, []*cluster.Pod{pods[0], pods[1], addPod(t, kc.Cluster, late, "p4")})
	kc.logLeases(t, "after n4 joined and n3 left")
}

// TestKubeWatchExpiredDuringPartition: node n1 is cut off from the API server (a blackhole
// route to its address in n1's namespace; etcd shares the address, but in Kubernetes mode
// weftd talks to the API server alone) while the cluster moves on: n4 leaves, n5 joins, n2's
// Node is written 50 times. The API server restarts as the cut begins, which ends n1's
// watch at once (the old server's FIN still reaches n1: the route drops only what n1
// sends), as keepalives would end it in a longer partition. The history n1 would resume
// from is then made to expire for sure: etcd is compacted to its current revision and the
// API server restarted again, so that neither its watch cache (which starts at the revision
// it lists) nor etcd holds it; a watch from the newest resourceVersion n1 could resume from
// is shown to get 410 Gone (too old resource version), and so would any older one. Pods of the other nodes ping each other and n1's pod throughout, every 10 ms,
// without a loss. When the path returns, n1 lists the nodes again (its
// weft_watch_relists_total rises) and, without a restart, routes to n5 and forgets n4.
//
// client-go's reflector relists after any failed connection that is not refused outright,
// as a blackholed one is (the local route fails the connect), so the relist here does not
// hinge on the 410; the test makes sure that resuming could not have served instead.
func TestKubeWatchExpiredDuringPartition(t *testing.T) {
	bins := needBinaries(t)
	needKubeAPIServer(t)
	kc := newKubeCluster(t, bins, backends()[0], bins.weftd)
	nodes := kc.addNodes(t, 1, 2, 3, 4)
	pods := onePodEach(t, kc.Cluster, nodes)
	pingAll(t, pods)
	kc.logLeases(t, "before the partition")
	n1, n2 := nodes[0], nodes[1]
	pid := n1.Pid()
	relists := counter(t, n1, "weft_watch_relists_total")

	tr := startTraffic(t, [2]*cluster.Pod{pods[1], pods[0]}, [2]*cluster.Pod{pods[2], pods[1]}, [2]*cluster.Pod{pods[0], pods[2]})
	nodeExec(t, n1, "ip", "route", "add", "blackhole", cluster.APIServerHost+"/32")
	cut := time.Now()
	kc.srv.Restart(t)
	// n1 has seen no change after this list's: it would resume from here at best, and a
	// watch from here sees every change after it.
	resumeFrom := kc.listNodes(t).ResourceVersion

	kc.removeNode(t, nodes[3])
	late := kc.addNodes(t, 5)[0]
	lp := addPod(t, kc.Cluster, late, "p5")
	for i := range 50 { // changes weftd's watch sees and skips
		kc.setAnnotation(t, n2.Name, "e2e.weft.test/touched", strconv.Itoa(i))
	}
	if r := peerState(t, n1, podCIDR(5), "").route; r != "" {
		t.Fatalf("n1 learnt of n5 while cut off from the API server: %s", r)
	}
	rev := kc.compactEtcd(t)
	kc.srv.Restart(t)
	err := kc.resumeNodeWatch(t, resumeFrom)
	t.Logf("etcd compacted at revision %d, API server restarted; a node watch from resourceVersion %s, the newest n1 could resume from: %v", rev, resumeFrom, err)
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("a node watch from resourceVersion %s after the compaction and restart: %v; want 410 Gone (too old resource version)", resumeFrom, err)
	}
	code, why, _ := n1.Get("/readyz")
	t.Logf("n1's /readyz after %v cut off: %d %s", time.Since(cut).Round(time.Millisecond), code, strings.TrimSpace(why))

	nodeExec(t, n1, "ip", "route", "del", "blackhole", cluster.APIServerHost+"/32")
	healed := time.Now()
	took := waitRoutes(t, []*cluster.Node{n1}, []netip.Prefix{podCIDR(5)}, []netip.Prefix{podCIDR(4)}, 45*time.Second)
	t.Logf("n1 routes n5 and forgot n4 %v after the path returned, cut off for %v",
		took.Round(time.Millisecond), healed.Sub(cut).Round(time.Millisecond))
	after := counter(t, n1, "weft_watch_relists_total")
	t.Logf("n1: weft_watch_relists_total %v before the partition, %v after", relists, after)
	if after <= relists {
		t.Errorf("n1's weft_watch_relists_total stayed %v: it did not list the nodes again", after)
	}
	if n1.Pid() != pid {
		t.Errorf("n1's weftd was restarted (pid %d, then %d); want it to catch up by itself", pid, n1.Pid())
	}
	tr.check(t, "across the partition")
	waitReachable(t, pods[0], lp, convergeTimeout)
	waitReachable(t, lp, pods[0], convergeTimeout)
	kc.logLeases(t, "after the partition")
}

// compactEtcd compacts the cluster's etcd to its current revision, as the API server's own
// compaction does every 5 minutes: no watch can start from an earlier revision. It returns
// the revision.
func (kc *kubeCluster) compactEtcd(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	resp, err := kc.Etcd().Get(ctx, kubeEtcdPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("reading etcd's revision: %v", err)
	}
	rev := resp.Header.Revision
	if _, err := kc.Etcd().Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compacting etcd at revision %d: %v", rev, err)
	}
	return rev
}

// resumeNodeWatch starts a node watch from resourceVersion rv, as an informer resuming from
// there would, and returns the error it ends with: the API server refuses a resourceVersion
// whose history it no longer holds with 410 Gone, at once or as the watch's first event.
// It is nil when the watch went on quietly; a watch that replays changes is an error too.
// A server still filling its watch cache answers 429 for a while, which is waited out.
func (kc *kubeCluster) resumeNodeWatch(t *testing.T, rv string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	var w watch.Interface
	var err error
	for {
		w, err = kc.admin.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		if !apierrors.IsTooManyRequests(err) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	defer w.Stop()
	select {
	case ev, ok := <-w.ResultChan():
		switch {
		case !ok:
			return errors.New("the watch ended without an event")
		case ev.Type == watch.Error:
			return apierrors.FromObject(ev.Object)
		}
		return fmt.Errorf("the watch resumed with a %s event: the history is still there", ev.Type)
	case <-time.After(2 * time.Second):
		return nil
	}
}

// TestKubeTokenRotation: each weftd's kubeconfig reads its token from a file (tokenFile:),
// as an in-cluster pod's projected service-account token is read; each token is bound to a
// Secret of its own, which revokes it when deleted. Under pods pinging each other every
// 10 ms, every node's token is rotated as the kubelet does it (the new token renamed into
// place) and the old one revoked at once; the API server restarts, which drops its cache of
// authentications and every watch, so that each weftd's next requests are made afresh. Each
// weftd keeps working: it is refused once or twice, reads the file again, and follows
// changes made after the rotation, reading (n3 joins) and writing (n1's own backend-data
// annotation edited, which n1 puts back), with no further refusals. (Checked by hand: with
// the token inline in the kubeconfig, the same sequence leaves weftd refused and blind to n3.)
func TestKubeTokenRotation(t *testing.T) {
	bins := needBinaries(t)
	needKubeAPIServer(t)
	// The Secret each node's current token is bound to, and the token, by node. AddNode
	// calls the kubeconfig function on the test's goroutine.
	type issued struct{ secret, token string }
	current := map[string]issued{}
	issue := func(kc *kubeCluster, n *cluster.Node, gen int) error {
		secret := fmt.Sprintf("weft-token-%s-%d", n.Name, gen)
		token := kc.srv.BoundToken(t, weftNamespace, weftServiceAccount, secret)
		current[n.Name] = issued{secret, token}
		return n.WriteToken(token)
	}
	kc := newKubeClusterWith(t, bins, backends()[0], bins.weftd, kubeClusterOptions{
		kubeconfig: func(kc *kubeCluster, n *cluster.Node) ([]byte, error) {
			if err := issue(kc, n, 1); err != nil {
				return nil, err
			}
			return cluster.KubeconfigTokenFile(kc.srv.URL(), kc.srv.Admin().CAData, n.TokenPath)
		},
	})
	nodes := kc.addNodes(t, 1, 2)
	pods := onePodEach(t, kc.Cluster, nodes)
	pingAll(t, pods)
	kc.logLeases(t, "before the rotation")
	n1 := nodes[0]
	ownData := kc.flannelAnnotations(t, n1.Name)["backend-data"]

	tr := startTraffic(t, [2]*cluster.Pod{pods[0], pods[1]}, [2]*cluster.Pod{pods[1], pods[0]})
	logFrom := map[string]int64{}
	var revoked []string
	for _, n := range nodes {
		logFrom[n.Name] = logSize(t, n)
		old := current[n.Name]
		if err := issue(kc, n, 2); err != nil {
			t.Fatal(err)
		}
		kc.srv.RevokeToken(t, weftNamespace, old.secret)
		revoked = append(revoked, old.token)
	}
	kc.srv.Restart(t)
	rotated := time.Now()
	for _, tok := range revoked {
		cs, err := kubernetes.NewForConfig(kc.srv.Config(tok))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Nodes().Get(context.Background(), n1.Name, metav1.GetOptions{}); !apierrors.IsUnauthorized(err) {
			t.Fatalf("a revoked token reading a Node: %v; want 401 Unauthorized", err)
		}
	}

	// Changes after the rotation: n3 joins (with a token of its own); n1's backend-data is
	// rewritten in a form weftd does not write (the MAC in upper case: the same lease to a
	// peer, so their data plane stays), which n1 must notice and write back.
	late := kc.addNodes(t, 3)[0]
	kc.setAnnotation(t, n1.Name, annotation("backend-data"), strings.ToUpper(ownData))
	took := waitRoutes(t, nodes, []netip.Prefix{podCIDR(3)}, nil, convergeTimeout)
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		data := kc.flannelAnnotations(t, n1.Name)["backend-data"]
		if data == ownData {
			break
		}
		if time.Since(start) > convergeTimeout {
			t.Fatalf("n1 has not written back its backend-data %s within %v: %s", ownData, convergeTimeout, data)
		}
	}
	t.Logf("n1 and n2 routed the newcomer n3 within %v of its start; n1 wrote back its backend-data %v after the API server restarted",
		took.Round(time.Millisecond), time.Since(rotated).Round(time.Millisecond))
	tr.check(t, "across the token rotation")

	// No loop of refusals: none after the daemons caught up.
	refused := map[string]int{}
	for _, n := range nodes {
		refused[n.Name] = unauthorized(t, n, logFrom[n.Name])
	}
	pingAll(t, []*cluster.Pod{pods[0], pods[1], addPod(t, kc.Cluster, late, "p3")})
	time.Sleep(2 * time.Second)
	for _, n := range nodes {
		now := unauthorized(t, n, logFrom[n.Name])
		t.Logf("node %s: refused as unauthorized %d time(s) after the rotation, %d of them after it caught up", n.Name, now, now-refused[n.Name])
		if now != refused[n.Name] {
			t.Errorf("node %s is still refused after it caught up: %d refusals, then %d\n%s", n.Name, refused[n.Name], now, n.LogTail(10))
		}
	}
	kc.logLeases(t, "after the rotation")
}

// setAnnotation sets an annotation of a Node, as an operator editing it would.
func (kc *kubeCluster) setAnnotation(t *testing.T, node, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeOpTimeout)
	defer cancel()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, key, value)
	if _, err := kc.admin.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("setting annotation %s of Node %s: %v", key, node, err)
	}
}

// logSize is the size of the node's weftd log now: where what weftd logs next starts.
func logSize(t *testing.T, n *cluster.Node) int64 {
	t.Helper()
	fi, err := os.Stat(n.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// unauthorized counts the lines of the node's weftd log from offset from on that report a
// request the API server refused as unauthorized (401).
func unauthorized(t *testing.T, n *cluster.Node, from int64) int {
	t.Helper()
	data, err := os.ReadFile(n.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for line := range strings.Lines(string(data[from:])) {
		if strings.Contains(line, "Unauthorized") {
			count++
		}
	}
	return count
}
