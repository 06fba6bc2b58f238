package kube_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/weftnet/weft/internal/atomicfile"
	"github.com/weftnet/weft/internal/kubetest"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/kube"
	"github.com/weftnet/weft/subnet/subnettest"
)

// TestConformance runs the datastore suite against a real kube-apiserver, the managers
// authenticated as dist's service account: any permission missing from its role fails.
func TestConformance(t *testing.T) {
	c := newCluster(t)
	subnettest.Run(t, &harness{c: c})
}

const netConf = `{"Network":"10.42.0.0/16","SubnetLen":24,"Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}`

// newManager is a manager for node under the weft service account, annotations under prefix.
func (c *cluster) newManager(t *testing.T, node, prefix, conf string) (*kube.Manager, *logBuffer) {
	t.Helper()
	log, lb := testLogger(t)
	m, err := kube.New(kube.Config{REST: c.weft, AnnotationPrefix: prefix, NetConfPath: writeNetConf(t, conf), NodeName: node, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return m, lb
}

// skipCounting is a manager for node under the weft service account, annotations under
// prefix, and how many times it has reported each node skipped (Config.OnSkip).
func (c *cluster) skipCounting(t *testing.T, node, prefix string) (*kube.Manager, func(node string) int) {
	t.Helper()
	var mu sync.Mutex
	skips := map[string]int{}
	log, _ := testLogger(t)
	m, err := kube.New(kube.Config{REST: c.weft, AnnotationPrefix: prefix, NetConfPath: writeNetConf(t, netConf), NodeName: node, Logger: log,
		OnSkip: func(node string, err error) {
			mu.Lock()
			defer mu.Unlock()
			skips[node]++
		}})
	if err != nil {
		t.Fatal(err)
	}
	return m, func(node string) int {
		mu.Lock()
		defer mu.Unlock()
		return skips[node]
	}
}

// TestKube covers Kubernetes mode beyond the suite, on one API server; each subtest has
// its own nodes and annotation prefix.
func TestKube(t *testing.T) {
	c := newCluster(t)
	t.Run("PodCIDRMustFitTheConfig", func(t *testing.T) { testPodCIDRMismatch(t, c) })
	t.Run("WaitsForNodeAndPodCIDR", func(t *testing.T) { testWaitForPodCIDR(t, c) })
	t.Run("PublicIPAnnotations", func(t *testing.T) { testPublicIPAnnotations(t, c) })
	t.Run("SetReady", func(t *testing.T) { testSetReady(t, c) })
	t.Run("PostEvent", func(t *testing.T) { testPostEvent(t, c) })
	t.Run("BurstIsCoalesced", func(t *testing.T) { testBurst(t, c) })
	t.Run("CacheIsTrimmed", func(t *testing.T) { testCacheTrimmed(t, c) })
	t.Run("Protobuf", func(t *testing.T) { testProtobuf(t, c) })
	t.Run("MalformedPeersSkipped", func(t *testing.T) { testMalformed(t, c) })
	t.Run("DuplicatePodCIDRs", func(t *testing.T) { testDuplicatePodCIDRs(t, c) })
	t.Run("OwnMalformed", func(t *testing.T) { testOwnMalformed(t, c) })
	t.Run("RBACEnforced", func(t *testing.T) { testRBACEnforced(t, c) })
	t.Run("List", func(t *testing.T) { testList(t, c) })
	t.Run("FirstListStreamed", func(t *testing.T) { testFirstListStreamed(t, c) })
}

func vxlanAttrs(ip string) subnet.LeaseAttrs {
	a := netip.MustParseAddr(ip)
	return subnet.LeaseAttrs{PublicIP: a, BackendType: subnet.BackendVXLAN,
		BackendData: []byte(fmt.Sprintf(`{"VNI":4096,"VtepMAC":"0e:2a:00:00:00:%02x"}`, a.As4()[3]))}
}

func testPodCIDRMismatch(t *testing.T, c *cluster) {
	for _, tc := range []struct {
		name, cidr, key string
		want            []string
	}{
		{"outside", "10.99.1.0/24", "Network", []string{"10.42.0.0/16", "10.99.1.0/24", "--cluster-cidr"}},
		{"too-short", "10.42.0.0/23", "SubnetLen", []string{"10.42.0.0/23", "/23", "--node-cidr-mask-size"}},
		{"too-long", "10.42.7.128/25", "SubnetLen", []string{"10.42.7.128/25", "/25"}},
		{"no-ipv4", "fd00:42::/64", "EnableIPv4", []string{"no IPv4 podCIDR"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := "mismatch-" + tc.name
			createNode(t, c.admin, node, nil, tc.cidr)
			m, _ := c.newManager(t, node, "mismatch.weft.test", netConf)
			_, err := m.Acquire(ctxFor(t), subnet.AcquireRequest{Attrs: vxlanAttrs("192.0.2.10")})
			var ce *subnet.ConfigError
			if !errors.As(err, &ce) || ce.Key != tc.key {
				t.Fatalf("Acquire with podCIDR %s: %v, want a config error on %s", tc.cidr, err, tc.key)
			}
			for _, w := range append(tc.want, node) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func testWaitForPodCIDR(t *testing.T, c *cluster) {
	const node = "late"
	m, lb := c.newManager(t, node, "late.weft.test", netConf)
	type result struct {
		l   subnet.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := m.Acquire(ctxFor(t), subnet.AcquireRequest{Attrs: vxlanAttrs("192.0.2.11")})
		done <- result{l, err}
	}()
	step := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			select {
			case r := <-done:
				t.Fatalf("Acquire returned %s, %v while waiting for %s", r.l, r.err, what)
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no log line about waiting for %s", what)
			}
		}
	}
	step("the Node object", func() bool { return lb.contains("waiting for the Node object") })
	createNode(t, c.admin, node, nil) // registered, no podCIDR yet
	step("the podCIDR", func() bool { return lb.contains("waiting for a podCIDR") })
	patchNode(t, c.admin, node, map[string]any{"spec": map[string]any{"podCIDR": "10.42.77.0/24", "podCIDRs": []string{"10.42.77.0/24"}}})
	select {
	case r := <-done:
		if r.err != nil || r.l.Subnet != netip.MustParsePrefix("10.42.77.0/24") {
			t.Fatalf("Acquire = %s, %v; want 10.42.77.0/24", r.l, r.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Acquire still waiting after the podCIDR was assigned")
	}
}

func testPublicIPAnnotations(t *testing.T, c *cluster) {
	const node, prefix = "overwritten", "overwrite.weft.test"
	createNode(t, c.admin, node, map[string]string{
		prefix + "/public-ip-overwrite": "203.0.113.9",
		prefix + "/node-public-ip":      "198.51.100.4",
	}, "10.42.60.0/24")
	m, _ := c.newManager(t, node, prefix, netConf)

	v4, v6, err := m.NodePublicIPs(ctxFor(t))
	if err != nil || v4 != netip.MustParseAddr("198.51.100.4") || v6.IsValid() {
		t.Errorf("NodePublicIPs = %v, %v, %v; want 198.51.100.4 and none", v4, v6, err)
	}

	attrs := vxlanAttrs("192.0.2.12")
	l, err := m.Acquire(ctxFor(t), subnet.AcquireRequest{Attrs: attrs})
	if err != nil {
		t.Fatal(err)
	}
	if l.Attrs.PublicIP != netip.MustParseAddr("203.0.113.9") {
		t.Errorf("lease public IP %s, want the overwrite 203.0.113.9", l.Attrs.PublicIP)
	}
	n, err := c.admin.CoreV1().Nodes().Get(ctxFor(t), node, metav1.GetOptions{})
	if err != nil || n.Annotations[prefix+"/public-ip"] != "203.0.113.9" {
		t.Errorf("published public-ip %q (%v), want 203.0.113.9", n.Annotations[prefix+"/public-ip"], err)
	}

	// Without the overwrite, renewal publishes the node's own address again.
	setAnnotations(t, c.admin, node, map[string]any{prefix + "/public-ip-overwrite": nil})
	r, err := m.Renew(ctxFor(t), l)
	if err != nil || r.Attrs.PublicIP != attrs.PublicIP || !r.SameSubnets(l) {
		t.Errorf("Renew after removing the overwrite = %s, %v; want public IP %s", r, err, attrs.PublicIP)
	}

	setAnnotations(t, c.admin, node, map[string]any{prefix + "/public-ip-overwrite": "not-an-ip"})
	if _, err := m.Renew(ctxFor(t), r); err == nil || !strings.Contains(err.Error(), "public-ip-overwrite") {
		t.Errorf("Renew with a bad overwrite annotation: %v, want an error naming it", err)
	}
}

// testPostEvent: as dist's service account, an Event is created where `kubectl describe
// node` looks for it: in the namespace default, about the Node by kind, name and UID (the
// node name as the kubelet has it, until the manager has read the Node), from weftd, with
// what the caller says of it.
func testPostEvent(t *testing.T, c *cluster) {
	const node = "eventful"
	n := createNode(t, c.admin, node, nil, "10.42.62.0/24")
	m, _ := c.newManager(t, node, "event.weft.test", netConf)
	first := time.Now().Add(-time.Minute).Truncate(time.Second) // core/v1 Event times have second resolution
	last := first.Add(30 * time.Second)
	post := func(reason string) {
		t.Helper()
		e := &corev1.Event{Type: corev1.EventTypeWarning, Reason: reason, Message: "seven " + reason, Count: 7,
			FirstTimestamp: metav1.NewTime(first), LastTimestamp: metav1.NewTime(last)}
		if err := m.PostEvent(ctxFor(t), e); err != nil {
			t.Fatal(err)
		}
	}
	post("BeforeRead")
	if _, _, err := m.NodePublicIPs(ctxFor(t)); err != nil { // reads the Node
		t.Fatal(err)
	}
	post("AfterRead")
	// kubectl describe node's two queries, in every namespace.
	for uid, reason := range map[types.UID]string{types.UID(node): "BeforeRead", n.UID: "AfterRead"} {
		sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node, "involvedObject.namespace": "", "involvedObject.uid": string(uid)}
		l, err := c.admin.CoreV1().Events("").List(ctxFor(t), metav1.ListOptions{FieldSelector: sel.String()})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 1 {
			t.Errorf("Events about %s (UID %s): %d, want the one of %s", node, uid, len(l.Items), reason)
			continue
		}
		e := l.Items[0]
		if e.Namespace != metav1.NamespaceDefault || e.Reason != reason || e.Type != corev1.EventTypeWarning || e.Message != "seven "+reason ||
			e.Count != 7 || !e.FirstTimestamp.Time.Equal(first) || !e.LastTimestamp.Time.Equal(last) ||
			e.Source != (corev1.EventSource{Component: kube.EventComponent, Host: node}) ||
			e.ReportingController != kube.EventComponent || e.ReportingInstance != node || e.InvolvedObject.APIVersion != "v1" {
			t.Errorf("Event %+v", e)
		}
	}
	// The README's query for every node's Events from weftd.
	sel := fields.Set{"involvedObject.kind": "Node", "source": kube.EventComponent}
	l, err := c.admin.CoreV1().Events("").List(ctxFor(t), metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range l.Items {
		if e.InvolvedObject.Name == node {
			reasons = append(reasons, e.Reason)
		}
	}
	if slices.Sort(reasons); !slices.Equal(reasons, []string{"AfterRead", "BeforeRead"}) {
		t.Errorf("Events from %s about %s: %v, want both", kube.EventComponent, node, reasons)
	}
}

func testSetReady(t *testing.T, c *cluster) {
	const node = "ready"
	createNode(t, c.admin, node, nil, "10.42.61.0/24")
	kubeletReady := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}
	patchNode(t, c.admin, node, map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{
		kubeletReady,
		{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue, Reason: "NoRouteCreated",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()},
	}}}, "status")
	m, _ := c.newManager(t, node, "ready.weft.test", netConf)
	var r subnet.Readier = m
	if err := r.SetReady(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	cond := func() (corev1.NodeCondition, []corev1.NodeCondition) {
		n, err := c.admin.CoreV1().Nodes().Get(ctxFor(t), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeNetworkUnavailable {
				return c, n.Status.Conditions
			}
		}
		t.Fatalf("no NetworkUnavailable condition in %v", n.Status.Conditions)
		return corev1.NodeCondition{}, nil
	}
	got, all := cond()
	if got.Status != corev1.ConditionFalse || got.Reason != kube.ReadyReason {
		t.Errorf("condition %+v, want False/%s", got, kube.ReadyReason)
	}
	if len(all) != 2 {
		t.Errorf("conditions %v, want the kubelet's Ready kept next to NetworkUnavailable", all)
	}
	time.Sleep(1100 * time.Millisecond) // condition times have second resolution
	if err := r.SetReady(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if again, _ := cond(); !again.LastTransitionTime.Equal(&got.LastTransitionTime) || !again.LastHeartbeatTime.Equal(&got.LastHeartbeatTime) {
		t.Errorf("second SetReady changed the condition: %+v then %+v", got, again)
	}
}

// testBurst: 200 updates to 50 peers while the receiver is busy reach it as a couple of
// batches holding each node's last version; updates of labels and status afterwards reach
// it not at all.
func testBurst(t *testing.T, c *cluster) {
	const prefix, peers, rounds = "burst.weft.test", 50, 4
	name := func(i int) string { return fmt.Sprintf("burst-%02d", i) }
	attrs := func(i, round int) subnet.LeaseAttrs {
		a := vxlanAttrs(fmt.Sprintf("192.0.2.%d", 100+i))
		a.BackendData = []byte(fmt.Sprintf(`{"VNI":4096,"VtepMAC":"0e:2a:00:00:%02x:%02x"}`, round, i))
		return a
	}
	for i := range peers {
		createNode(t, c.admin, name(i), peerAnnotations(prefix, attrs(i, 0)), fmt.Sprintf("10.42.%d.0/24", 100+i))
	}
	m, _ := c.newManager(t, "burst-observer", prefix, netConf)
	w := startWatch(t, m)
	// The first batch holds the Nodes the API server's watch cache had when the watch began,
	// which under load may lag the last create by a moment (CI saw 49 of 50): the rest come
	// right after.
	w.next(t, 30*time.Second, "the first batch")
	w.until(t, "every peer", func(s map[string]subnet.Lease) bool { return len(s) == peers })

	// The receiver is busy (not reading) during the burst.
	_, _, bd, _ := annotationKeys(prefix)
	start := time.Now()
	var wg sync.WaitGroup
	for g := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 1; round <= rounds; round++ {
				for i := g; i < peers; i += 10 {
					setAnnotations(t, c.admin, name(i), map[string]any{bd: string(attrs(i, round).BackendData)})
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d updates in %v", peers*rounds, time.Since(start))
	time.Sleep(time.Second) // still busy: the last updates reach the reflector meanwhile
	final := func(s map[string]subnet.Lease) bool {
		for i := range peers {
			if !s[fmt.Sprintf("10.42.%d.0-24", 100+i)].Attrs.Equal(attrs(i, rounds)) {
				return false
			}
		}
		return true
	}
	w.until(t, "every peer's last update", final)
	t.Logf("%d updates arrived as %d batches of %d events", peers*rounds, w.batches-1, len(w.events))
	if w.batches-1 > 3 {
		t.Errorf("%d updates arrived in %d batches, want at most 3", peers*rounds, w.batches-1)
	}
	if len(w.events) > 2*peers {
		t.Errorf("%d events for %d nodes, want each node's updates coalesced", len(w.events), peers)
	}

	// Labels and status heartbeats change nothing weft reads.
	for i := range peers {
		patchNode(t, c.admin, name(i), map[string]any{"metadata": map[string]any{"labels": map[string]string{"heartbeat": "1"}}})
		patchNode(t, c.admin, name(i), map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}}}}, "status")
	}
	w.quiet(t, time.Second, "after updates of labels and status only")
	setAnnotations(t, c.admin, name(7), map[string]any{bd: string(attrs(7, 9).BackendData)})
	if evs := w.next(t, 10*time.Second, "a relevant update"); len(evs) != 1 || !evs[0].Lease.Attrs.Equal(attrs(7, 9)) {
		t.Errorf("after one relevant update got %v, want that update alone", evs)
	}
}

// testCacheTrimmed: the watch's cache keeps only what weft reads of a Node, and reads the
// same lease from it, the Node's creation time included (the age that decides between two
// claims of one podCIDR).
func testCacheTrimmed(t *testing.T, c *cluster) {
	const prefix = "trim.weft.test"
	ann := peerAnnotations(prefix, vxlanAttrs("192.0.2.30"))
	ann["unrelated.example.com/note"] = strings.Repeat("x", 1000)
	ann[prefix+"/public-ip-overwrite"] = strings.Repeat("9", 500) // read from the own node only
	n := createNode(t, c.admin, "trim-peer", ann, "10.42.30.0/24")
	patchNode(t, c.admin, n.Name, map[string]any{"metadata": map[string]any{"labels": map[string]string{"kubernetes.io/os": "linux"}}})
	patchNode(t, c.admin, n.Name, map[string]any{"status": map[string]any{
		"capacity":  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")},
		"addresses": []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.30"}},
		"images":    []corev1.ContainerImage{{Names: []string{"registry.example.com/huge:1"}, SizeBytes: 1 << 30}},
	}}, "status")

	m, _ := c.newManager(t, "trim-observer", prefix, netConf)
	ch := make(chan subnet.Batch, 16)
	reads := make(chan kube.CacheRead, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.WatchWithCache(ctx, ch, reads) }()
	defer func() { cancel(); <-done }()
	read := <-reads
	for whole := false; !whole; {
		select {
		case b := <-ch:
			whole = !b.Partial
		case <-time.After(30 * time.Second):
			t.Fatal("no first whole batch")
		}
	}
	l, kept, ok := read("trim-peer")
	if !ok {
		t.Fatal("trim-peer not in the cache")
	}
	cur, err := c.admin.CoreV1().Nodes().Get(ctxFor(t), n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := subnet.Lease{Subnet: netip.MustParsePrefix("10.42.30.0/24"), Attrs: vxlanAttrs("192.0.2.30"), Created: cur.CreationTimestamp.UnixNano()}
	if l.Subnet != want.Subnet || !l.Attrs.Equal(want.Attrs) || l.Created != want.Created || want.Created == 0 {
		t.Errorf("lease from the cache %+v, want %+v", l, want)
	}
	// The watched annotations, the name and the podCIDR come to about 120 bytes; the
	// unrelated annotation and the overwrite (1,500 bytes) must not be kept.
	if kept > 300 {
		t.Errorf("the cache keeps %d bytes of strings of the node, want only what weft reads", kept)
	}
	if cur.Status.Images == nil || cur.Labels == nil || len(cur.ManagedFields) == 0 {
		t.Errorf("test node lacks the status, labels and managed fields that make trimming matter: %+v", cur)
	}
}

// testProtobuf: lists, watches and reads of nodes come as protobuf.
func testProtobuf(t *testing.T, c *cluster) {
	const prefix = "proto.weft.test"
	createNode(t, c.admin, "proto", nil, "10.42.31.0/24")
	m, _ := c.newManager(t, "proto", prefix, netConf)
	if _, err := m.Acquire(ctxFor(t), subnet.AcquireRequest{Attrs: vxlanAttrs("192.0.2.31")}); err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, m)
	w.next(t, 30*time.Second, "the first batch")
	types := c.rec.contentTypes()
	for _, k := range []string{"get", "watch", "patch"} {
		if !strings.HasPrefix(types[k], "application/vnd.kubernetes.protobuf") {
			t.Errorf("%s of nodes answered as %q, want protobuf (all: %v)", k, types[k], types)
		}
	}
	// With the WatchList client feature the initial list comes over the watch; without
	// it, there is a list, and it must be protobuf too.
	if l, ok := types["list"]; ok && !strings.HasPrefix(l, "application/vnd.kubernetes.protobuf") {
		t.Errorf("list of nodes answered as %q, want protobuf", l)
	}
}

// testMalformed: broken peer annotations are skipped, reported once each, and never stop
// the watch; a bad update of a good peer keeps its last good lease.
func testMalformed(t *testing.T, c *cluster) {
	const prefix = "bad.weft.test"
	managed, bt, bd, ip := annotationKeys(prefix)
	good := peerAnnotations(prefix, vxlanAttrs("192.0.2.40"))
	with := func(k, v string) map[string]string {
		a := peerAnnotations(prefix, vxlanAttrs("192.0.2.41"))
		if v == "" {
			delete(a, k)
		} else {
			a[k] = v
		}
		return a
	}
	bad := map[string]struct {
		ann  map[string]string
		cidr string
	}{
		"bad-ip":      {with(ip, "not-an-ip"), "10.42.41.0/24"},
		"bad-ipv6":    {with(ip, "fd00::41"), "10.42.42.0/24"},
		"bad-json":    {with(bd, `{"VNI":4096,`), "10.42.43.0/24"},
		"no-type":     {with(bt, ""), "10.42.44.0/24"},
		"no-ip":       {with(ip, ""), "10.42.45.0/24"},
		"only-ipv6":   {with(managed, "true"), "fd00:42::/64"},
		"zero-ip":     {with(ip, "0.0.0.0"), "10.42.46.0/24"},
		"zoned-ip":    {with(ip, "fe80::1%eth0"), "10.42.47.0/24"},
		"not-managed": {with(managed, "false"), "10.42.48.0/24"}, // not a peer at all: not reported
	}
	createNode(t, c.admin, "good", good, "10.42.40.0/24")
	for name, b := range bad {
		createNode(t, c.admin, name, b.ann, b.cidr)
	}
	m, skipped := c.skipCounting(t, "bad-observer", prefix)
	w := startWatch(t, m)
	if first := w.next(t, 30*time.Second, "the first batch"); len(first) != 1 || first[0].Lease.Subnet.String() != "10.42.40.0/24" {
		t.Fatalf("first batch %v, want only the good peer", first)
	}
	setAnnotations(t, c.admin, "good", map[string]any{ip: "garbage"}) // corrupts a good one
	createNode(t, c.admin, "bad-late", peerAnnotations(prefix, vxlanAttrs("192.0.2.49")), "10.42.49.0/24")
	w.until(t, "the late peer", func(s map[string]subnet.Lease) bool { _, ok := s["10.42.49.0-24"]; return ok })
	if got := w.state["10.42.40.0-24"].Attrs.PublicIP; got != netip.MustParseAddr("192.0.2.40") {
		t.Errorf("corrupted peer now has public IP %s, want its last good 192.0.2.40", got)
	}
	if len(w.state) != 2 {
		t.Errorf("state %v, want the good and the late peer", w.keys())
	}
	for name := range bad {
		want := 1
		if name == "not-managed" {
			want = 0
		}
		if got := skipped(name); got != want {
			t.Errorf("%s reported %d times, want %d", name, got, want)
		}
	}
	if got := skipped("good"); got != 1 {
		t.Errorf("corrupted peer reported %d times, want once", got)
	}
}

// testDuplicatePodCIDRs: two Nodes with the same podCIDR (a stale Node object, a hostile or
// mistaken write; the Kubernetes-mode soak's hostile writer makes one): the
// receiver keys leases by subnet, so the watch tells it of the older Node's lease alone. The
// newcomer is reported as skipped, and neither its arrival nor its deletion reaches the
// receiver (before, the newcomer's lease replaced the older's, and its deletion removed the
// subnet: every peer dropped the live node); when the older goes, the other takes its place.
// The manager's own node holds its podCIDR against an older claimant.
func testDuplicatePodCIDRs(t *testing.T, c *cluster) {
	const prefix = "dup.weft.test"
	const cidr, key = "10.42.60.0/24", "10.42.60.0-24"
	createNode(t, c.admin, "dup-b", peerAnnotations(prefix, vxlanAttrs("192.0.2.60")), cidr)
	m, skipped := c.skipCounting(t, "dup-self", prefix)
	w := startWatch(t, m)
	if first := w.next(t, 30*time.Second, "the first batch"); len(first) != 1 || first[0].Lease.Attrs.PublicIP.String() != "192.0.2.60" {
		t.Fatalf("first batch %v, want dup-b's lease", first)
	}
	// Creation times have seconds. dup-a is younger, and its name sorts first: age, not
	// the name, decides (the cache once dropped the creation time, and hostile-7 beat n2).
	time.Sleep(1100 * time.Millisecond)
	createNode(t, c.admin, "dup-a", peerAnnotations(prefix, vxlanAttrs("192.0.2.61")), cidr)
	w.quiet(t, 2*time.Second, "dup-a created on dup-b's podCIDR")
	if got := skipped("dup-a"); got != 1 {
		t.Errorf("dup-a reported as skipped %d times, want once", got)
	}
	deleteNode(t, c.admin, "dup-a")
	w.quiet(t, 2*time.Second, "dup-a deleted")

	createNode(t, c.admin, "dup-a", peerAnnotations(prefix, vxlanAttrs("192.0.2.61")), cidr)
	w.quiet(t, time.Second, "dup-a created again")
	deleteNode(t, c.admin, "dup-b")
	if evs := w.next(t, 10*time.Second, "dup-a in dup-b's place"); len(evs) != 1 || evs[0].Type != subnet.EventAdded ||
		evs[0].Lease.Attrs.PublicIP.String() != "192.0.2.61" {
		t.Errorf("after dup-b was deleted: %v; want dup-a's lease added", evs)
	}
	deleteNode(t, c.admin, "dup-a")
	if evs := w.next(t, 10*time.Second, "the podCIDR gone"); len(evs) != 1 || evs[0].Type != subnet.EventRemoved || evs[0].Lease.Key() != key {
		t.Errorf("after dup-a was deleted: %v; want %s removed", evs, key)
	}

	const own, ownKey = "10.42.61.0/24", "10.42.61.0-24"
	createNode(t, c.admin, "dup-c", peerAnnotations(prefix, vxlanAttrs("192.0.2.62")), own)
	w.until(t, "dup-c", func(s map[string]subnet.Lease) bool { _, ok := s[ownKey]; return ok })
	time.Sleep(1100 * time.Millisecond)
	createNode(t, c.admin, "dup-self", peerAnnotations(prefix, vxlanAttrs("192.0.2.63")), own)
	w.until(t, "the own node's lease", func(s map[string]subnet.Lease) bool { return s[ownKey].Attrs.PublicIP.String() == "192.0.2.63" })
	deleteNode(t, c.admin, "dup-c")
	w.quiet(t, time.Second, "dup-c deleted")
	deleteNode(t, c.admin, "dup-self")
}

// testOwnMalformed: the own node's annotations gone bad (overwritten by another writer) are
// a removal to its daemon, which then writes them again; a peer's keep their last good lease
// (testMalformed). Before, the daemon heard nothing and left them bad until its hourly
// renewal: peers that started meanwhile could not reach it (the Kubernetes-mode soak's
// tampering makes the case).
func testOwnMalformed(t *testing.T, c *cluster) {
	const prefix = "own.weft.test"
	const cidr, key = "10.42.62.0/24", "10.42.62.0-24"
	createNode(t, c.admin, "own-self", peerAnnotations(prefix, vxlanAttrs("192.0.2.64")), cidr)
	m, _ := c.newManager(t, "own-self", prefix, netConf)
	w := startWatch(t, m)
	if first := w.next(t, 30*time.Second, "the first batch"); len(first) != 1 || first[0].Lease.Key() != key {
		t.Fatalf("first batch %v, want the own lease", first)
	}
	_, _, bd, _ := annotationKeys(prefix)
	setAnnotations(t, c.admin, "own-self", map[string]any{bd: `{"VNI":4096,`})
	if evs := w.next(t, 10*time.Second, "the own lease unreadable"); len(evs) != 1 || evs[0].Type != subnet.EventRemoved || evs[0].Lease.Key() != key {
		t.Errorf("after the own node's backend-data went bad: %v; want %s removed", evs, key)
	}
	setAnnotations(t, c.admin, "own-self", map[string]any{bd: `{"VNI":4096}`})
	if evs := w.next(t, 10*time.Second, "the own lease good again"); len(evs) != 1 || evs[0].Type != subnet.EventAdded || evs[0].Lease.Key() != key {
		t.Errorf("after the own node's backend-data was good again: %v; want %s added", evs, key)
	}
}

// testRBACEnforced: the API server really authorizes: an identity without the role can
// neither read nor annotate nodes.
func testRBACEnforced(t *testing.T, c *cluster) {
	createNode(t, c.admin, "nobody", nil, "10.42.50.0/24")
	log, _ := testLogger(t)
	m, err := kube.New(kube.Config{REST: c.srv.Restricted(), NetConfPath: writeNetConf(t, netConf), NodeName: "nobody", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Acquire(ctxFor(t), subnet.AcquireRequest{Attrs: vxlanAttrs("192.0.2.50")})
	if !apierrors.IsForbidden(err) {
		t.Errorf("Acquire as %s: %v, want forbidden", kubetest.RestrictedUser, err)
	}
}

// TestEveryPermissionNeeded takes each permission of dist's ClusterRole away in turn and
// runs a node's life (acquire, ready, post an event, watch, renew): the API server must
// refuse something, or the role grants more than weft needs. (TestConformance and
// TestKube/PostEvent show that it grants enough.)
//
// The server has streaming lists (WatchList) off, as API servers before 1.32 do and as
// clusters may: the reflector then lists with "list", which it otherwise streams with
// "watch"; the role must work on both.
func TestEveryPermissionNeeded(t *testing.T) {
	c := newCluster(t, "--feature-gates=WatchList=false")
	role, err := c.admin.RbacV1().ClusterRoles().Get(ctxFor(t), "weft", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type perm struct{ resource, verb string }
	var perms []perm
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			for _, v := range r.Verbs {
				perms = append(perms, perm{res, v})
			}
		}
	}
	if len(perms) != 5 {
		t.Fatalf("role rules %v: expected the five permissions of the tests below", role.Rules)
	}
	for i, p := range perms {
		t.Run(strings.ReplaceAll(p.resource, "/", "-")+"-"+p.verb, func(t *testing.T) {
			sa := fmt.Sprintf("weft-without-%d", i)
			var rules []rbacv1.PolicyRule
			for _, q := range perms {
				if q != p {
					rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{q.resource}, Verbs: []string{q.verb}})
				}
			}
			ctx := ctxFor(t)
			if _, err := c.admin.CoreV1().ServiceAccounts("kube-flannel").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: rules}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: sa},
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: sa},
				Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: "kube-flannel"}},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			node := "perm-" + sa
			createNode(t, c.admin, node, nil, fmt.Sprintf("10.42.%d.0/24", 80+i))
			rec := &recorder{}
			rc := rec.wrap(c.srv.ServiceAccountConfig(t, "kube-flannel", sa))
			waitForRBAC(t, rc, rules)
			nodeLife(t, rc, node)
			if len(rec.deniedRequests()) == 0 {
				t.Errorf("without %s on %s nothing was refused: the role grants more than weft needs", p.verb, p.resource)
			}
		})
	}
}

// waitForRBAC waits until the API server's authorizer knows the new binding: a request
// each remaining rule allows succeeds.
func waitForRBAC(t *testing.T, rc *rest.Config, rules []rbacv1.PolicyRule) {
	t.Helper()
	cs := clientset(t, rc)
	for _, r := range rules {
		if r.Resources[0] != "nodes" || r.Verbs[0] != "list" && r.Verbs[0] != "get" {
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			var err error
			if r.Verbs[0] == "list" {
				_, err = cs.CoreV1().Nodes().List(ctxFor(t), metav1.ListOptions{Limit: 1})
			} else {
				_, err = cs.CoreV1().Nodes().Get(ctxFor(t), "no-such-node", metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					err = nil
				}
			}
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("binding not in effect: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// nodeLife runs what weftd does on a node, giving up on each step after a few seconds.
func nodeLife(t *testing.T, rc *rest.Config, node string) {
	log, _ := testLogger(t)
	m, err := kube.New(kube.Config{REST: rc, AnnotationPrefix: "perm.weft.test", NetConfPath: writeNetConf(t, netConf), NodeName: node, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := m.Acquire(ctx, subnet.AcquireRequest{Attrs: vxlanAttrs("192.0.2.60")})
	t.Logf("Acquire: %v", err)
	t.Logf("SetReady: %v", m.SetReady(ctx))
	now := time.Now()
	t.Logf("PostEvent: %v", m.PostEvent(ctx, &corev1.Event{Type: corev1.EventTypeNormal, Reason: "LeaseAcquired", Message: "node life", Count: 1,
		FirstTimestamp: metav1.NewTime(now), LastTimestamp: metav1.NewTime(now)}))
	ch := make(chan subnet.Batch, 16)
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	defer wcancel()
	go func() {
		if err == nil {
			// A renewal after the first whole batch, as the daemon's loop does.
			for {
				select {
				case b := <-ch:
					if b.Partial {
						continue
					}
					_, rerr := m.Renew(ctx, l)
					t.Logf("Renew: %v", rerr)
				case <-wctx.Done():
				}
				return
			}
		}
	}()
	t.Logf("Watch: %v", m.Watch(wctx, ch))
}

// TestWatchAcrossAPIServerRestart: the API server goes away and comes back; the watch
// resumes without a lease event of its own, and changes made after the restart arrive.
func TestWatchAcrossAPIServerRestart(t *testing.T) {
	c := newCluster(t)
	const prefix = "restart.weft.test"
	createNode(t, c.admin, "a", nil, "10.42.1.0/24")
	var restarts, relists atomic.Int64
	log, _ := testLogger(t)
	a, err := kube.New(kube.Config{REST: c.weft, AnnotationPrefix: prefix, NetConfPath: writeNetConf(t, netConf), NodeName: "a", Logger: log,
		OnWatchRestart: func(error) { restarts.Add(1) }, OnRelist: func() { relists.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	own, err := a.Acquire(ctxFor(t), subnet.AcquireRequest{Attrs: vxlanAttrs("192.0.2.1")})
	if err != nil {
		t.Fatal(err)
	}
	checkUntil := func(ok bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); (a.Check() == nil) != ok; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("Check() = %v, want ok=%v", a.Check(), ok)
			}
		}
	}
	createNode(t, c.admin, "p", peerAnnotations(prefix, vxlanAttrs("192.0.2.2")), "10.42.2.0/24")
	w := startWatch(t, a)
	if first := w.next(t, 30*time.Second, "the first batch"); len(first) != 2 {
		t.Fatalf("first batch %v, want a and p", first)
	}

	start := time.Now()
	c.srv.Stop(t)
	t.Logf("API server stopped in %v", time.Since(start))
	if _, err := a.Renew(ctxFor(t), own); err == nil {
		t.Error("Renew succeeded with the API server stopped")
	}
	checkUntil(false)
	t.Logf("Check with the API server down: %v", a.Check())
	time.Sleep(2 * time.Second) // the reflector retries meanwhile
	w.quiet(t, 0, "while the API server was down")
	start = time.Now()
	c.srv.Restart(t)
	t.Logf("API server ready again in %v", time.Since(start))
	// A starting API server refuses requests until its RBAC cache has loaded; the
	// reflector, reconnecting all along, may have met that. Refusals from now on count.
	waitForRBAC(t, c.weft, []rbacv1.PolicyRule{{Resources: []string{"nodes"}, Verbs: []string{"get"}}})
	c.rec.forgetDenied()

	r, err := a.Renew(ctxFor(t), own)
	if err != nil || !r.SameSubnets(own) || !r.Attrs.Equal(own.Attrs) {
		t.Errorf("Renew after the restart = %s, %v; want %s unchanged", r, err, own)
	}
	createNode(t, c.admin, "q", peerAnnotations(prefix, vxlanAttrs("192.0.2.3")), "10.42.3.0/24")
	start = time.Now()
	w.until(t, "the peer added after the restart", func(s map[string]subnet.Lease) bool { _, ok := s["10.42.3.0-24"]; return ok })
	t.Logf("peer added after the restart seen in %v", time.Since(start))
	checkUntil(true)
	if restarts.Load() == 0 {
		t.Error("OnWatchRestart never called")
	}
	t.Logf("%d watch restarts, %d relists", restarts.Load(), relists.Load())
	for _, ev := range w.events {
		if ev.Lease.Subnet.String() != "10.42.3.0/24" {
			t.Errorf("event %s %s across the restart, want only q's addition", ev.Type, ev.Lease)
		}
	}
}

// TestProbeFrozenAPIServer: a frozen API server (SIGSTOP) keeps its connections open and
// answers nothing, which the watch does not notice (Check stays quiet): Probe, with the weft
// role alone, is answered while the server runs, gets no answer by its deadline while it is
// frozen, and is answered again once it runs.
func TestProbeFrozenAPIServer(t *testing.T) {
	c := newCluster(t)
	const prefix = "probe.weft.test"
	createNode(t, c.admin, "a", nil, "10.42.1.0/24")
	log, _ := testLogger(t)
	a, err := kube.New(kube.Config{REST: c.weft, AnnotationPrefix: prefix, NetConfPath: writeNetConf(t, netConf), NodeName: "a", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Acquire(ctxFor(t), subnet.AcquireRequest{Attrs: vxlanAttrs("192.0.2.1")}); err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, a)
	w.next(t, 30*time.Second, "the first batch")
	probe := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		return a.Probe(ctx)
	}
	if err := probe(); err != nil {
		t.Fatalf("Probe with the API server running: %v", err)
	}
	c.srv.Freeze(t)
	err = probe()
	t.Logf("Check with the API server frozen: %v", a.Check())
	c.srv.Thaw(t)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Probe with the API server frozen = %v, want no answer by the deadline", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := probe()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Probe after the API server was thawed: %v", err)
		}
	}
}

// TestWatchResumesWhenAPIServerReturns: after an outage of the API server long enough for
// client-go's reflector to back off for 13 to 26 s between tries, the watch resumes within a
// probe (a second) of the server's return: a Node created then arrives within a few seconds.
// Before, the reflector's backoff decided, and the Kubernetes-mode soak saw a node hear of the
// others again 61 s after the API server was back.
func TestWatchResumesWhenAPIServerReturns(t *testing.T) {
	c := newCluster(t)
	const prefix = "resume.weft.test"
	createNode(t, c.admin, "self", peerAnnotations(prefix, vxlanAttrs("192.0.2.70")), "10.42.70.0/24")
	m, _ := c.newManager(t, "self", prefix, netConf)
	w := startWatch(t, m)
	w.next(t, 30*time.Second, "the first batch")
	c.srv.Close()
	time.Sleep(20 * time.Second)
	if err := c.srv.Relaunch(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	// A starting API server refuses requests until its RBAC cache has loaded, /version
	// among them, which the watch waits on; refusals from now on count.
	waitForRBAC(t, c.weft, []rbacv1.PolicyRule{{Resources: []string{"nodes"}, Verbs: []string{"get"}}})
	c.rec.forgetDenied()
	createNode(t, c.admin, "peer", peerAnnotations(prefix, vxlanAttrs("192.0.2.71")), "10.42.71.0/24")
	w.until(t, "the Node created after the API server came back", func(s map[string]subnet.Lease) bool {
		_, ok := s["10.42.71.0-24"]
		return ok
	})
	took := time.Since(back)
	t.Logf("the peer arrived %v after the API server was back", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("the watch resumed %v after the API server was back; want within a few probes", took.Round(time.Millisecond))
	}
}

// TestTokenFileRotated: a manager whose kubeconfig names a token file, as a pod's projected
// service-account token is one, keeps working when a new token is written there and the old
// one revoked at once (its Secret deleted; the API server restarted, which drops both its
// cache of authentications and the watch). The first refusal of the old token makes the
// client read the file again: the watch resumes and brings a peer added after the rotation,
// and Renew writes back an annotation removed meanwhile, each with the new token. client-go
// alone would send the revoked token until it reads the file again, up to a minute later.
func TestTokenFileRotated(t *testing.T) {
	c := newCluster(t)
	const prefix = "rotate.weft.test"
	createNode(t, c.admin, "a", nil, "10.42.1.0/24")
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken := func(secret string) {
		t.Helper()
		// By a rename, as the kubelet replaces a projected token.
		if err := atomicfile.Write(tokenFile, []byte(c.srv.BoundToken(t, "kube-flannel", "weft", secret)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeToken("weft-token-1")
	var refused atomic.Int64
	log, _ := testLogger(t)
	a, err := kube.New(kube.Config{Kubeconfig: writeKubeconfig(t, c.srv, tokenFile), AnnotationPrefix: prefix,
		NetConfPath: writeNetConf(t, netConf), NodeName: "a", Logger: log,
		OnWatchRestart: func(err error) {
			if apierrors.IsUnauthorized(err) {
				refused.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	own, err := a.Acquire(ctxFor(t), subnet.AcquireRequest{Attrs: vxlanAttrs("192.0.2.1")})
	if err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, a)
	if first := w.next(t, 30*time.Second, "the first batch"); len(first) != 1 {
		t.Fatalf("first batch %v, want a alone", first)
	}

	writeToken("weft-token-2")
	c.srv.RevokeToken(t, "kube-flannel", "weft-token-1")
	c.srv.Restart(t)
	waitForRBAC(t, c.weft, []rbacv1.PolicyRule{{Resources: []string{"nodes"}, Verbs: []string{"get"}}})
	createNode(t, c.admin, "p", peerAnnotations(prefix, vxlanAttrs("192.0.2.2")), "10.42.2.0/24")
	w.until(t, "the peer added after the rotation", func(s map[string]subnet.Lease) bool { _, ok := s["10.42.2.0-24"]; return ok })

	_, _, _, publicIP := annotationKeys(prefix)
	setAnnotations(t, c.admin, "a", map[string]any{publicIP: nil})
	if _, err := a.Renew(ctxFor(t), own); err != nil {
		t.Fatalf("Renew with the rotated token: %v", err)
	}
	n, err := c.admin.CoreV1().Nodes().Get(ctxFor(t), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Annotations[publicIP]; got != "192.0.2.1" {
		t.Errorf("annotation %s after Renew: %q, want 192.0.2.1 written back", publicIP, got)
	}
	// The old token is refused once or twice (the watch, perhaps a list racing it), then the
	// file is read again; a client that kept sending it would be refused every few seconds.
	t.Logf("%d node list or watch calls refused as unauthorized across the rotation", refused.Load())
	if n := refused.Load(); n == 0 || n > 3 {
		t.Errorf("%d list or watch calls refused as unauthorized; want 1 to 3: the revoked token once", n)
	}
}

// writeKubeconfig writes a kubeconfig for srv whose user reads its token from tokenFile.
func writeKubeconfig(t *testing.T, srv *kubetest.Server, tokenFile string) string {
	t.Helper()
	const name = "test"
	kc := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{name: {Server: srv.URL(), CertificateAuthorityData: srv.Admin().CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{name: {TokenFile: tokenFile}},
		Contexts:       map[string]*clientcmdapi.Context{name: {Cluster: name, AuthInfo: name}},
		CurrentContext: name,
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGetConfig: net-conf.json is validated as in etcd mode; errors name the key.
func TestGetConfig(t *testing.T) {
	for _, tc := range []struct{ conf, key string }{
		{`{"Network":"10.42.0.0/16","Bogus":1}`, "Backend"}, // Bogus is ignored, the missing Backend is not
		{`{"Network":"10.42.0.0/16","SubnetLen":24,"SubnetMin":"10.42.1.5"}`, "SubnetMin"},
		{`{"Network":"10.42.0.0/16","Backend":{"Type":"udp","Port":8285}}`, "Backend.Type"},
		{`{"Network":"not-a-net"}`, "Network"},
	} {
		m, err := kube.New(kube.Config{REST: &rest.Config{Host: "https://127.0.0.1:1"}, NodeName: "n", NetConfPath: writeNetConf(t, tc.conf)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.GetConfig(t.Context())
		var ce *subnet.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: %v, want a config error naming %s", tc.conf, err, tc.key)
		}
	}
	m, err := kube.New(kube.Config{REST: &rest.Config{Host: "https://127.0.0.1:1"}, NodeName: "n", NetConfPath: "/nonexistent/net-conf.json"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetConfig(t.Context()); !errors.Is(err, subnet.ErrNoConfig) || !strings.Contains(err.Error(), "/nonexistent/net-conf.json") {
		t.Errorf("missing file: %v, want ErrNoConfig naming the path", err)
	}
}

func TestNew(t *testing.T) {
	rc := &rest.Config{Host: "https://127.0.0.1:1"}
	if _, err := kube.New(kube.Config{REST: rc}); err == nil || !strings.Contains(err.Error(), "NODE_NAME") {
		t.Errorf("no node name: %v, want an error naming NODE_NAME", err)
	}
	for _, p := range []string{"a/b/c", "Not_A_Domain", "example.com/bad!", "-bad.com"} {
		if _, err := kube.New(kube.Config{REST: rc, NodeName: "n", AnnotationPrefix: p}); err == nil {
			t.Errorf("annotation prefix %q accepted", p)
		}
	}
	for _, p := range []string{"", "flannel.alpha.coreos.com", "example.com/weft", "example.com/weft-", "example.com/"} {
		if _, err := kube.New(kube.Config{REST: rc, NodeName: "n", AnnotationPrefix: p}); err != nil {
			t.Errorf("annotation prefix %q: %v", p, err)
		}
	}
}
