package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/internal/etcdtest"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/etcd"
	"github.com/weftnet/weft/subnet/subnettest"
)

// harness runs the conformance suite on one etcd server, each Env under its own prefix.
type harness struct {
	srv *etcdtest.Server
	cli *clientv3.Client
	n   atomic.Int64
}

type env struct {
	h      *harness
	prefix string
}

func (h *harness) Env(t *testing.T, netConf string) subnettest.Env {
	e := &env{h: h, prefix: fmt.Sprintf("/conformance/%d", h.n.Add(1))}
	put(t, h.cli, e.prefix+"/config", netConf)
	return e
}

func (e *env) Node(t *testing.T, name string) subnet.Manager {
	return etcd.New(e.h.cli, etcd.Options{Prefix: e.prefix, Logger: testLogger(t)})
}

func (e *env) PutPeer(t *testing.T, name string, l subnet.Lease) {
	v, err := l.Attrs.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	put(t, e.h.cli, e.prefix+"/subnets/"+l.Key(), string(v))
}

func (e *env) DeletePeer(t *testing.T, name string, l subnet.Lease) {
	if _, err := e.h.cli.Delete(t.Context(), e.prefix+"/subnets/"+l.Key()); err != nil {
		t.Fatal(err)
	}
}

// Drop revokes the etcd lease behind the key, as its expiry would.
func (e *env) Drop(t *testing.T, l subnet.Lease) {
	resp, err := e.h.cli.Get(t.Context(), e.prefix+"/subnets/"+l.Key())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v (%d keys)", l.Key(), err, len(resp.Kvs))
	}
	if _, err := e.h.cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatalf("revoke lease of %s: %v", l.Key(), err)
	}
}

func TestConformance(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	subnettest.Run(t, &harness{srv: srv, cli: srv.Client(t)})
}

func put(t testing.TB, cli *clientv3.Client, key, val string) {
	t.Helper()
	if _, err := cli.Put(context.Background(), key, val); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

func nodeAttrs(i int) subnet.LeaseAttrs {
	return subnet.LeaseAttrs{
		PublicIP:    netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)}),
		BackendType: "host-gw",
	}
}

// TestRaceForSubnets races 300 nodes for the 256 subnets of a network: exactly 256 win,
// each on its own subnet, and 44 are told clearly that no subnet is left.
func TestRaceForSubnets(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	put(t, cli, etcd.DefaultPrefix+"/config",
		`{"Network":"10.0.0.0/16","SubnetMin":"10.0.0.0","SubnetMax":"10.0.255.0","Backend":{"Type":"host-gw"}}`)

	const nodes = 300
	var (
		wg     sync.WaitGroup
		leases [nodes]subnet.Lease
		errs   [nodes]error
		start  = make(chan struct{})
	)
	for i := range nodes {
		wg.Go(func() {
			m := etcd.New(cli, etcd.Options{})
			<-start
			leases[i], errs[i] = m.Acquire(t.Context(), subnet.AcquireRequest{Attrs: nodeAttrs(i)})
		})
	}
	close(start)
	wg.Wait()

	won := map[netip.Prefix]int{}
	var out int
	for i := range nodes {
		switch {
		case errs[i] == nil:
			if j, dup := won[leases[i].Subnet]; dup {
				t.Errorf("nodes %d and %d both got %s", i, j, leases[i].Subnet)
			}
			won[leases[i].Subnet] = i
		case errors.Is(errs[i], subnet.ErrOutOfSubnets):
			out++
		default:
			t.Errorf("node %d: unexpected error: %v", i, errs[i])
		}
	}
	if len(won) != 256 || out != 44 {
		t.Errorf("%d nodes got a subnet and %d were out of subnets, want 256 and 44", len(won), out)
	}

	// What etcd holds must say the same: 256 keys, each held by the node that was told so,
	// each bound to an etcd lease of its own (one grant per node, none left over).
	resp, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 256 {
		t.Fatalf("etcd holds %d leases, want 256", len(resp.Kvs))
	}
	etcdLeases := map[int64]bool{}
	for _, kv := range resp.Kvs {
		sn, _, err := subnet.ParseKey(filepath.Base(string(kv.Key)))
		if err != nil {
			t.Fatal(err)
		}
		var attrs subnet.LeaseAttrs
		if err := attrs.UnmarshalJSON(kv.Value); err != nil {
			t.Fatal(err)
		}
		i, ok := won[sn]
		if !ok || attrs.PublicIP != nodeAttrs(i).PublicIP {
			t.Errorf("etcd has %s for %s, but no node was told it holds it", sn, attrs.PublicIP)
		}
		if kv.Lease == 0 || etcdLeases[kv.Lease] {
			t.Errorf("key %s has etcd lease %x, shared or missing", kv.Key, kv.Lease)
		}
		etcdLeases[kv.Lease] = true
	}
	ls, err := cli.Leases(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(ls.Leases) != 256 {
		t.Errorf("etcd has %d leases granted, want 256 (one per node, unused grants revoked)", len(ls.Leases))
	}
}

// TestRestartWithSubnetEnv restarts a node with its subnet.env after its lease expired:
// it gets its old subnet back.
func TestRestartWithSubnetEnv(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	put(t, cli, etcd.DefaultPrefix+"/config", `{"Network":"10.1.0.0/16","Backend":{"Type":"host-gw"}}`)
	envPath := filepath.Join(t.TempDir(), "subnet.env")

	m := etcd.New(cli, etcd.Options{})
	cfg, err := m.GetConfig(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	first, err := m.Acquire(t.Context(), subnet.AcquireRequest{Attrs: nodeAttrs(1)})
	if err != nil {
		t.Fatal(err)
	}
	if err := subnet.WriteEnv(envPath, subnet.NewEnv(cfg.Network, first.Subnet, netip.Prefix{}, netip.Prefix{}, 1500, false)); err != nil {
		t.Fatal(err)
	}
	// The lease is gone while the node is down (expired), and other nodes joined.
	if _, err := cli.Delete(t.Context(), etcd.DefaultPrefix+"/subnets/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	// Meanwhile other nodes joined (on subnets of their own choosing, so that the test does
	// not depend on the luck of random picks).
	for i := 2; i < 40; i++ {
		want := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, byte(i), 0}), 24)
		if want == first.Subnet {
			want = netip.MustParsePrefix("10.1.200.0/24")
		}
		l, err := etcd.New(cli, etcd.Options{}).Acquire(t.Context(), subnet.AcquireRequest{Attrs: nodeAttrs(i), Previous: want})
		if err != nil || l.Subnet != want {
			t.Fatalf("node %d got %s, %v; want %s", i, l.Subnet, err, want)
		}
	}

	env, err := subnet.ReadEnv(envPath)
	if err != nil {
		t.Fatal(err)
	}
	prev, _ := env.LeaseSubnets()
	again, err := etcd.New(cli, etcd.Options{}).Acquire(t.Context(), subnet.AcquireRequest{Attrs: nodeAttrs(1), Previous: prev})
	if err != nil {
		t.Fatal(err)
	}
	if again.Subnet != first.Subnet {
		t.Errorf("after restart got %s, want the subnet of subnet.env %s", again.Subnet, first.Subnet)
	}
}

// TestPreviousSubnetTaken: a previous subnet that another node holds now is not taken over.
func TestPreviousSubnetTaken(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	put(t, cli, etcd.DefaultPrefix+"/config", `{"Network":"10.1.0.0/16","Backend":{"Type":"host-gw"}}`)
	holder, err := etcd.New(cli, etcd.Options{}).Acquire(t.Context(), subnet.AcquireRequest{Attrs: nodeAttrs(1)})
	if err != nil {
		t.Fatal(err)
	}
	other, err := etcd.New(cli, etcd.Options{}).Acquire(t.Context(), subnet.AcquireRequest{Attrs: nodeAttrs(2), Previous: holder.Subnet})
	if err != nil {
		t.Fatal(err)
	}
	if other.Subnet == holder.Subnet {
		t.Fatalf("node 2 took %s from node 1", holder.Subnet)
	}
	resp, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/"+holder.Key())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatal(err)
	}
	var attrs subnet.LeaseAttrs
	if err := attrs.UnmarshalJSON(resp.Kvs[0].Value); err != nil || attrs.PublicIP != nodeAttrs(1).PublicIP {
		t.Errorf("holder's lease now names %s (%v)", attrs.PublicIP, err)
	}
}

// TestYieldsToOverlapCreatedMeanwhile: a key of another length that overlaps the subnet an
// acquisition picked, created after the acquisition listed the leases and before it created
// its key, is the older claim: the acquisition deletes its key and picks another subnet. (It
// reads only the keys created since its listing, and must find this one among them.)
func TestYieldsToOverlapCreatedMeanwhile(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	put(t, cli, etcd.DefaultPrefix+"/config", `{"Network":"10.1.0.0/16","Backend":{"Type":"host-gw"}}`)
	for i := range 3 { // older keys, from before the listing
		putLease(t, cli, fmt.Sprintf("10.1.%d.0-24", 200+i), 10+i)
	}
	var first, inside netip.Prefix
	req := subnet.AcquireRequest{Attrs: nodeAttrs(1), Prepare: func(ctx context.Context, sn, _ netip.Prefix, _ subnet.LeaseAttrs) (subnet.LeaseAttrs, error) {
		if !first.IsValid() {
			first = sn
			inside = netip.PrefixFrom(sn.Addr().Next(), 25).Masked()
			putLease(t, cli, subnet.Key(inside, netip.Prefix{}), 2)
		}
		return nodeAttrs(1), nil
	}}
	l, err := etcd.New(cli, etcd.Options{}).Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if l.Subnet == first || l.Subnet.Overlaps(inside) {
		t.Errorf("lease on %s, where %s was created meanwhile inside %s, the subnet first picked", l.Subnet, inside, first)
	}
	resp, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, strings.TrimPrefix(string(kv.Key), etcd.DefaultPrefix+"/subnets/"))
	}
	want := []string{"10.1.200.0-24", "10.1.201.0-24", "10.1.202.0-24", subnet.Key(inside, netip.Prefix{}), l.Key()}
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("etcd holds %v, want %v: the first key deleted", keys, want)
	}
}

// TestReservation: a key without an etcd lease is an administrator's reservation: the node
// whose public IP it names uses it, and it never gets a TTL.
func TestReservation(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	put(t, cli, etcd.DefaultPrefix+"/config", `{"Network":"10.1.0.0/16","Backend":{"Type":"host-gw"}}`)
	put(t, cli, etcd.DefaultPrefix+"/subnets/10.1.77.0-24", `{"PublicIP":"192.168.0.1","BackendType":"host-gw"}`)
	m := etcd.New(cli, etcd.Options{})
	l, err := m.Acquire(t.Context(), subnet.AcquireRequest{Attrs: nodeAttrs(1)})
	if err != nil {
		t.Fatal(err)
	}
	if l.Subnet != netip.MustParsePrefix("10.1.77.0/24") || !l.Expiration.IsZero() {
		t.Fatalf("got %s expiring %v, want the reservation 10.1.77.0/24 without expiry", l.Subnet, l.Expiration)
	}
	if l, err = m.Renew(t.Context(), l); err != nil || !l.Expiration.IsZero() {
		t.Fatalf("renew: %v, expiration %v", err, l.Expiration)
	}
	if err := m.Release(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/10.1.77.0-24")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != 0 {
		t.Fatalf("reservation after release: %v %v", err, resp.Kvs)
	}
}

// TestExpiredLeaseReacquired lets the node's etcd lease run out: Renew brings it back on
// the same subnet, and the new lease is renewed without a new grant.
func TestExpiredLeaseReacquired(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	put(t, cli, etcd.DefaultPrefix+"/config", `{"Network":"10.1.0.0/16","Backend":{"Type":"host-gw"}}`)
	m := etcd.New(cli, etcd.Options{TTL: 2 * time.Second, Logger: testLogger(t)})
	l, err := m.Acquire(t.Context(), subnet.AcquireRequest{Attrs: nodeAttrs(1)})
	if err != nil {
		t.Fatal(err)
	}
	key := etcd.DefaultPrefix + "/subnets/" + l.Key()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := cli.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lease never expired")
		}
	}
	r, err := m.Renew(t.Context(), l)
	if err != nil {
		t.Fatal(err)
	}
	if r.Subnet != l.Subnet {
		t.Errorf("re-acquired %s, want %s", r.Subnet, l.Subnet)
	}
	leaseOf := func() int64 {
		resp, err := cli.Get(t.Context(), key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("get %s: %v", key, err)
		}
		return resp.Kvs[0].Lease
	}
	id := leaseOf()
	if _, err := m.Renew(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if got := leaseOf(); got != id {
		t.Errorf("renewal changed the etcd lease from %x to %x: it must keep the one lease alive", id, got)
	}
}

// TestStaleOwnLeaseUnderNewConfig: a lease the node holds from before the Network changed is
// deleted and a fitting one made.
func TestStaleOwnLeaseUnderNewConfig(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	put(t, cli, etcd.DefaultPrefix+"/config", `{"Network":"10.2.0.0/16","Backend":{"Type":"host-gw"}}`)
	put(t, cli, etcd.DefaultPrefix+"/subnets/10.1.5.0-24", `{"PublicIP":"192.168.0.1","BackendType":"host-gw"}`)
	l, err := etcd.New(cli, etcd.Options{}).Acquire(t.Context(), subnet.AcquireRequest{Attrs: nodeAttrs(1)})
	if err != nil {
		t.Fatal(err)
	}
	if !netip.MustParsePrefix("10.2.0.0/16").Contains(l.Subnet.Addr()) {
		t.Errorf("got %s, outside the new network", l.Subnet)
	}
	resp, _ := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/10.1.5.0-24")
	if len(resp.Kvs) != 0 {
		t.Errorf("stale lease still there")
	}
}

// watcher collects the state a Watch describes.
type watcher struct {
	ch    chan subnet.Batch
	state map[string]subnet.Lease
	errc  chan error
}

func watch(t *testing.T, m *etcd.Manager) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{ch: make(chan subnet.Batch, 64), state: map[string]subnet.Lease{}, errc: make(chan error, 1)}
	go func() { w.errc <- m.Watch(ctx, w.ch) }()
	t.Cleanup(func() {
		cancel()
		if err := <-w.errc; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v, want context.Canceled", err)
		}
	})
	return w
}

// wait applies batches until want is the state; it returns every event it applied.
func (w *watcher) wait(t *testing.T, want ...string) []subnet.Event {
	t.Helper()
	var all []subnet.Event
	deadline := time.After(20 * time.Second)
	for !w.is(want) {
		select {
		case b := <-w.ch:
			if b.Partial {
				t.Errorf("a partial batch; etcd's listing is sent whole")
			}
			all = append(all, b.Events...)
			for _, ev := range b.Events {
				if ev.Type == subnet.EventAdded {
					w.state[ev.Lease.Key()] = ev.Lease
				} else {
					delete(w.state, ev.Lease.Key())
				}
			}
		case <-deadline:
			t.Fatalf("watch state %v, want %v", w.keys(), want)
		}
	}
	return all
}

func (w *watcher) is(want []string) bool {
	if len(w.state) != len(want) {
		return false
	}
	for _, k := range want {
		if _, ok := w.state[k]; !ok {
			return false
		}
	}
	return true
}

func (w *watcher) keys() []string {
	var out []string
	for k := range w.state {
		out = append(out, k)
	}
	return out
}

func putLease(t *testing.T, cli *clientv3.Client, key string, i int) {
	v, _ := nodeAttrs(i).MarshalJSON()
	put(t, cli, etcd.DefaultPrefix+"/subnets/"+key, string(v))
}

// TestWatchAcrossCompaction: changes made while the watcher is cut off from etcd and then
// compacted away arrive as the difference: adds and removes, nothing lost, nothing repeated.
func TestWatchAcrossCompaction(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	putLease(t, cli, "10.1.1.0-24", 1)
	putLease(t, cli, "10.1.2.0-24", 2)
	putLease(t, cli, "10.1.3.0-24", 3)
	proxy := srv.Proxy(t)
	var relists atomic.Int32
	w := watch(t, etcd.New(proxy.Client(t, srv), etcd.Options{Logger: testLogger(t), OnRelist: func() { relists.Add(1) }}))
	w.wait(t, "10.1.1.0-24", "10.1.2.0-24", "10.1.3.0-24")

	proxy.Cut()
	if _, err := cli.Delete(t.Context(), etcd.DefaultPrefix+"/subnets/10.1.1.0-24"); err != nil {
		t.Fatal(err)
	}
	putLease(t, cli, "10.1.4.0-24", 4)
	putLease(t, cli, "10.1.3.0-24", 33) // changed attributes
	putLease(t, cli, "10.1.5.0-24", 5)
	if _, err := cli.Delete(t.Context(), etcd.DefaultPrefix+"/subnets/10.1.5.0-24"); err != nil {
		t.Fatal(err)
	}
	srv.Compact(t)
	proxy.Restore()

	evs := w.wait(t, "10.1.2.0-24", "10.1.3.0-24", "10.1.4.0-24")
	for deadline := time.Now().Add(2 * time.Second); len(evs) < 3 && time.Now().Before(deadline); {
		evs = append(evs, w.wait(t, "10.1.2.0-24", "10.1.3.0-24", "10.1.4.0-24")...)
	}
	got := map[string]subnet.EventType{}
	for _, ev := range evs {
		if _, dup := got[ev.Lease.Key()]; dup {
			t.Errorf("two events for %s", ev.Lease.Key())
		}
		got[ev.Lease.Key()] = ev.Type
	}
	want := map[string]subnet.EventType{"10.1.1.0-24": subnet.EventRemoved, "10.1.3.0-24": subnet.EventAdded, "10.1.4.0-24": subnet.EventAdded}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events after compaction %v, want %v", got, want)
	}
	if ip := w.state["10.1.3.0-24"].Attrs.PublicIP; ip != nodeAttrs(33).PublicIP {
		t.Errorf("10.1.3.0-24 is held by %s after the gap, want %s", ip, nodeAttrs(33).PublicIP)
	}
	if n := relists.Load(); n != 1 {
		t.Errorf("OnRelist called %d times, want 1", n)
	}
}

// TestWatchAcrossEtcdRestart: the watch goes on by itself after etcd restarts.
func TestWatchAcrossEtcdRestart(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	putLease(t, cli, "10.1.1.0-24", 1)
	m := etcd.New(srv.Client(t), etcd.Options{Logger: testLogger(t)})
	w := watch(t, m)
	w.wait(t, "10.1.1.0-24")
	checkEventually(t, m, "with etcd up")
	srv.Stop(t)
	checkFails(t, m, "etcd stopped")
	srv.Restart(t)
	putLease(t, cli, "10.1.2.0-24", 2)
	w.wait(t, "10.1.1.0-24", "10.1.2.0-24")
	if _, err := cli.Delete(t.Context(), etcd.DefaultPrefix+"/subnets/10.1.1.0-24"); err != nil {
		t.Fatal(err)
	}
	w.wait(t, "10.1.2.0-24")
	checkEventually(t, m, "after etcd came back")
}

// TestWatchWithoutQuorum: a three-member etcd loses two members. The client's connection
// stays up (the last member accepts it), but that member has no leader and fails the watch:
// Check says so. Once a member is back, Check is fine again and the watch delivers what
// changed meanwhile.
func TestWatchWithoutQuorum(t *testing.T) {
	members := etcdtest.StartCluster(t, 3)
	cli := etcdtest.ClusterClient(t, members)
	putLease(t, cli, "10.1.1.0-24", 1)
	m := etcd.New(cli, etcd.Options{Logger: testLogger(t)})
	w := watch(t, m)
	w.wait(t, "10.1.1.0-24")
	checkEventually(t, m, "with every member up")

	members[0].Stop(t)
	members[1].Stop(t)
	if err := checkFails(t, m, "two of three members stopped"); !errors.Is(err, rpctypes.ErrNoLeader) {
		t.Errorf("Check without a quorum: %v; want it to say etcd has no leader", err)
	}
	members[1].Restart(t)
	checkEventually(t, m, "once the quorum is back")
	putLease(t, cli, "10.1.2.0-24", 2)
	w.wait(t, "10.1.1.0-24", "10.1.2.0-24")
}

// checkEventually requires m.Check to succeed within 20 s. The connection may pass through
// "connecting" now and then (that is why the daemon only reports a datastore that stays
// unreachable), and a failed watch is tried again after a backoff: it must settle on
// healthy.
func checkEventually(t *testing.T, m *etcd.Manager, what string) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err = m.Check(); err == nil {
			return
		}
	}
	t.Fatalf("Check %s: %v", what, err)
}

// checkFails requires m.Check to fail within 10 s, and returns its error.
func checkFails(t *testing.T, m *etcd.Manager, what string) error {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := m.Check(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("Check still reports etcd reachable 10 s after %s", what)
		}
	}
}

// TestMalformedLeasesSkipped: hostile or broken values are skipped and reported once each;
// every other lease goes on, and a bad write over a good lease does not undo it.
func TestMalformedLeasesSkipped(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	putLease(t, cli, "10.1.1.0-24", 1)
	bad := map[string]string{
		"10.1.2.0-24":     `{"PublicIP":"not-an-ip"}`,
		"10.1.3.0-24":     `not json`,
		"10.1.4.0-24":     `{"PublicIP":"fd00::1"}`,
		"10.1.5.7-24":     `{"PublicIP":"192.168.0.5"}`, // host bits in the key
		"garbage":         `{"PublicIP":"192.168.0.6"}`,
		"10.1.6.0-24":     `{"PublicIP":"192.168.0.7","BackendData":{"VNI":`,
		"10.1.7.0-24&zzz": `{"PublicIP":"192.168.0.8"}`,
		"10.1.8.0-24":     `[]`,
		"10.1.9.0-24":     `{"PublicIP":"192.168.0.9","PublicIPv6":1234}`, // a bad IPv6 address string spoils only the IPv6 half: backend.TestBadIPv6Half
		"300.1.1.0-24":    `{"PublicIP":"192.168.0.10"}`,
	}
	for k, v := range bad {
		put(t, cli, etcd.DefaultPrefix+"/subnets/"+k, v)
	}
	var mu sync.Mutex
	skips := map[string]int{}
	m := etcd.New(srv.Client(t), etcd.Options{Logger: testLogger(t), OnSkip: func(key string, err error) {
		mu.Lock()
		defer mu.Unlock()
		skips[filepath.Base(key)]++
	}})
	w := watch(t, m)
	w.wait(t, "10.1.1.0-24")

	putLease(t, cli, "10.1.10.0-24", 10)
	put(t, cli, etcd.DefaultPrefix+"/subnets/10.1.1.0-24", `{"PublicIP":`) // corrupts a good one
	putLease(t, cli, "10.1.11.0-24", 11)
	w.wait(t, "10.1.1.0-24", "10.1.10.0-24", "10.1.11.0-24")
	if ip := w.state["10.1.1.0-24"].Attrs.PublicIP; ip != nodeAttrs(1).PublicIP {
		t.Errorf("corrupted lease now names %s, want the last good value %s", ip, nodeAttrs(1).PublicIP)
	}
	mu.Lock()
	defer mu.Unlock()
	for k := range bad {
		if skips[k] != 1 {
			t.Errorf("%s reported %d times, want once", k, skips[k])
		}
	}
	if skips["10.1.1.0-24"] != 1 {
		t.Errorf("corrupted lease reported %d times, want once", skips["10.1.1.0-24"])
	}
}

// TestTLSClientCertificates: the manager works against an etcd that demands client
// certificates, configured as flanneld's --etcd-cafile/certfile/keyfile are.
func TestTLSClientCertificates(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{TLS: true})
	put(t, srv.Client(t), etcd.DefaultPrefix+"/config", `{"Network":"10.1.0.0/16","Backend":{"Type":"vxlan"}}`)

	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: srv.Endpoints(), CAFile: srv.CAFile(), CertFile: srv.ClientCertFile(), KeyFile: srv.ClientKeyFile()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	l, err := etcd.New(cli, etcd.Options{}).Acquire(t.Context(), subnet.AcquireRequest{Attrs: nodeAttrs(1)})
	if err != nil {
		t.Fatalf("acquire over TLS: %v", err)
	}
	if !l.Subnet.IsValid() {
		t.Fatal("no subnet")
	}

	// Without a client certificate etcd refuses us, and the error says so rather than hanging.
	anon, err := etcd.NewClient(etcd.ClientConfig{Endpoints: srv.Endpoints(), CAFile: srv.CAFile(), DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if _, err := etcd.New(anon, etcd.Options{}).GetConfig(ctx); err == nil {
		t.Error("GetConfig without a client certificate succeeded")
	}

	if _, err := etcd.NewClient(etcd.ClientConfig{Endpoints: srv.Endpoints(), CertFile: srv.ClientCertFile()}); err == nil {
		t.Error("a cert file without a key file was accepted")
	}
}

func TestGetConfigErrors(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	m := etcd.New(cli, etcd.Options{Prefix: "/weft"})
	if _, err := m.GetConfig(t.Context()); !errors.Is(err, subnet.ErrNoConfig) {
		t.Errorf("missing config: %v, want ErrNoConfig", err)
	}
	put(t, cli, "/weft/config", `{"Network":"10.1.0.0/16","SubnetLen":33}`)
	_, err := m.GetConfig(t.Context())
	var ce *subnet.ConfigError
	if !errors.As(err, &ce) || ce.Key != "SubnetLen" {
		t.Errorf("bad config: %v, want a ConfigError naming SubnetLen", err)
	}
}

// TestUserPassword: the manager works against an etcd with authentication on, given
// flanneld's --etcd-username/--etcd-password; a wrong password is refused.
func TestUserPassword(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	admin := srv.Client(t)
	put(t, admin, etcd.DefaultPrefix+"/config", `{"Network":"10.1.0.0/16","Backend":{"Type":"host-gw"}}`)
	ctx := t.Context()
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.UserAdd(ctx, "weft", "s3cret"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "weft"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "weft", etcd.DefaultPrefix+"/", clientv3.GetPrefixRangeEnd(etcd.DefaultPrefix+"/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserGrantRole(ctx, "weft", "weft"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("setting up auth: %v", err)
		}
	}

	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: srv.Endpoints(), Username: "weft", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := etcd.New(cli, etcd.Options{}).Acquire(ctx, subnet.AcquireRequest{Attrs: nodeAttrs(1)}); err != nil {
		t.Fatalf("acquire with user and password: %v", err)
	}

	// clientv3 authenticates while connecting: a wrong password fails there or on first use.
	bad, err := etcd.NewClient(etcd.ClientConfig{Endpoints: srv.Endpoints(), Username: "weft", Password: "wrong"})
	if err == nil {
		defer bad.Close()
		_, err = etcd.New(bad, etcd.Options{}).GetConfig(ctx)
	}
	if err == nil {
		t.Error("a wrong password was accepted")
	}
}

// TestTLSRotatedOnDisk: etcd's CA, server and client certificates all replaced (a new CA), the
// client's files rewritten in place as cert-manager does (a rename over each): the same
// client, not restarted, reaches etcd again from its next connection; and a bundle made
// unreadable is an error of that connection, not a crash. Bad files at start are refused,
// naming them.
func TestTLSRotatedOnDisk(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{TLS: true})
	put(t, srv.Client(t), etcd.DefaultPrefix+"/config", `{"Network":"10.1.0.0/16","Backend":{"Type":"vxlan"}}`)
	dir := t.TempDir()
	files := map[string]string{"ca.pem": "", "client.pem": "", "client-key.pem": ""}
	install := func() {
		t.Helper()
		for name, from := range map[string]string{"ca.pem": srv.CAFile(), "client.pem": srv.ClientCertFile(), "client-key.pem": srv.ClientKeyFile()} {
			data, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			tmp := filepath.Join(dir, "."+name+".new")
			if err := os.WriteFile(tmp, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			files[name] = filepath.Join(dir, name)
		}
	}
	install()
	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: srv.Endpoints(), CAFile: files["ca.pem"], CertFile: files["client.pem"],
		KeyFile: files["client-key.pem"], DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	m := etcd.New(cli, etcd.Options{})
	getConfig := func(within time.Duration) error {
		var err error
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			_, err = m.GetConfig(ctx)
			cancel()
			if err == nil {
				return nil
			}
		}
		return err
	}
	if err := getConfig(5 * time.Second); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}

	srv.RotatePKI(t) // etcd comes back with a new CA: the old files can no longer connect
	if err := getConfig(2 * time.Second); err == nil {
		t.Fatal("the old CA and certificate still reach an etcd of a new CA: the test proves nothing")
	}
	install()
	if err := getConfig(15 * time.Second); err != nil {
		t.Fatalf("after the new files were installed: %v", err)
	}

	for _, bad := range []etcd.ClientConfig{
		{Endpoints: srv.Endpoints(), CAFile: filepath.Join(dir, "missing.pem")},
		{Endpoints: srv.Endpoints(), CAFile: files["client-key.pem"]},
		{Endpoints: srv.Endpoints(), CertFile: files["ca.pem"], KeyFile: files["client-key.pem"]},
	} {
		if _, err := etcd.NewClient(bad); err == nil {
			t.Errorf("NewClient(%+v) accepted bad files", bad)
		}
	}
}

// TestWatchHoldsRemovalsAfterRestore: etcd restored from a backup lacks the leases written
// since; the watch notices (its revision check) and lists again, but holds their removals
// back for one more check: a lease published again meanwhile (its node noticed too) is never
// removed, so its routes do not go and come back; one that is not is removed after the hold.
// The node's own lease is never held back: its node must hear at once that it is gone.
func TestWatchHoldsRemovalsAfterRestore(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	put(t, cli, etcd.DefaultPrefix+"/config", `{"Network":"10.1.0.0/16","Backend":{"Type":"host-gw"}}`)
	putLease(t, cli, "10.1.1.0-24", 1)
	backup := srv.Backup(t)
	for i := range 20 { // enough writes that the restored revision is behind the watch's
		putLease(t, cli, "10.1.2.0-24", 2+i%2)
	}
	putLease(t, cli, "10.1.3.0-24", 3)
	// The re-publication below must land within the hold, which starts when the watch sees
	// the restore. Under make test's load (the race detector, a slow disk) a write and its
	// event took more than 2 s in CI, so the hold is wide.
	const check = 5 * time.Second
	m := etcd.New(srv.Client(t), etcd.Options{Logger: testLogger(t), RevisionCheck: check})
	if _, err := m.GetConfig(t.Context()); err != nil {
		t.Fatal(err)
	}
	own, err := m.Acquire(t.Context(), subnet.AcquireRequest{Attrs: nodeAttrs(9)})
	if err != nil {
		t.Fatal(err)
	}
	w := watch(t, m)
	w.wait(t, "10.1.1.0-24", "10.1.2.0-24", "10.1.3.0-24", own.Key())

	srv.RestoreBackup(t, backup)
	restored := time.Now()
	// The own lease's removal comes at once; 10.1.2.0 and 10.1.3.0 are held.
	w.wait(t, "10.1.1.0-24", "10.1.2.0-24", "10.1.3.0-24")
	putLease(t, cli, "10.1.2.0-24", 2) // its node publishes it again within the hold
	if d := time.Since(restored); d >= check {
		t.Logf("the re-publication took until %v after the restore, near the hold's end", d.Round(time.Millisecond))
	}
	evs := w.wait(t, "10.1.1.0-24", "10.1.2.0-24")
	held := time.Since(restored)
	for _, ev := range evs {
		if ev.Type == subnet.EventRemoved && ev.Lease.Key() == "10.1.2.0-24" {
			t.Errorf("10.1.2.0-24 was removed, though published again within the hold")
		}
	}
	if held < check {
		t.Errorf("10.1.3.0-24 removed %v after the restore, before the hold (%v) ran out", held, check)
	}
	t.Logf("10.1.3.0-24 removed %v after the restore", held.Round(time.Millisecond))
}

// TestRequestsToHungEtcdFail: etcd takes the requests and answers none (frozen, or behind a
// path that drops packets). Each request of the Manager fails by its own deadline (here
// the default, DefaultRequestTimeout) rather than the caller's, so that the caller retries:
// the callers' contexts here would run for minutes.
func TestRequestsToHungEtcdFail(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	put(t, cli, etcd.DefaultPrefix+"/config", `{"Network":"10.1.0.0/16","Backend":{"Type":"host-gw"}}`)
	proxy := srv.Proxy(t)
	m := etcd.New(proxy.Client(t, srv), etcd.Options{Logger: testLogger(t)})
	own, err := m.Acquire(t.Context(), subnet.AcquireRequest{Attrs: nodeAttrs(1)})
	if err != nil {
		t.Fatal(err)
	}

	proxy.Freeze()
	defer proxy.Thaw()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	requests := map[string]func() error{
		"GetConfig": func() error { _, err := m.GetConfig(ctx); return err },
		"Acquire":   func() error { _, err := m.Acquire(ctx, subnet.AcquireRequest{Attrs: nodeAttrs(2)}); return err },
		"Renew":     func() error { _, err := m.Renew(ctx, own); return err },
		"Release":   func() error { return m.Release(ctx, own) },
	}
	var wg sync.WaitGroup
	for name, f := range requests {
		wg.Go(func() {
			err := f()
			switch {
			case err == nil:
				t.Errorf("%s succeeded with etcd frozen", name)
			case ctx.Err() != nil:
				t.Errorf("%s waited out its caller's deadline: %v", name, err)
			case !errors.Is(err, context.DeadlineExceeded):
				t.Errorf("%s: %v; want its own deadline exceeded", name, err)
			}
		})
	}
	wg.Wait()
}

// TestCloneGetsItsOwnLease: two nodes with one public IP and identities of their own (a VM
// and its clone). The clone, started second, takes over the first's lease (it cannot tell
// itself from the first rebooted), the first puts its value back at its next renewal, and the
// clone then gets a lease of its own: the two never share one. The first, restarted with its
// identity, finds its own lease among the two with its IP; a node rebooted with a new
// identity and nobody to take it back keeps the lease it takes over.
func TestCloneGetsItsOwnLease(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	put(t, cli, etcd.DefaultPrefix+"/config", `{"Network":"10.1.0.0/16","Backend":{"Type":"host-gw"}}`)
	node := func(id string) (*etcd.Manager, subnet.LeaseAttrs) {
		attrs := nodeAttrs(1)
		attrs.NodeID = id
		return etcd.New(cli, etcd.Options{Logger: testLogger(t)}), attrs
	}
	stored := func(l subnet.Lease) string {
		t.Helper()
		resp, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/"+l.Key())
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("lease %s: %v, %d keys", l.Key(), err, len(resp.Kvs))
		}
		var a subnet.LeaseAttrs
		if err := a.UnmarshalJSON(resp.Kvs[0].Value); err != nil {
			t.Fatal(err)
		}
		return a.NodeID
	}
	const first, clone = "11111111111111111111111111111111", "22222222222222222222222222222222"
	m1, a1 := node(first)
	l1, err := m1.Acquire(t.Context(), subnet.AcquireRequest{Attrs: a1})
	if err != nil {
		t.Fatal(err)
	}
	m2, a2 := node(clone)
	l2, err := m2.Acquire(t.Context(), subnet.AcquireRequest{Attrs: a2})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Key() != l1.Key() || stored(l1) != clone {
		t.Fatalf("the clone acquired %s (published by %s); want the first's %s taken over", l2.Key(), stored(l2), l1.Key())
	}
	// The first notices its lease changed (its watch) and renews: its value goes back.
	if l1, err = m1.Renew(t.Context(), l1); err != nil {
		t.Fatal(err)
	}
	if stored(l1) != first {
		t.Fatalf("the first's lease %s is published by %s after its renewal", l1.Key(), stored(l1))
	}
	// The clone notices in turn, and leaves the lease to the first.
	if l2, err = m2.Renew(t.Context(), l2); err != nil {
		t.Fatal(err)
	}
	if l2.Key() == l1.Key() || stored(l2) != clone || stored(l1) != first {
		t.Fatalf("after the clone's renewal: clone %s (by %s), first %s (by %s); want a lease each", l2.Key(), stored(l2), l1.Key(), stored(l1))
	}
	// Renewals change nothing more.
	for _, r := range []struct {
		m *etcd.Manager
		l subnet.Lease
	}{{m1, l1}, {m2, l2}, {m1, l1}} {
		if got, err := r.m.Renew(t.Context(), r.l); err != nil || got.Key() != r.l.Key() {
			t.Errorf("renewal of %s: %s, %v", r.l.Key(), got.Key(), err)
		}
	}
	if stored(l1) != first || stored(l2) != clone {
		t.Errorf("after more renewals: %s by %s, %s by %s", l1.Key(), stored(l1), l2.Key(), stored(l2))
	}

	// The first restarts with its identity: of the two leases with its IP, its own.
	m3, a3 := node(first)
	if l, err := m3.Acquire(t.Context(), subnet.AcquireRequest{Attrs: a3}); err != nil || l.Key() != l1.Key() {
		t.Errorf("the first restarted acquired %s, %v; want its own %s", l.Key(), err, l1.Key())
	}
	// A node rebooted (a new identity, /run lost) while its lease stands, nobody to take it back.
	if err := m2.Release(t.Context(), l2); err != nil { // the clone is gone
		t.Fatal(err)
	}
	m4, a4 := node("33333333333333333333333333333333")
	l4, err := m4.Acquire(t.Context(), subnet.AcquireRequest{Attrs: a4})
	if err != nil || l4.Key() != l1.Key() {
		t.Fatalf("the first rebooted acquired %s, %v; want its lease %s", l4.Key(), err, l1.Key())
	}
	if l, err := m4.Renew(t.Context(), l4); err != nil || l.Key() != l1.Key() || stored(l1) != a4.NodeID {
		t.Errorf("the rebooted node's renewal: %s, %v (published by %s); want it to keep %s", l.Key(), err, stored(l1), l1.Key())
	}
}
