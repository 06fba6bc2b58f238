package e2e

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/subnet"
)

// TestDatastoreWiped: every lease deleted from etcd under a running cluster (a wipe, or a
// restore from a backup older than the leases; the network config stays) while a pod pings
// another across nodes every 10 ms: each weftd publishes its lease again with the same subnet
// and VTEP MAC, the others program it again, and the ping goes on. The packets lost to the
// churn (a peer's lease gone, then back) are reported.
func TestDatastoreWiped(t *testing.T) {
	bins := needBinaries(t)
	b := backends()[0] // vxlan: the lease carries the VTEP MAC too
	c := newCluster(t, bins, b)
	nodes := startNodes(t, c, "n1", "n2", "n3")
	pods := onePodEach(t, c, nodes)
	pingAll(t, pods)
	before, err := c.Leases()
	if err != nil {
		t.Fatal(err)
	}

	const count, interval = 300, 10 * time.Millisecond
	run, err := cluster.StartPing(pods[0], pods[1].IP, count, interval)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := c.Etcd().Delete(ctx, c.EtcdPrefix()+"/subnets/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	var after []subnet.Lease
	for {
		if after, err = c.Leases(); err == nil && sameLeases(before, after) {
			break
		}
		if time.Since(start) > convergeTimeout {
			t.Fatalf("leases %v after the wipe, want them back as they were: %v (%v)", after, before, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	back := time.Since(start)
	sent, recv, err := run.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("every lease back, same subnets and attributes, %v after the wipe; ping %s -> %s every 10 ms across it: %d sent, %d lost",
		back.Round(time.Millisecond), pods[0].Name, pods[1].Name, sent, sent-recv)
	for _, n := range nodes {
		if env, err := n.SubnetEnv(); err != nil || !leaseOf(t, c, env.Subnet.Masked()).Subnet.IsValid() {
			t.Errorf("node %s: subnet.env %+v (%v) names no lease", n.Name, env, err)
		}
	}
	pingAll(t, pods)
}

// sameLeases reports whether two listings hold the same leases (subnets and attributes).
func sameLeases(a, b []subnet.Lease) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			if x.SameSubnets(y) && x.Attrs.Equal(y.Attrs) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
