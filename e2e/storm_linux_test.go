package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/status"
	"github.com/weftnet/weft/subnet"
)

const (
	// stormFor is how long a storm blows.
	stormFor = 10 * time.Second
	// stormWriters put small values as fast as the datastore takes them.
	stormWriters = 16
	// bigValue is the size of the largest values of a storm: near etcd's default request
	// limit (--max-request-bytes, 1.5 MiB) less the key and the request's framing.
	bigValue = 1400 << 10
	// stormPeakLimit bounds the resident memory of a weftd that a storm has blown through.
	// weftd holds about 30 MiB at a thousand peers; a daemon that buffered the storm's
	// values (gigabytes of them) or kept the large ones would pass it many times over.
	stormPeakLimit = 200 << 20
)

// TestLeaseStorm: a lease storm through a running cluster: for 10 s, writers put thousands
// of values a second on every free subnet of the network (valid leases, leases copying a
// live node's public IP and VTEP MAC, malformed values, deletions) and another puts values
// of up to 1.4 MiB, near etcd's limit. A pod pings across the nodes meanwhile. weftd's
// resident memory stays bounded at its peak, the live nodes keep their claims (the copies
// are newer: no packet is lost), and once the storm ends every weftd converges to the leases
// it left: the valid ones programmed, the others skipped, the deleted ones gone.
func TestLeaseStorm(t *testing.T) {
	bins := needBinaries(t)
	c := newCluster(t, bins, backends()[0])
	nodes := startNodes(t, c, "n1", "n2")
	pods := onePodEach(t, c, nodes)
	pingAll(t, pods)
	live := leaseOf(t, c, mustSubnet(t, nodes[1]))
	free := freeSubnets(t, nodes)
	before := memoryOf(t, nodes)

	run, err := cluster.StartPing(pods[0], pods[1].IP, int((stormFor+2*time.Second)/(10*time.Millisecond)), 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	storm := newStorm(c, free, live)
	storm.blow(t, stormFor)
	sent, recv, err := run.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("storm of %v: %d small puts (%.0f/s), %d deletions, %d values of %d KiB (%.0f MiB in all); ping %s -> %s every 10 ms across it: %d sent, %d lost",
		stormFor, storm.small.Load(), float64(storm.small.Load())/stormFor.Seconds(), storm.deletes.Load(),
		storm.big.Load(), bigValue>>10, float64(storm.big.Load()*bigValue)/(1<<20), pods[0].Name, pods[1].Name, sent, sent-recv)
	if recv != sent {
		t.Errorf("%d of %d pings across the storm lost: the live node's claim must stand against the storm's copies", sent-recv, sent)
	}
	if storm.small.Load() < 1000 {
		t.Errorf("only %d small puts in %v: no storm", storm.small.Load(), stormFor)
	}

	// What the storm leaves (see settle), and what each node must then program.
	settling := time.Now()
	want := storm.settle(t)
	settled := time.Now()
	t.Logf("the storm's leftovers written in %v", settled.Sub(settling).Round(time.Millisecond))
	waitConverged(t, nodes, want, before, settled)
	pingAll(t, pods)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// memoryOf reads the resident memory of each node's weftd.
func memoryOf(t *testing.T, nodes []*cluster.Node) []cluster.Memory {
	t.Helper()
	out := make([]cluster.Memory, len(nodes))
	for i, n := range nodes {
		m, err := cluster.ReadMemory(n.Pid())
		if err != nil {
			t.Fatal(err)
		}
		out[i] = m
	}
	return out
}

// waitConverged waits until each node's weftd has programmed exactly the peer subnets want
// gives it (by node name), after a storm whose leftovers were written at settled, and checks
// that its resident memory peaked under stormPeakLimit (before: as it was before the storm)
// and that it is ready.
func waitConverged(t *testing.T, nodes []*cluster.Node, want map[string][]string, before []cluster.Memory, settled time.Time) {
	t.Helper()
	for i, n := range nodes {
		w := slices.Sorted(slices.Values(want[n.Name]))
		for {
			got, err := programmed(n)
			if err == nil && slices.Equal(got, w) {
				break
			}
			if time.Since(settled) > convergeTimeout {
				t.Fatalf("node %s has not converged to the storm's leftovers %v: programmed %v (%v)", n.Name, w, got, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		m, err := cluster.ReadMemory(n.Pid())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("node %s: converged %v after the leftovers were written, to %d peers; resident memory %.1f MiB before, peak %.1f MiB, %.1f MiB after",
			n.Name, time.Since(settled).Round(time.Millisecond), len(w), mib(before[i].RSS), mib(m.Peak), mib(m.RSS))
		if m.Peak > stormPeakLimit {
			t.Errorf("node %s: weftd's resident memory peaked at %.1f MiB in the storm, over %.0f MiB", n.Name, mib(m.Peak), mib(stormPeakLimit))
		}
		if code, body, err := n.Get("/readyz"); err != nil || code != 200 {
			t.Errorf("node %s not ready after the storm: %d %s (%v)", n.Name, code, body, err)
		}
	}
}

// programmed lists the subnets of the peers a node's weftd reports programmed, sorted.
func programmed(n *cluster.Node) ([]string, error) {
	code, body, err := n.Get("/status")
	if err != nil || code != 200 {
		return nil, fmt.Errorf("/status: %d %v", code, err)
	}
	var st status.Node
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return nil, fmt.Errorf("/status: %w", err)
	}
	var out []string
	for _, p := range st.Peers {
		if p.State == "programmed" {
			out = append(out, p.Subnet)
		}
	}
	slices.Sort(out)
	return out, nil
}

// storm writes hostile and churning leases on the free subnets of a cluster.
type storm struct {
	c    *cluster.Cluster
	free []netip.Prefix
	live subnet.Lease // a live node's lease, whose public IP and VTEP MAC the storm copies

	small, deletes, big, failed atomic.Int64
	lastErr                     atomic.Value // of the last failed write, a string
}

func newStorm(c *cluster.Cluster, free []netip.Prefix, live subnet.Lease) *storm {
	return &storm{c: c, free: free, live: live}
}

// blow runs the storm for d and returns when every writer has stopped.
func (s *storm) blow(t *testing.T, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for w := range stormWriters {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for ctx.Err() == nil {
				s.note(s.small1(ctx, r))
			}
		})
	}
	wg.Go(func() {
		r := rand.New(rand.NewPCG(99, 1))
		junk := strings.Repeat("x", bigValue)
		for ctx.Err() == nil {
			i := r.IntN(len(s.free))
			sn := s.free[i]
			// A lease whose backend data is valid JSON with a large field, and a value
			// that is no JSON at all.
			v := junk
			if r.IntN(2) == 0 {
				v = bigLease(fmt.Sprintf("198.18.%d.2", i), fmt.Sprintf("0e:77:%02x:00:00:01", i))
			}
			if err := s.put(ctx, sn, v); err == nil {
				s.big.Add(1)
			} else {
				s.note(err)
			}
		}
	})
	wg.Wait()
	if n := s.failed.Load(); n > 0 {
		t.Logf("storm: %d writes refused by an overwhelmed etcd, the last: %v", n, s.lastErr.Load())
	}
}

// note counts a write the datastore refused in the storm (a timeout, when it is
// overwhelmed): the storm goes on.
func (s *storm) note(err error) {
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		s.failed.Add(1)
		s.lastErr.Store(err.Error())
	}
}

// small1 makes one small change on a random free subnet.
func (s *storm) small1(ctx context.Context, r *rand.Rand) error {
	i := r.IntN(len(s.free))
	sn := s.free[i]
	var v string
	switch k := r.IntN(10); {
	case k < 5: // a valid lease, its addresses changing with every put
		v = stormLease(fmt.Sprintf("198.18.%d.%d", i, r.IntN(250)+1), fmt.Sprintf("0e:55:%02x:%02x:00:01", i, r.IntN(256)), "")
	case k < 7: // a copy of the live node's public IP and VTEP MAC
		var d struct{ VtepMAC string }
		_ = json.Unmarshal(s.live.Attrs.BackendData, &d)
		v = stormLease(s.live.Attrs.PublicIP.String(), d.VtepMAC, "")
	case k < 8:
		v = `{"PublicIP":"not an address","BackendType":"vxlan","BackendData":{"VNI":1}}`
	case k < 9:
		v = `{"PublicIP":`
	default:
		if _, err := s.c.Etcd().Delete(ctx, s.key(sn)); err != nil {
			return fmt.Errorf("delete %s: %w", sn, err)
		}
		s.deletes.Add(1)
		return nil
	}
	if err := s.put(ctx, sn, v); err != nil {
		return err
	}
	s.small.Add(1)
	return nil
}

// settle writes what the storm leaves on each free subnet and returns the peers each node
// should then have programmed: the live ones and the valid leftovers. A third of the free
// subnets get a valid lease with addresses of its own, a third nothing, a third a lease of
// 1.4 MiB (refused: over subnet.MaxAttrsSize). A bad value leaves the last good one standing
// (flanneld's watch too skips it), so the leases first go.
func (s *storm) settle(t *testing.T) map[string][]string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var valid []string
	var ops []clientv3.Op
	var big []int
	for i, sn := range s.free {
		switch i % 3 {
		case 0:
			ops = append(ops, clientv3.OpPut(s.key(sn), stormLease(fmt.Sprintf("198.18.%d.1", i), fmt.Sprintf("0e:66:%02x:00:00:01", i), "")))
			valid = append(valid, sn.String())
		case 1:
			ops = append(ops, clientv3.OpDelete(s.key(sn)))
		case 2:
			ops = append(ops, clientv3.OpDelete(s.key(sn)))
			big = append(big, i)
		}
	}
	for chunk := range slices.Chunk(ops, 64) {
		if _, err := s.c.Etcd().Txn(ctx).Then(chunk...).Commit(); err != nil {
			t.Fatalf("after the storm: %v", err)
		}
	}
	for _, i := range big {
		if err := s.put(ctx, s.free[i], bigLease(fmt.Sprintf("198.18.%d.2", i), fmt.Sprintf("0e:77:%02x:00:00:01", i))); err != nil {
			t.Fatalf("after the storm: %v", err)
		}
	}
	want := map[string][]string{}
	for _, n := range s.c.Nodes() {
		peers := slices.Clone(valid)
		for _, m := range s.c.Nodes() {
			if m != n {
				sn, err := m.Subnet()
				if err != nil {
					t.Fatal(err)
				}
				peers = append(peers, sn.String())
			}
		}
		want[n.Name] = peers
	}
	return want
}

// stormLease is a vxlan lease value; pad, if any, goes into its backend data.
func stormLease(ip, mac, pad string) string {
	return fmt.Sprintf(`{"PublicIP":%q,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":%q,"Pad":%q}}`, ip, mac, pad)
}

// bigLease is a valid vxlan lease value of bigValue bytes.
func bigLease(ip, mac string) string {
	v := stormLease(ip, mac, "")
	return stormLease(ip, mac, strings.Repeat("x", bigValue-len(v)))
}

func (s *storm) key(sn netip.Prefix) string {
	return s.c.EtcdPrefix() + "/subnets/" + subnet.Lease{Subnet: sn}.Key()
}

func (s *storm) put(ctx context.Context, sn netip.Prefix, v string) error {
	_, err := s.c.Etcd().Put(ctx, s.key(sn), v)
	if err != nil {
		return fmt.Errorf("put %s (%d bytes): %w", sn, len(v), err)
	}
	return nil
}

// TestNodeUpdateStorm is TestLeaseStorm in Kubernetes mode: for 10 s, writers patch the
// annotations of a hundred Node objects as fast as the API server takes it (valid leases,
// copies of a live node's public IP and VTEP MAC, malformed and 200 KiB backend data,
// annotations weft does not read), while a pod pings across the two weftd nodes. weftd's
// resident memory stays bounded, no ping is lost, and every weftd converges to what the
// storm leaves.
func TestNodeUpdateStorm(t *testing.T) {
	bins := needBinaries(t)
	needKubeAPIServer(t)
	kc := newKubeCluster(t, bins, backends()[0], bins.weftd)
	kc.createNode(t, "n1", podCIDR(1))
	kc.createNode(t, "n2", podCIDR(2))
	nodes := startNodes(t, kc.Cluster, "n1", "n2")
	pods := onePodEach(t, kc.Cluster, nodes)
	pingAll(t, pods)
	const fakes = 100
	for i := range fakes {
		kc.createNode(t, fmt.Sprintf("storm-%d", i), podCIDR(10+i))
	}
	liveIP, liveMAC := nodes[1].IP.String(), kc.annotatedVtepMAC(t, "n2")
	before := memoryOf(t, nodes)

	// The API server takes a few hundred patches a second here, fewer under the race
	// detector: the storm blows for stormFor and at least minPatches, at most 6 × stormFor.
	const minPatches = 1000
	var patches, failed atomic.Int64
	var blew time.Duration
	watchPings(t, "the Node-update storm", pods[0], pods[1], func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		start := time.Now()
		go func() {
			for ctx.Err() == nil {
				if d := time.Since(start); d >= stormFor && patches.Load() >= minPatches || d >= 6*stormFor {
					cancel()
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		var wg sync.WaitGroup
		for w := range stormWriters / 2 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 2))
				for ctx.Err() == nil {
					i := r.IntN(fakes)
					var ann map[string]any
					switch k := r.IntN(10); {
					case k < 4:
						ann = stormAnnotations(fmt.Sprintf("198.18.%d.%d", i, r.IntN(250)+1), fmt.Sprintf("0e:55:%02x:%02x:00:01", i, r.IntN(256)), "")
					case k < 6:
						ann = stormAnnotations(liveIP, liveMAC, "")
					case k < 7:
						ann = map[string]any{annotation("backend-data"): "{"}
					case k < 8:
						ann = stormAnnotations(fmt.Sprintf("198.18.%d.2", i), fmt.Sprintf("0e:77:%02x:00:00:01", i), strings.Repeat("x", 200<<10))
					default: // what the kubelet and others write, which weft does not read
						ann = map[string]any{"example.com/heartbeat": fmt.Sprint(r.Int())}
					}
					if err := kc.patchAnnotations(ctx, fmt.Sprintf("storm-%d", i), ann); err == nil {
						patches.Add(1)
					} else if ctx.Err() == nil {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		blew = time.Since(start)
	})
	t.Logf("storm of %v: %d Node patches (%.0f/s; %d refused)", blew.Round(time.Millisecond), patches.Load(),
		float64(patches.Load())/blew.Seconds(), failed.Load())
	if patches.Load() < minPatches/4 {
		t.Errorf("only %d patches in %v: no storm", patches.Load(), blew)
	}

	// What the storm leaves: a third valid, a third without weft's annotations, a third
	// with backend data over the limit. A bad value leaves the last good one standing, as
	// in etcd mode, so the annotations of those first go.
	settling := time.Now()
	var valid []string
	for i := range fakes {
		name := fmt.Sprintf("storm-%d", i)
		ann := stormAnnotations(fmt.Sprintf("198.18.%d.1", i), fmt.Sprintf("0e:66:%02x:00:00:01", i), "")
		if i%3 == 0 {
			valid = append(valid, podCIDR(10+i).String())
		} else {
			for k := range ann {
				ann[k] = nil // removed
			}
		}
		err := kc.patchAnnotations(context.Background(), name, ann)
		if err == nil && i%3 == 2 {
			err = kc.patchAnnotations(context.Background(), name,
				stormAnnotations(fmt.Sprintf("198.18.%d.2", i), fmt.Sprintf("0e:77:%02x:00:00:01", i), strings.Repeat("x", 200<<10)))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	settled := time.Now()
	t.Logf("the storm's leftovers written in %v", settled.Sub(settling).Round(time.Millisecond))
	want := map[string][]string{
		"n1": append(slices.Clone(valid), podCIDR(2).String()),
		"n2": append(slices.Clone(valid), podCIDR(1).String()),
	}
	waitConverged(t, nodes, want, before, settled)
	pingAll(t, pods)
}

// stormAnnotations are the annotations of a vxlan node; pad, if any, goes into its backend
// data.
func stormAnnotations(ip, mac, pad string) map[string]any {
	return map[string]any{
		annotation("kube-subnet-manager"): "true",
		annotation("backend-type"):        "vxlan",
		annotation("public-ip"):           ip,
		annotation("backend-data"):        fmt.Sprintf(`{"VNI":1,"VtepMAC":%q,"Pad":%q}`, mac, pad),
	}
}

// patchAnnotations merges ann into a Node's annotations (a nil value removes one).
func (kc *kubeCluster) patchAnnotations(ctx context.Context, name string, ann map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, kubeOpTimeout)
	defer cancel()
	if _, err := kc.admin.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patching Node %s: %w", name, err)
	}
	return nil
}
