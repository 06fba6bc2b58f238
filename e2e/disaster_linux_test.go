package e2e

import (
	"context"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
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
	c := newClusterWith(t, needBinaries(t), backends()[0], cluster.Options{WeftdArgs: []string{"--datastore-timeout=2s"}})
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

// TestEtcdMemberLoss: a three-member etcd under a three-node vxlan cluster, a pod on each
// node, a pod pinging another across nodes every 10 ms throughout.
//
// Phase 1: the etcd leader crashes; another is elected; while the crashed one is down n3
// leaves (SIGTERM, its lease deleted) and n4 joins, and every weftd follows: n1 and n2 route
// to n4 and no longer to n3, n4 to n1 and n2, and pods reach n4's pod.
//
// Phase 2: a follower crashes too: no quorum, the last member cannot serve. Pod traffic flows
// on without a lost packet, every weftd says on /readyz that the datastore is unreachable,
// and keeps its subnet.
//
// Phase 3: both crashed members start again on their data: quorum is back, every weftd is
// ready again with the lease it had (no node got a new subnet), and a node added after (n5)
// is programmed everywhere.
//
// Packets lost per phase, the time each fault took to settle, and the leases before and after
// are logged.
func TestEtcdMemberLoss(t *testing.T) {
	bins := needBinaries(t)
	c := newClusterWith(t, bins, backends()[0], cluster.Options{WeftdArgs: []string{"--datastore-timeout=2s"},
		EtcdCommand: buildTools(t).etcdCommand(), EtcdMembers: 3})
	nodes := startNodes(t, c, "n1", "n2", "n3")
	pods := onePodEach(t, c, nodes)
	pingAll(t, pods)
	n1, n2, gone := nodes[0], nodes[1], nodes[2]
	p1, p2 := pods[0], pods[1]
	goneSubnet := mustSubnet(t, gone)
	leases, err := c.Leases()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leases before: %v", leases)

	leader, err := c.EtcdLeader()
	if err != nil {
		t.Fatal(err)
	}
	var late *cluster.Node
	var p4 *cluster.Pod
	watchPings(t, "phase 1: the etcd leader crashed, n3 left, n4 joined", p1, p2, func() {
		start := time.Now()
		if err := leader.Stop(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		next := waitEtcdLeader(t, c, leader)
		t.Logf("phase 1: etcd leader %s crashed; %s elected %v later", leader.Name, next.Name, time.Since(start).Round(time.Millisecond))

		if _, err := gone.Stop(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteLease(goneSubnet); err != nil {
			t.Fatal(err)
		}
		joined := time.Now()
		late = startNodes(t, c, "n4")[0]
		p4 = addPod(t, c, late, "p4")
		ready := time.Since(joined)
		took := waitRoutes(t, []*cluster.Node{n1, n2}, []netip.Prefix{mustSubnet(t, late)}, []netip.Prefix{goneSubnet}, convergeTimeout)
		waitRoutes(t, []*cluster.Node{late}, []netip.Prefix{mustSubnet(t, n1), mustSubnet(t, n2)}, []netip.Prefix{goneSubnet}, convergeTimeout)
		t.Logf("phase 1: n3 gone and n4 joined with %s down: n4 ready after %v; n1 and n2 route to n4 and forget n3 %v after n4 was ready",
			leader.Name, ready.Round(time.Millisecond), took.Round(time.Millisecond))
	})
	waitReachable(t, p1, p4, convergeTimeout)
	waitReachable(t, p2, p4, convergeTimeout)
	waitReachable(t, p4, p1, convergeTimeout)
	alive := []*cluster.Node{n1, n2, late}
	for _, n := range alive {
		waitReadyz(t, n, http.StatusOK, readyTimeout)
	}
	before, err := c.Leases()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leases after phase 1: %v", before)
	subnets := map[*cluster.Node]netip.Prefix{}
	for _, n := range alive {
		subnets[n] = mustSubnet(t, n)
	}

	next, err := c.EtcdLeader()
	if err != nil {
		t.Fatal(err)
	}
	var follower *cluster.EtcdMember
	for _, m := range c.EtcdMembers() {
		if m.Running() && m != next {
			follower = m
		}
	}
	watchPings(t, "phase 2: an etcd follower crashed too, no quorum", p4, p1, func() {
		start := time.Now()
		if err := follower.Stop(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for _, n := range alive {
			why := waitReadyz(t, n, http.StatusServiceUnavailable, 60*time.Second)
			if !strings.Contains(why, "datastore unreachable") {
				t.Errorf("%s's /readyz without an etcd quorum: %q; want it to say the datastore is unreachable", n.Name, why)
			}
			t.Logf("phase 2: %s not ready %v after %s crashed (%s and %s down): %s", n.Name,
				time.Since(start).Round(time.Millisecond), follower.Name, leader.Name, follower.Name, why)
		}
		time.Sleep(2 * time.Second) // a while without a quorum
		for _, n := range alive {
			if sn := mustSubnet(t, n); sn != subnets[n] || !n.Running() {
				t.Errorf("%s without an etcd quorum: subnet %s (had %s), weftd running: %v", n.Name, sn, subnets[n], n.Running())
			}
		}
	})

	var p5 *cluster.Pod
	watchPings(t, "phase 3: both crashed etcd members started again, n5 joined", p2, p4, func() {
		start := time.Now()
		for _, m := range []*cluster.EtcdMember{leader, follower} {
			if err := m.Start(); err != nil {
				t.Fatal(err)
			}
		}
		quorum := time.Since(start)
		for _, n := range alive {
			waitReadyz(t, n, http.StatusOK, 60*time.Second)
		}
		t.Logf("phase 3: %s and %s started again: quorum after %v, n1, n2 and n4 ready after %v",
			leader.Name, follower.Name, quorum.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		after, err := c.Leases()
		if err != nil {
			t.Fatal(err)
		}
		if !sameLeases(before, after) {
			t.Errorf("leases after the quorum came back: %v; want them as they were: %v", after, before)
		}
		for _, n := range alive {
			if sn := mustSubnet(t, n); sn != subnets[n] {
				t.Errorf("%s's subnet after the quorum came back: %s, had %s", n.Name, sn, subnets[n])
			}
		}

		joined := time.Now()
		n5 := startNodes(t, c, "n5")[0]
		p5 = addPod(t, c, n5, "p5")
		took := waitRoutes(t, alive, []netip.Prefix{mustSubnet(t, n5)}, nil, convergeTimeout)
		t.Logf("phase 3: n5 joined: ready after %v; n1, n2 and n4 route to it %v after",
			time.Since(joined).Round(time.Millisecond), took.Round(time.Millisecond))
	})
	waitReachable(t, p1, p5, convergeTimeout)
	waitReachable(t, p5, p4, convergeTimeout)
	final, err := c.Leases()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leases after: %v", final)
}

// waitEtcdLeader waits until a member other than crashed leads the cluster's etcd, and
// returns it.
func waitEtcdLeader(t *testing.T, c *cluster.Cluster, crashed *cluster.EtcdMember) *cluster.EtcdMember {
	t.Helper()
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		m, err := c.EtcdLeader()
		if err == nil && m != crashed {
			return m
		}
		if time.Since(start) > readyTimeout {
			t.Fatalf("no etcd leader %v after %s crashed: %v", readyTimeout, crashed.Name, err)
		}
	}
}

// TestDatastoreRestoredFromBackup: etcd is restored from a backup taken before n4 joined
// and n3 left, while pods ping across the nodes: the store forgets n4's lease and brings
// back n3's, and its revision goes back. Within weftd's revision check (30 s) every weftd
// notices and lists the leases again, holding back for one more check the removal of leases
// the backup lacks; n4 publishes its lease again on the same subnet meanwhile, so no node
// drops its routes. No pod loses a packet; the leases before and after are logged. (n3's
// lease, back from the backup, stays until it expires, as with flanneld.)
func TestDatastoreRestoredFromBackup(t *testing.T) {
	bins := needBinaries(t)
	c := newClusterWith(t, bins, backends()[0], cluster.Options{EtcdCommand: buildTools(t).etcdCommand()})
	nodes := startNodes(t, c, "n1", "n2", "n3")
	pods := onePodEach(t, c, nodes)
	pingAll(t, pods)
	member := c.EtcdMembers()[0]
	backup := filepath.Join(t.TempDir(), "backup")
	if err := member.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(backup, os.DirFS(filepath.Join(member.Dir, "data"))); err != nil {
		t.Fatal(err)
	}
	if err := member.Start(); err != nil {
		t.Fatal(err)
	}
	before, err := c.Leases()
	if err != nil {
		t.Fatal(err)
	}

	// Since the backup: n3 leaves, n4 joins.
	gone := nodes[2]
	goneSubnet := mustSubnet(t, gone)
	if _, err := gone.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteLease(goneSubnet); err != nil {
		t.Fatal(err)
	}
	late := startNodes(t, c, "n4")[0]
	p4 := addPod(t, c, late, "p4")
	lateSubnet := mustSubnet(t, late)
	lateLease := leaseOf(t, c, lateSubnet)
	waitRoutes(t, []*cluster.Node{nodes[0], nodes[1]}, []netip.Prefix{lateSubnet}, []netip.Prefix{goneSubnet}, convergeTimeout)
	waitReachable(t, pods[0], p4, convergeTimeout)

	// p1 -> p2: both nodes' leases are in the backup. p4 -> p1: n4's lease is missing from
	// the restored store until n4 publishes it again; the other nodes hold its removal back
	// for a revision check meanwhile, so its routes stay. Neither loses a packet.
	churn, err := cluster.StartPing(p4, pods[0].IP, 6000, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	watchPings(t, "etcd restored from the backup", pods[0], pods[1], func() {
		if err := member.Stop(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		data := filepath.Join(member.Dir, "data")
		if err := os.RemoveAll(data); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(data, os.DirFS(backup)); err != nil {
			t.Fatal(err)
		}
		if err := member.Start(); err != nil {
			t.Fatal(err)
		}
		restored := time.Now()
		restoredLeases, err := c.Leases()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("leases before the backup's restore: %v; as restored: %v", before, restoredLeases)
		// n4 publishes its lease again, on the same subnet, with the same attributes.
		for {
			if l := findLease(c, lateSubnet); l.Subnet.IsValid() && l.Attrs.Equal(lateLease.Attrs) {
				break
			}
			if time.Since(restored) > 90*time.Second {
				t.Fatalf("n4's lease %s not back 90 s after the restore", lateSubnet)
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("n4's lease back on %s %v after the restore", lateSubnet, time.Since(restored).Round(time.Millisecond))
		took := waitRoutes(t, []*cluster.Node{nodes[0], nodes[1]}, []netip.Prefix{lateSubnet}, nil, convergeTimeout)
		t.Logf("n1 and n2 route to n4 %v later", took.Round(time.Millisecond))
	})
	churn.Interrupt()
	sent, recv, err := churn.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ping p4 (n4) -> p1 every 10 ms across the restore: %d sent, %d lost", sent, sent-recv)
	if recv != sent {
		t.Errorf("%d of %d pings from n4's pod lost across the restore", sent-recv, sent)
	}
	after, err := c.Leases()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leases after: %v", after)
	for _, n := range []*cluster.Node{nodes[0], nodes[1], late} {
		if env, err := n.SubnetEnv(); err != nil || !findLease(c, env.Subnet.Masked()).Subnet.IsValid() {
			t.Errorf("node %s: subnet.env %+v (%v) names no lease after the restore", n.Name, env, err)
		}
	}
	waitReachable(t, pods[1], p4, convergeTimeout)
}

// findLease is the lease of an IPv4 subnet in etcd, or the zero Lease.
func findLease(c *cluster.Cluster, sn netip.Prefix) subnet.Lease {
	leases, err := c.Leases()
	if err != nil {
		return subnet.Lease{}
	}
	for _, l := range leases {
		if l.Subnet == sn {
			return l
		}
	}
	return subnet.Lease{}
}
