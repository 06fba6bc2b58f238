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
	var free []netip.Prefix // every subnet of 10.244.0.0/16 but the nodes'
	for i := range 256 {
		sn := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24)
		if sn != mustSubnet(t, nodes[0]) && sn != live.Subnet {
			free = append(free, sn)
		}
	}
	before := make([]cluster.Memory, len(nodes))
	for i, n := range nodes {
		m, err := cluster.ReadMemory(n.Pid())
		if err != nil {
			t.Fatal(err)
		}
		before[i] = m
	}

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

	// What the storm leaves: a third valid (each with addresses of its own), a third
	// deleted, a third deleted then malformed.
	settling := time.Now()
	want := storm.settle(t)
	settled := time.Now()
	t.Logf("the storm's leftovers written in %v", settled.Sub(settling).Round(time.Millisecond))
	for i, n := range nodes {
		for {
			got, err := programmed(n)
			if err == nil && slices.Equal(got, want[n.Name]) {
				break
			}
			if time.Since(settled) > convergeTimeout {
				t.Fatalf("node %s has not converged to the storm's leftovers %v after the storm: programmed %v (%v)", n.Name, want[n.Name], got, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		m, err := cluster.ReadMemory(n.Pid())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("node %s: converged %v after the leftovers were written, to %d peers; resident memory %.1f MiB before, peak %.1f MiB, %.1f MiB after",
			n.Name, time.Since(settled).Round(time.Millisecond), len(want[n.Name]), mib(before[i].RSS), mib(m.Peak), mib(m.RSS))
		if m.Peak > stormPeakLimit {
			t.Errorf("node %s: weftd's resident memory peaked at %.1f MiB in the storm, over %.0f MiB", n.Name, mib(m.Peak), mib(stormPeakLimit))
		}
		if code, body, err := n.Get("/readyz"); err != nil || code != 200 {
			t.Errorf("node %s not ready after the storm: %d %s (%v)", n.Name, code, body, err)
		}
	}
	pingAll(t, pods)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

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
		slices.Sort(peers)
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
