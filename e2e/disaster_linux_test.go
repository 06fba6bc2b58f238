package e2e

import (
	"context"
	"strings"
	"syscall"
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

// TestNodeCutOffFromDatastore: node n1's path to etcd dropped (a blackhole route to etcd's
// address in its namespace; its path to the other nodes stays): pods keep reaching n1's pod
// without a lost packet, n1's /readyz says the datastore is unreachable; meanwhile n3 leaves
// and n4 joins. When the path returns, n1 catches up without a restart: it forgets n3, routes
// to n4, and is ready again.
func TestNodeCutOffFromDatastore(t *testing.T) {
	bins := needBinaries(t)
	b := backends()[0]
	c, err := cluster.New(t, cluster.Options{NetConf: b.netConf, Weftd: bins.weftd, CNIBin: bins.cniBin, WeftCNI: bins.weftCNI,
		WeftdArgs: []string{"--datastore-timeout=2s"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpCluster(t, c)
		}
	})
	nodes := startNodes(t, c, "n1", "n2", "n3")
	pods := onePodEach(t, c, nodes)
	pingAll(t, pods)
	n1, gone := nodes[0], nodes[2]
	goneSubnet := mustSubnet(t, gone)

	cut := []string{"ip", "route", "add", "blackhole", cluster.UnderlayGateway + "/32"}
	nodeExec(t, n1, cut...)
	start := time.Now()
	// Traffic to the cut-off node's pod flows on: its data plane stays as it was.
	sent, recv, err := cluster.Ping(pods[1], pods[0].IP, 500, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ping %s -> %s every 10 ms while n1 is cut off: %d sent, %d lost", pods[1].Name, pods[0].Name, sent, sent-recv)
	if recv != sent {
		t.Errorf("%d of %d pings to the cut-off node's pod lost", sent-recv, sent)
	}
	// etcd's keepalive notices the dead path within 15 s, then --datastore-timeout (2 s).
	why := waitReadyz(t, n1, 503, 30*time.Second)
	if !strings.Contains(why, "datastore unreachable") {
		t.Errorf("n1's /readyz while cut off: %q; want it to say the datastore is unreachable", why)
	}
	t.Logf("n1 not ready after %v: %s", time.Since(start).Round(time.Millisecond), why)

	// The cluster moves on without n1 hearing of it.
	if _, err := gone.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteLease(goneSubnet); err != nil {
		t.Fatal(err)
	}
	late := startNodes(t, c, "n4")[0]
	lp := addPod(t, c, late, "p4")
	lateSubnet := mustSubnet(t, late)
	if d := peerState(t, n1, lateSubnet, ""); d.route != "" {
		t.Fatalf("n1 learnt of n4 while cut off from etcd: %v", d)
	}

	nodeExec(t, n1, "ip", "route", "del", "blackhole", cluster.UnderlayGateway+"/32")
	healed := time.Now()
	waitReadyz(t, n1, 200, 30*time.Second)
	for {
		if peerState(t, n1, lateSubnet, "").route != "" && peerState(t, n1, goneSubnet, "").route == "" {
			break
		}
		if time.Since(healed) > 30*time.Second {
			t.Fatalf("n1 has not caught up 30 s after the path returned: route to n4 %q, to the departed n3 %q",
				peerState(t, n1, lateSubnet, "").route, peerState(t, n1, goneSubnet, "").route)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("n1 caught up (n4 routed, n3 forgotten) %v after the path returned, cut off for %v",
		time.Since(healed).Round(time.Millisecond), healed.Sub(start).Round(time.Millisecond))
	waitReachable(t, pods[0], lp, convergeTimeout)
	waitReachable(t, lp, pods[0], convergeTimeout)
}
