package cluster

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/subnet"
)

const testNetConf = `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`

// needRoot skips tests that make namespaces unless they can, and returns the CNI plugin
// directory, which the harness tests need too.
func needRoot(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: it creates network namespaces")
	}
	repo, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := PreparePing(repo); err != nil {
		t.Fatal(err)
	}
	cni, err := PrepareCNI(repo)
	if err != nil {
		t.Skipf("CNI plugins unavailable: %v", err)
	}
	return cni
}

// TestHarnessWithoutWeftd checks the harness itself, with the routes weftd would program made
// by hand: underlay reachability, etcd from a node, pods on one node through cni0, and pods
// on two nodes through host-gw style routes.
func TestHarnessWithoutWeftd(t *testing.T) {
	cni := needRoot(t)
	c, err := New(t, Options{NetConf: testNetConf, CNIBin: cni})
	if err != nil {
		t.Fatal(err)
	}
	n1, err := c.AddNode("n1")
	if err != nil {
		t.Fatal(err)
	}
	n2, err := c.AddNode("n2")
	if err != nil {
		t.Fatal(err)
	}
	if n1.IP != netip.MustParseAddr("192.0.2.11") || n2.IP != netip.MustParseAddr("192.0.2.12") {
		t.Fatalf("node addresses %s %s, want 192.0.2.11 192.0.2.12", n1.IP, n2.IP)
	}

	for _, to := range []netip.Addr{n2.IP, netip.MustParseAddr(UnderlayGateway)} {
		sent, recv, err := n1.Ping(to, 3, 50*time.Millisecond)
		if err != nil || sent != 3 || recv != 3 {
			t.Fatalf("underlay ping n1 -> %s: %d/%d, %v", to, recv, sent, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := dialIn(ctx, n2.NS, "tcp", UnderlayGateway+":2379")
	if err != nil {
		t.Fatalf("etcd from node n2: %v", err)
	}
	conn.Close()
	// The gateway keeps its MAC as nodes join, so what n1 resolved before n3 joined holds.
	if _, err := c.AddNode("n3"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*Node{n1, n2} {
		out, err := n.Exec("ip", "neigh", "show", UnderlayGateway, "dev", "eth0")
		if err != nil || !strings.Contains(out, "lladdr "+underlayBridgeMAC) {
			t.Errorf("node %s's neighbour entry of the gateway after n3 joined: %q %v, want lladdr %s", n.Name, out, err, underlayBridgeMAC)
		}
	}
	if out, _ := n1.Exec("cat", "/proc/sys/net/ipv4/ip_forward"); strings.TrimSpace(out) != "1" {
		t.Errorf("ip_forward in n1 = %q, want 1", out)
	}

	sn := map[*Node]netip.Prefix{
		n1: netip.MustParsePrefix("10.244.1.0/24"),
		n2: netip.MustParsePrefix("10.244.2.0/24"),
	}
	for n, p := range sn {
		env := subnet.NewEnv(netip.MustParsePrefix("10.244.0.0/16"), p, netip.Prefix{}, netip.Prefix{}, 1450, false)
		if err := n.WriteSubnetEnv(env); err != nil {
			t.Fatal(err)
		}
	}
	a, err := c.AddPod(n1, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.AddPod(n1, "b")
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.AddPod(n2, "d")
	if err != nil {
		t.Fatal(err)
	}
	if !sn[n1].Contains(a.IP) || !sn[n1].Contains(b.IP) || !sn[n2].Contains(d.IP) || a.IP == b.IP {
		t.Fatalf("pod addresses a=%s b=%s d=%s outside their node subnets", a.IP, b.IP, d.IP)
	}
	if a.Gateway != sn[n1].Addr().Next() {
		t.Errorf("pod a gateway %s, want %s", a.Gateway, sn[n1].Addr().Next())
	}
	if out, err := n1.Exec("ip", "-o", "link", "show", PodBridge); err != nil || !strings.Contains(out, "mtu 1450") {
		t.Errorf("cni0 on n1: %q %v, want mtu 1450 (FLANNEL_MTU)", out, err)
	}

	if sent, recv, err := Ping(a, b.IP, 3, 20*time.Millisecond); err != nil || recv != sent || sent != 3 {
		t.Fatalf("ping a -> b on one node: %d/%d, %v", recv, sent, err)
	}
	res, err := Stream(a, b, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stream a -> b on one node: %d bytes in %v (%.0f Mbit/s)", res.Bytes, res.Elapsed, res.Mbps())

	// Across nodes nothing routes until someone programs it: this is weftd's job, done
	// here by hand the way host-gw does it.
	if sent, recv, err := Ping(a, d.IP, 2, 20*time.Millisecond); err != nil || recv != 0 || sent != 2 {
		t.Fatalf("ping a -> d with no routes: %d/%d, %v; want 0/2", recv, sent, err)
	}
	if _, err := n1.Exec("ip", "route", "add", sn[n2].String(), "via", n2.IP.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.Exec("ip", "route", "add", sn[n1].String(), "via", n1.IP.String()); err != nil {
		t.Fatal(err)
	}
	if r, err := n1.RouteTo(sn[n2]); err != nil || !strings.Contains(r, "via 192.0.2.12") {
		t.Fatalf("RouteTo(%s) on n1 = %q, %v", sn[n2], r, err)
	}
	if r, err := n1.RouteTo(netip.MustParsePrefix("10.244.9.0/24")); err != nil || r != "" {
		t.Fatalf("RouteTo(missing) = %q, %v; want empty", r, err)
	}
	if sent, recv, err := Ping(a, d.IP, 3, 20*time.Millisecond); err != nil || recv != sent || sent != 3 {
		t.Fatalf("ping a -> d across nodes: %d/%d, %v", recv, sent, err)
	}
	if res, err = Stream(d, a, 8<<20); err != nil {
		t.Fatal(err)
	}
	t.Logf("stream d -> a across nodes: %d bytes in %v (%.0f Mbit/s)", res.Bytes, res.Elapsed, res.Mbps())

	// Leases, as weftd would write them.
	if _, err := c.Etcd().Put(ctx, DefaultEtcdPrefix+"/subnets/10.244.1.0-24",
		`{"PublicIP":"192.0.2.11","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"02:00:00:00:00:01"}}`); err != nil {
		t.Fatal(err)
	}
	leases, err := c.Leases()
	if err != nil || len(leases) != 1 || leases[0].Subnet != sn[n1] || leases[0].Attrs.PublicIP != n1.IP {
		t.Fatalf("Leases() = %v, %v", leases, err)
	}
	if err := c.DeleteLease(sn[n1]); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteLease(sn[n1]); err == nil {
		t.Fatal("DeleteLease of a missing lease: no error")
	}

	if err := a.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(netnsDir, a.NS)); !os.IsNotExist(err) {
		t.Fatalf("pod namespace %s still there after Delete: %v", a.NS, err)
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	names, err := listNetns()
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range names {
		if strings.HasPrefix(ns, c.Prefix()+"-") {
			t.Errorf("namespace %s left after Close", ns)
		}
	}
	if _, err := os.Stat(recordPath(c.Prefix())); !os.IsNotExist(err) {
		t.Errorf("registry record left after Close: %v", err)
	}
	if _, err := os.Stat(c.Dir()); !os.IsNotExist(err) {
		t.Errorf("directory %s left after a passing Close: %v", c.Dir(), err)
	}
}

// TestEtcdMembers checks a cluster whose etcd has three members, each a process of the demo
// (--serve-etcd) on its own underlay address: a node reaches each; the leader crashed, another
// is elected and writes go on; a follower crashed too, no write succeeds; both started again
// on their data, writes succeed and nothing written before is lost.
func TestEtcdMembers(t *testing.T) {
	needRoot(t)
	demo := goBuild(t, "./e2e/demo")
	c, err := New(t, Options{NetConf: testNetConf, EtcdCommand: []string{demo, "--serve-etcd"}, EtcdMembers: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{EtcdURL, "http://192.0.2.2:2379", "http://192.0.2.3:2379"}
	if got := c.EtcdEndpoints(); !slices.Equal(got, want) {
		t.Fatalf("EtcdEndpoints() = %q, want %q", got, want)
	}
	n1, err := c.AddNode("n1")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.EtcdMembers() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := dialIn(ctx, n1.NS, "tcp", strings.TrimPrefix(m.URL, "http://"))
		cancel()
		if err != nil {
			t.Fatalf("etcd member %s from node n1: %v", m.Name, err)
		}
		conn.Close()
	}

	put := func(key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := c.Etcd().Put(ctx, key, "x")
		return err
	}
	leader, err := c.EtcdLeader()
	if err != nil {
		t.Fatal(err)
	}
	if err := put("/before"); err != nil {
		t.Fatal(err)
	}
	if err := leader.Stop(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var next *EtcdMember
	for start := time.Now(); next == nil; time.Sleep(50 * time.Millisecond) {
		if next, err = c.EtcdLeader(); err != nil && time.Since(start) > etcdReadyTimeout {
			t.Fatalf("no new leader %v after %s crashed: %v", etcdReadyTimeout, leader.Name, err)
		}
	}
	if next == leader {
		t.Fatalf("%s still leads after it crashed", leader.Name)
	}
	if err := put("/one-down"); err != nil {
		t.Fatalf("write with %s down: %v", leader.Name, err)
	}
	var follower *EtcdMember
	for _, m := range c.EtcdMembers() {
		if m != leader && m != next {
			follower = m
		}
	}
	if err := follower.Stop(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := put("/no-quorum"); err == nil {
		t.Fatal("a write succeeded with two of three members down")
	}
	for _, m := range []*EtcdMember{leader, follower} {
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
	}
	if err := put("/after"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Etcd().Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	// The write without a quorum may or may not have been applied once quorum returned.
	keys = slices.DeleteFunc(keys, func(k string) bool { return k == "/no-quorum" || strings.HasPrefix(k, DefaultEtcdPrefix) })
	if want := []string{"/after", "/before", "/one-down"}; !slices.Equal(keys, want) {
		t.Errorf("keys after the restarts: %q, want %q", keys, want)
	}
}

// TestEtcdMemberIsolated: the leader cut off from the other members by Isolate still takes
// connections, but the others elect a new leader and take writes, and the cut-off member
// steps down; once the cut ends it follows the new leader and has every write.
func TestEtcdMemberIsolated(t *testing.T) {
	needRoot(t)
	demo := goBuild(t, "./e2e/demo")
	c, err := New(t, Options{NetConf: testNetConf, EtcdCommand: []string{demo, "--serve-etcd"}, EtcdMembers: 3})
	if err != nil {
		t.Fatal(err)
	}
	status := func(m *EtcdMember) (leader, id uint64, err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := c.Etcd().Status(ctx, m.URL)
		if err != nil {
			return 0, 0, err
		}
		return st.Leader, st.Header.MemberId, nil
	}
	// waitFor polls cond until it holds, or fails the test after etcdReadyTimeout.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for start := time.Now(); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Since(start) > etcdReadyTimeout {
				t.Fatalf("not %s after %v", what, etcdReadyTimeout)
			}
		}
	}
	old, err := c.EtcdLeader()
	if err != nil {
		t.Fatal(err)
	}
	_, oldID, err := status(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Isolate(true); err != nil {
		t.Fatal(err)
	}
	var next uint64
	waitFor("a new leader elected without "+old.Name, func() bool {
		for _, m := range c.EtcdMembers() {
			if l, _, err := status(m); m != old && err == nil && l != 0 && l != oldID {
				next = l
				return true
			}
		}
		return false
	})
	waitFor(old.Name+" stepped down", func() bool { l, id, err := status(old); return err == nil && l != id })
	// Through the other two: the cut-off member takes the request and cannot pass it on.
	var others []string
	for _, m := range c.EtcdMembers() {
		if m != old {
			others = append(others, m.URL)
		}
	}
	rest, err := c.newEtcdClient(others)
	if err != nil {
		t.Fatal(err)
	}
	defer rest.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rest.Put(ctx, "/while-isolated", "x"); err != nil {
		t.Fatalf("write with %s cut off: %v", old.Name, err)
	}
	if err := old.Isolate(false); err != nil {
		t.Fatal(err)
	}
	waitFor(old.Name+" following the new leader", func() bool { l, _, err := status(old); return err == nil && l == next })
	cli, err := c.newEtcdClient([]string{old.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	waitFor(old.Name+" serving the write made while it was cut off", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, "/while-isolated")
		return err == nil && len(resp.Kvs) == 1
	})
}

// TestSweep leaves a cluster behind as a killed run would (a record whose owner is gone, a
// namespace with a process in it) and an unclaimed namespace, and checks that Sweep removes
// both and nothing else.
func TestSweep(t *testing.T) {
	needRoot(t)

	// A PID that surely names no process: one that has just exited and been reaped.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	// lookalike has our shape but no underlay namespace: not ours, so it must stay.
	orphan, unclaimed, lookalike := "wfzz01", "wfzz02", "wfzz04"
	live, err := newRecord("wfzz03", t.TempDir(), false) // claimed by this live process
	if err != nil {
		t.Fatal(err)
	}
	r := record{Prefix: orphan, PID: dead.Process.Pid, Start: 1, Dir: t.TempDir()}
	for _, p := range []string{orphan, unclaimed, live.Prefix, lookalike} {
		_ = teardown(p, false) // left by an earlier run of this test that was killed
	}
	t.Cleanup(func() {
		for _, p := range []string{orphan, unclaimed, live.Prefix, lookalike} {
			_ = teardown(p, false)
		}
	})
	// The orphan's node namespace comes first, with neither a record nor an underlay
	// namespace: until the sleeper is in it, no Sweep of a test binary running beside this
	// one may take it for a stale cluster and remove it under the sleeper.
	if err := ip("netns", "add", orphan+"-n1"); err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("ip", netnsExecArgs(orphan+"-n1", "sleep", "60")...)
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()
	// Sweep kills what it finds in the namespace: the sleeper must be in it first, or ip
	// may enter it only after Sweep looked, and sleep on in a namespace nobody names.
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if pids, err := netnsPids(orphan + "-n1"); err == nil && len(pids) > 0 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the sleeper exited before it was seen in its namespace: %v", err)
		default:
		}
		if time.Since(start) > 20*time.Second {
			t.Fatal("the sleeper never entered its namespace")
		}
	}
	for _, rec := range []record{r, live} {
		if err := claimRecord(rec); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{orphan + "-ul", unclaimed + "-ul", unclaimed + "-n1",
		live.Prefix + "-n1", lookalike + "-n1"} {
		if err := ip("netns", "add", ns); err != nil {
			t.Fatal(err)
		}
	}

	removed, err := Sweep()
	if err != nil {
		t.Fatal(err)
	}
	// Only the end state is checked for the stale ones: another test binary starting a
	// cluster at the same time may have swept them first.
	for _, p := range removed {
		if p == live.Prefix || p == lookalike {
			t.Fatalf("Sweep removed %s, which is not a stale cluster", p)
		}
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the process in the stale namespace still runs after Sweep")
	}
	names, err := listNetns()
	if err != nil {
		t.Fatal(err)
	}
	left := strings.Join(names, " ")
	for _, ns := range []string{orphan + "-ul", orphan + "-n1", unclaimed + "-ul", unclaimed + "-n1"} {
		if strings.Contains(left, ns) {
			t.Errorf("namespace %s left after Sweep", ns)
		}
	}
	for _, ns := range []string{live.Prefix + "-n1", lookalike + "-n1"} {
		if !strings.Contains(left, ns) {
			t.Errorf("Sweep removed %s, which is not a stale cluster's", ns)
		}
	}
	if _, err := os.Stat(recordPath(orphan)); !os.IsNotExist(err) {
		t.Errorf("record of %s left after Sweep: %v", orphan, err)
	}
}

func TestParsePing(t *testing.T) {
	for _, tc := range []struct {
		out        string
		sent, recv int
		ok         bool
	}{
		{"PING 10.244.1.2 (10.244.1.2) 56(84) bytes of data.\n\n--- 10.244.1.2 ping statistics ---\n" +
			"500 packets transmitted, 500 received, 0% packet loss, time 7982ms\nrtt min/avg/max/mdev = 0.030/0.061/0.160/0.012 ms\n", 500, 500, true},
		{"--- 10.244.2.2 ping statistics ---\n2 packets transmitted, 0 received, 100% packet loss, time 1020ms\n", 2, 0, true},
		{"--- x ping statistics ---\n3 packets transmitted, 1 received, +2 errors, 66.6667% packet loss, time 2003ms\n", 3, 1, true},
		{"ping: connect: Network is unreachable\n", 0, 0, false},
	} {
		sent, recv, err := parsePing(tc.out)
		if (err == nil) != tc.ok || sent != tc.sent || recv != tc.recv {
			t.Errorf("parsePing(%q) = %d, %d, %v; want %d, %d, ok=%v", tc.out, sent, recv, err, tc.sent, tc.recv, tc.ok)
		}
	}
}
