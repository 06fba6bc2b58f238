package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/internal/etcdtest"
	"github.com/weftnet/weft/linux"
	"github.com/weftnet/weft/netif"
	"github.com/weftnet/weft/status"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/etcd"
)

// fakePlane records what the daemon asks of the data plane, and holds what it was told to
// program: an incremental Update must take it from the last State exactly to the new one,
// which it checks on every Apply.
type fakePlane struct {
	mu       sync.Mutex
	have     map[string]backend.Peer
	states   []applied
	fail     error
	mac      backend.MAC
	mismatch error // the first incremental Update that did not lead to the State
	watching atomic.Int32
	caps     *backend.Capabilities // nil: the netlink plane's
	gate     *gate                 // the next Apply waits at it; nil: none does
	// gone makes the next full Apply find the overlay device missing, as after someone
	// deleted it; asked are the MACs each Prepare was asked to make the device with.
	gone  bool
	asked []backend.MAC
}

// gate holds an Apply: it closes entered once it is in the plane, then waits for release, as
// a plane whose I/O takes long (a full Apply through HNS) does.
type gate struct{ entered, release chan struct{} }

// holdNext makes the next Apply wait at a gate until release is closed.
func (p *fakePlane) holdNext() *gate {
	g := &gate{entered: make(chan struct{}), release: make(chan struct{})}
	p.mu.Lock()
	p.gate = g
	p.mu.Unlock()
	return g
}

// applied is one Apply: what the plane held after it.
type applied struct {
	peers map[string]backend.Peer
	full  bool
}

// Prepare makes the device with the MAC asked for, if any, as the netlink plane does.
func (p *fakePlane) Prepare(_ context.Context, st *backend.State) (backend.MAC, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st.Device == nil {
		return p.mac, nil
	}
	p.asked = append(p.asked, st.Device.MAC)
	if st.Device.MAC != (backend.MAC{}) {
		p.mac = st.Device.MAC
	}
	return p.mac, nil
}

func (p *fakePlane) Capabilities() backend.Capabilities {
	if p.caps != nil {
		return *p.caps
	}
	return linux.Capabilities()
}

// Apply counts a route change for every peer that changed, as a real plane writes only
// differences.
func (p *fakePlane) Apply(_ context.Context, st *backend.State, u backend.Update) (backend.Changes, error) {
	p.mu.Lock()
	g := p.gate
	p.gate = nil
	p.mu.Unlock()
	if g != nil {
		close(g.entered)
		<-g.release
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone && u.Full && st.Device != nil {
		p.gone = false
		return nil, &backend.MissingDeviceError{Name: st.Device.Name}
	}
	n := 0
	want := maps.Collect(st.Peers.All())
	if u.Full || p.have == nil {
		for k, peer := range want {
			if p.have[k] != peer {
				n++
			}
		}
		for k := range p.have {
			if _, ok := want[k]; !ok {
				n++
			}
		}
		p.have = want
	} else {
		for _, c := range u.Peers {
			if have := p.have[c.Key]; have != c.Old && p.mismatch == nil {
				p.mismatch = fmt.Errorf("update of %s: plane holds %+v, the update says %+v", c.Key, have, c.Old)
			}
			if c.New.IsValid() {
				p.have[c.Key] = c.New
			} else {
				delete(p.have, c.Key)
			}
			n++
		}
		if (!maps.Equal(p.have, want) || st.Peers.Len() != len(want)) && p.mismatch == nil {
			p.mismatch = fmt.Errorf("after an incremental update the plane holds %d peers, the State %d", len(p.have), st.Peers.Len())
		}
	}
	p.states = append(p.states, applied{peers: maps.Clone(p.have), full: u.Full})
	return backend.Changes{"route": n}, p.fail
}

// Watch takes a moment to stop, as a real one closing its subscriptions does: RunWith must
// wait for it.
func (p *fakePlane) Watch(ctx context.Context, _ func()) error {
	p.watching.Add(1)
	defer p.watching.Add(-1)
	<-ctx.Done()
	time.Sleep(50 * time.Millisecond)
	return nil
}

func (p *fakePlane) Close() error { return nil }

func (p *fakePlane) last() (applied, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.states) == 0 {
		return applied{}, 0
	}
	return p.states[len(p.states)-1], len(p.states)
}

// routes lists the subnets of the peers programmed, in address order.
func routes(st applied) []string {
	var sns []netip.Prefix
	for _, p := range st.peers {
		sns = append(sns, p.Subnet)
	}
	slices.SortFunc(sns, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	var out []string
	for _, sn := range sns {
		out = append(out, sn.String())
	}
	return out
}

type testNode struct {
	plane  *fakePlane
	cfg    Config
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

var testIfaces = []netif.Interface{
	{Name: "lo", MTU: 65536, Up: true, Prefix: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}},
	{Name: "eth0", MTU: 1500, Up: true, Prefix: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}},
}

func startNode(t *testing.T, cli *clientv3.Client, dir string, plane *fakePlane) *testNode {
	return startNodeWith(t, cli, dir, plane, func(*Config) {})
}

func startNodeWith(t *testing.T, cli *clientv3.Client, dir string, plane *fakePlane, tweak func(*Config)) *testNode {
	return startNodeOn(t, func(log *slog.Logger) subnet.Manager { return etcd.New(cli, etcd.Options{Logger: log}) }, dir, plane, tweak)
}

// startNodeOn is startNodeWith on the datastore that manager makes.
func startNodeOn(t *testing.T, manager func(*slog.Logger) subnet.Manager, dir string, plane *fakePlane, tweak func(*Config)) *testNode {
	return startNodeAs(t, manager, dir, plane, plane, tweak)
}

// startNodeAs is startNodeOn with the daemon given as its plane as, which wraps plane.
func startNodeAs(t *testing.T, manager func(*slog.Logger) subnet.Manager, dir string, plane *fakePlane, as backend.Plane, tweak func(*Config)) *testNode {
	cfg := DefaultConfig()
	cfg.SubnetFile = filepath.Join(dir, "subnet.env")
	cfg.HealthzPort = 0
	cfg.ResyncInterval = time.Second
	cfg.Ifaces = []string{"eth0"}
	tweak(&cfg)
	ctx, cancel := context.WithCancel(context.Background())
	n := &testNode{plane: plane, cfg: cfg, cancel: cancel, done: make(chan error, 1)}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	go func() {
		n.done <- RunWith(ctx, cfg, log, Deps{
			Manager:    manager(log),
			Plane:      as,
			Interfaces: func() ([]netif.Interface, error) { return testIfaces, nil },
			DefaultIf:  func() (string, error) { return "eth0", nil },
		})
	}()
	t.Cleanup(n.stop)
	t.Cleanup(func() {
		plane.mu.Lock()
		defer plane.mu.Unlock()
		if plane.mismatch != nil {
			t.Errorf("the daemon's incremental updates went wrong: %v", plane.mismatch)
		}
	})
	return n
}

// stop stops the daemon and waits for it, unless a test already took its result.
func (n *testNode) stop() {
	n.once.Do(func() {
		n.cancel()
		<-n.done
	})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func putPeer(t *testing.T, cli *clientv3.Client, key, ip, mac string) {
	v := fmt.Sprintf(`{"PublicIP":%q,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":%q}}`, ip, mac)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/subnets/"+key, v); err != nil {
		t.Fatal(err)
	}
}

// vxlanEtcd starts an etcd of the test's own holding vxlanConf, and returns a client of it.
func vxlanEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	cli := etcdtest.Start(t, etcdtest.Options{}).Client(t)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", vxlanConf); err != nil {
		t.Fatal(err)
	}
	return cli
}

// vxlanConf: the daemon draws its own subnet at random from 10.244.100.0 up, clear of the
// peers the tests put below it.
const vxlanConf = `{"Network":"10.244.0.0/16","SubnetMin":"10.244.100.0","Backend":{"Type":"vxlan"}}`

// TestDaemonFollowsLeases: subnet.env is written, peers come and go, bad peers are skipped
// without disturbing the others.
func TestDaemonFollowsLeases(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", vxlanConf); err != nil {
		t.Fatal(err)
	}
	putPeer(t, cli, "10.244.7.0-24", "192.0.2.17", "0e:00:00:00:00:07")
	dir := t.TempDir()
	plane := &fakePlane{mac: backend.MAC{0x0e, 1, 2, 3, 4, 5}}
	n := startNode(t, cli, dir, plane)

	eventually(t, "the first convergence with the peer", func() bool {
		st, _ := plane.last()
		return fmt.Sprint(routes(st)) == "[10.244.7.0/24]"
	})
	env, err := subnet.ReadEnv(n.cfg.SubnetFile)
	if err != nil {
		t.Fatal(err)
	}
	if env.MTU != 1450 || env.Network != netip.MustParsePrefix("10.244.0.0/16") || !env.Subnet.IsValid() {
		t.Errorf("subnet.env = %+v", env)
	}
	// The published lease carries the device's MAC.
	sn, _ := env.LeaseSubnets()
	resp, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/"+subnet.Key(sn, netip.Prefix{}))
	if err != nil || len(resp.Kvs) != 1 || !strings.Contains(string(resp.Kvs[0].Value), `"VtepMAC":"0e:01:02:03:04:05"`) {
		t.Fatalf("own lease in etcd: %v %s", err, resp.Kvs)
	}

	putPeer(t, cli, "10.244.8.0-24", "192.0.2.18", "0e:00:00:00:00:08")
	putPeer(t, cli, "10.244.9.0-24", "192.0.2.19", "ff:ff:ff:ff:ff:ff") // broadcast MAC: skipped
	putPeer(t, cli, "10.245.1.0-24", "192.0.2.20", "0e:00:00:00:00:20") // outside the network
	eventually(t, "the second peer", func() bool {
		st, _ := plane.last()
		return fmt.Sprint(routes(st)) == "[10.244.7.0/24 10.244.8.0/24]"
	})
	if _, err := cli.Delete(t.Context(), etcd.DefaultPrefix+"/subnets/10.244.7.0-24"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first peer gone", func() bool {
		st, _ := plane.last()
		return fmt.Sprint(routes(st)) == "[10.244.8.0/24]"
	})
}

// startConverged starts a node on an IPv4 vxlan network and waits for its first
// convergence; it returns the node, its lease's etcd key and the lease as etcd held it then.
func startConverged(t *testing.T, cli *clientv3.Client, dir string, plane *fakePlane) (*testNode, string, *clientv3.GetResponse) {
	t.Helper()
	n := startNode(t, cli, dir, plane)
	eventually(t, "the first convergence", func() bool { _, k := plane.last(); return k > 0 })
	env, err := subnet.ReadEnv(n.cfg.SubnetFile)
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := env.LeaseSubnets()
	key := etcd.DefaultPrefix + "/subnets/" + subnet.Key(sn, netip.Prefix{})
	lease, err := cli.Get(t.Context(), key)
	if err != nil || len(lease.Kvs) != 1 {
		t.Fatalf("own lease %s: %v %v", key, err, lease.Kvs)
	}
	return n, key, lease
}

// TestDaemonDeviceMadeAgainKeepsMAC: an overlay device deleted under the daemon is made
// again with the VTEP MAC its lease publishes, so that the peers reach it at once, datastore
// or not; the lease stays as it was.
func TestDaemonDeviceMadeAgainKeepsMAC(t *testing.T) {
	cli := vxlanEtcd(t)
	dir := t.TempDir()
	plane := &fakePlane{mac: backend.MAC{0x0e, 1, 2, 3, 4, 5}}
	n, key, before := startConverged(t, cli, dir, plane)
	// The plane's next random MAC would be another.
	plane.mu.Lock()
	plane.mac, plane.gone = backend.MAC{0x0e, 9, 9, 9, 9, 9}, true
	plane.mu.Unlock()
	eventually(t, "the device made again (at the next resync)", func() bool {
		plane.mu.Lock()
		defer plane.mu.Unlock()
		return !plane.gone && len(plane.asked) >= 2
	})
	plane.mu.Lock()
	asked := plane.asked[len(plane.asked)-1]
	plane.mu.Unlock()
	if want := (backend.MAC{0x0e, 1, 2, 3, 4, 5}); asked != want {
		t.Errorf("the device was made again with MAC %s; want the lease's %s", asked, want)
	}
	// Renewals would publish a changed MAC within the resync interval: give them one.
	time.Sleep(2 * n.cfg.ResyncInterval)
	after, err := cli.Get(t.Context(), key)
	if err != nil || len(after.Kvs) != 1 || string(after.Kvs[0].Value) != string(before.Kvs[0].Value) {
		t.Errorf("own lease after the device was made again: %v %s; was %s", err, after.Kvs, before.Kvs[0].Value)
	}
}

// TestDaemonRestartRemakesDeviceWithItsMAC: a device deleted while weftd was down is made
// again at the next start with the VTEP MAC the node's lease publishes, not a new one, so the
// peers reach it without learning anything (even with the datastore out of quorum); the
// lease is unchanged.
func TestDaemonRestartRemakesDeviceWithItsMAC(t *testing.T) {
	cli := vxlanEtcd(t)
	dir := t.TempDir()
	first := &fakePlane{mac: backend.MAC{0x0e, 1, 2, 3, 4, 5}}
	n, key, before := startConverged(t, cli, dir, first)
	n.stop()
	// The device is gone: the new plane would make it with another MAC of its own.
	second := &fakePlane{mac: backend.MAC{0x0e, 9, 9, 9, 9, 9}}
	startNode(t, cli, dir, second)
	eventually(t, "the convergence after the restart", func() bool { _, k := second.last(); return k > 0 })
	second.mu.Lock()
	asked := slices.Clone(second.asked)
	second.mu.Unlock()
	if want := (backend.MAC{0x0e, 1, 2, 3, 4, 5}); len(asked) == 0 || asked[0] != want {
		t.Errorf("after the restart the device was asked for MACs %v; want the lease's %s first", asked, want)
	}
	after, err := cli.Get(t.Context(), key)
	if err != nil || len(after.Kvs) != 1 || string(after.Kvs[0].Value) != string(before.Kvs[0].Value) {
		t.Errorf("own lease after the restart: %v %s; was %s", err, after.Kvs, before.Kvs[0].Value)
	}
}

// TestDaemonRestartKeepsPeers: a starting daemon never hands the data plane a state without
// the peers it already has: that would cut traffic until the watch caught up.
func TestDaemonRestartKeepsPeers(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", vxlanConf); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 20; i++ {
		putPeer(t, cli, fmt.Sprintf("10.244.%d.0-24", 20+i), fmt.Sprintf("192.0.2.%d", 100+i), fmt.Sprintf("0e:00:00:00:00:%02x", i))
	}
	dir := t.TempDir()
	first := &fakePlane{mac: backend.MAC{0x0e, 1}}
	n := startNode(t, cli, dir, first)
	eventually(t, "convergence", func() bool { st, _ := first.last(); return len(st.peers) == 20 })
	env1, _ := subnet.ReadEnv(n.cfg.SubnetFile)
	n.stop()

	second := &fakePlane{mac: backend.MAC{0x0e, 1}}
	n2 := startNode(t, cli, dir, second)
	eventually(t, "convergence after restart", func() bool { _, k := second.last(); return k > 0 })
	second.mu.Lock()
	for i, st := range second.states {
		if len(st.peers) != 20 {
			t.Errorf("reconcile %d after restart had %d routes, want all 20", i, len(st.peers))
		}
	}
	second.mu.Unlock()
	env2, _ := subnet.ReadEnv(n2.cfg.SubnetFile)
	if env1.Subnet != env2.Subnet {
		t.Errorf("subnet changed across restart: %s -> %s", env1.Subnet, env2.Subnet)
	}
}

// TestDaemonRecoversLostLease: when the own lease disappears from etcd, the daemon takes it
// back on the same subnet without restarting.
func TestDaemonRecoversLostLease(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", vxlanConf); err != nil {
		t.Fatal(err)
	}
	plane := &fakePlane{mac: backend.MAC{0x0e, 1}}
	n := startNode(t, cli, t.TempDir(), plane)
	eventually(t, "convergence", func() bool { _, k := plane.last(); return k > 0 })
	env, _ := subnet.ReadEnv(n.cfg.SubnetFile)
	sn, _ := env.LeaseSubnets()
	key := etcd.DefaultPrefix + "/subnets/" + subnet.Key(sn, netip.Prefix{})
	resp, err := cli.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the lease back in etcd", func() bool {
		r, err := cli.Get(t.Context(), key)
		return err == nil && len(r.Kvs) == 1
	})
	select {
	case err := <-n.done:
		n.once.Do(func() {})
		t.Fatalf("daemon exited: %v", err)
	default:
	}
}

// stuckRenew is an etcd datastore whose renewals hang until released, as a renewal does while
// etcd has no quorum.
type stuckRenew struct {
	*etcd.Manager
	asked   atomic.Int32
	release chan struct{}
}

func (s *stuckRenew) Renew(ctx context.Context, own subnet.Lease) (subnet.Lease, error) {
	s.asked.Add(1)
	select {
	case <-s.release:
	case <-ctx.Done():
		return subnet.Lease{}, ctx.Err()
	}
	return s.Manager.Renew(ctx, own)
}

// TestDaemonRenewalDoesNotBlockLoop: while a renewal hangs (the own lease was deleted, and
// the datastore does not answer the renewal), the daemon goes on following the leases: a peer
// added meanwhile is programmed. Once the renewal goes through, the lease is back.
func TestDaemonRenewalDoesNotBlockLoop(t *testing.T) {
	cli := vxlanEtcd(t)
	putPeer(t, cli, "10.244.7.0-24", "192.0.2.17", "0e:00:00:00:00:07")
	plane := &fakePlane{mac: backend.MAC{0x0e, 1}}
	sm := &stuckRenew{release: make(chan struct{})}
	n := startNodeOn(t, func(log *slog.Logger) subnet.Manager {
		sm.Manager = etcd.New(cli, etcd.Options{Logger: log})
		return sm
	}, t.TempDir(), plane, func(*Config) {})
	eventually(t, "convergence", func() bool { st, _ := plane.last(); return len(st.peers) == 1 })
	env, err := subnet.ReadEnv(n.cfg.SubnetFile)
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := env.LeaseSubnets()
	key := etcd.DefaultPrefix + "/subnets/" + subnet.Key(sn, netip.Prefix{})
	if _, err := cli.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a renewal of the deleted lease", func() bool { return sm.asked.Load() > 0 })
	putPeer(t, cli, "10.244.8.0-24", "192.0.2.18", "0e:00:00:00:00:08")
	eventually(t, "the peer added while the renewal hangs", func() bool {
		st, _ := plane.last()
		return fmt.Sprint(routes(st)) == "[10.244.7.0/24 10.244.8.0/24]"
	})
	close(sm.release)
	eventually(t, "the lease back in etcd", func() bool {
		r, err := cli.Get(t.Context(), key)
		return err == nil && len(r.Kvs) == 1
	})
}

// TestDaemonClonesGetLeasesOfTheirOwn: two nodes with one public IP (a VM and its clone,
// each with its own directory for subnet.env and so its own node identity) end on leases of
// their own, each published with its identity; the first, restarted, keeps its subnet.
func TestDaemonClonesGetLeasesOfTheirOwn(t *testing.T) {
	cli := vxlanEtcd(t)
	dir1, dir2 := t.TempDir(), t.TempDir()
	n1 := startNode(t, cli, dir1, &fakePlane{mac: backend.MAC{0x0e, 1}})
	eventually(t, "the first's subnet.env", func() bool { _, err := subnet.ReadEnv(n1.cfg.SubnetFile); return err == nil })
	env1, _ := subnet.ReadEnv(n1.cfg.SubnetFile)
	n2 := startNode(t, cli, dir2, &fakePlane{mac: backend.MAC{0x0e, 2}})
	owners := func() map[string]string { // lease key -> node identity
		resp, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, kv := range resp.Kvs {
			var a subnet.LeaseAttrs
			if a.UnmarshalJSON(kv.Value) == nil {
				out[path.Base(string(kv.Key))] = a.NodeID
			}
		}
		return out
	}
	id := func(dir string) string {
		b, _ := os.ReadFile(subnet.NodeIDFile(filepath.Join(dir, "subnet.env")))
		return strings.TrimSpace(string(b))
	}
	eventually(t, "a lease each", func() bool {
		env2, err := subnet.ReadEnv(n2.cfg.SubnetFile)
		if err != nil || env2.Subnet == env1.Subnet {
			return false
		}
		o := owners()
		sn1, _ := env1.LeaseSubnets()
		sn2, _ := env2.LeaseSubnets()
		return len(o) == 2 && o[subnet.Key(sn1, netip.Prefix{})] == id(dir1) && o[subnet.Key(sn2, netip.Prefix{})] == id(dir2)
	})
	n1.stop()
	n1 = startNode(t, cli, dir1, &fakePlane{mac: backend.MAC{0x0e, 1}})
	eventually(t, "the first restarted", func() bool { _, k := n1.plane.last(); return k > 0 })
	if env, err := subnet.ReadEnv(n1.cfg.SubnetFile); err != nil || env.Subnet != env1.Subnet {
		t.Errorf("the first restarted: %+v, %v; want subnet %s kept", env, err, env1.Subnet)
	}
	if o := owners(); len(o) != 2 {
		t.Errorf("leases after the restart: %v", o)
	}
}

// TestDaemonBadConfig: a config the daemon cannot use stops start-up with the key named.
func TestDaemonBadConfig(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	for conf, key := range map[string]string{
		`{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":99999999}}`: "Backend.VNI",
		`{"Network":"10.244.0.0/16","SubnetLen":12}`:                            "SubnetLen",
		`{"Network":"10.244.0.0/16","Backend":{"Type":"udp"}}`:                  "Backend.Type",
	} {
		if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", conf); err != nil {
			t.Fatal(err)
		}
		n := startNode(t, cli, t.TempDir(), &fakePlane{})
		select {
		case err := <-n.done:
			n.once.Do(func() {})
			var ce *subnet.ConfigError
			if !errors.As(err, &ce) || ce.Key != key {
				t.Errorf("%s: %v, want a config error naming %s", conf, err, key)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: daemon did not stop", conf)
		}
	}
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDaemonEndpoints: /metrics, /status and /readyz tell the truth, and /readyz fails while
// etcd is down and recovers when it is back.
func TestDaemonEndpoints(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", vxlanConf); err != nil {
		t.Fatal(err)
	}
	putPeer(t, cli, "10.244.7.0-24", "192.0.2.17", "0e:00:00:00:00:07")
	putPeer(t, cli, "10.244.9.0-24", "192.0.2.19", "ff:ff:ff:ff:ff:ff") // skipped: broadcast MAC
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	plane := &fakePlane{mac: backend.MAC{0x0e, 1}}
	// systemd's side of Type=notify: a datagram socket weftd reports to.
	sock := filepath.Join(t.TempDir(), "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	n := startNodeWith(t, srv.Client(t), t.TempDir(), plane, func(c *Config) {
		c.HealthzPort = port
		c.DatastoreTimeout = time.Second
		c.NotifySocket = sock
	})
	eventually(t, "ready", func() bool { code, _ := get(base + "/readyz"); return code == 200 })
	buf := make([]byte, 512)
	_ = notify.SetReadDeadline(time.Now().Add(10 * time.Second))
	k, err := notify.Read(buf)
	if err != nil || !strings.HasPrefix(string(buf[:k]), "READY=1\n") {
		t.Errorf("systemd notification %q, %v; want READY=1", buf[:k], err)
	}
	if code, body := get(base + "/healthz"); code != 200 {
		t.Errorf("/healthz %d %s", code, body)
	}

	// The own lease counts once the watch brings its creation, which may follow readiness.
	eventually(t, "the pool counted", func() bool {
		_, metrics := get(base + "/metrics")
		return strings.Contains(metrics, `weft_subnet_pool_free_subnets{family="IPv4"} 155`)
	})
	_, metrics := get(base + "/metrics")
	for _, want := range []string{
		`weft_peers{backend="vxlan",state="programmed"} 1`,
		`weft_peers{backend="vxlan",state="skipped"} 1`,
		`weft_peer_leases_skipped_total{reason="bad_backend_data"} 1`,
		`weft_lease_acquisitions_total{result="success"} 1`,
		`weft_dataplane_changes_total{kind="route"} 1`,
		`weft_lease_info{backend="vxlan",public_ip="192.0.2.10",subnet="10.244.`,
		// 10.244.100.0 to 10.244.255.0; the peers' subnets are below the range, the own is in it.
		`weft_subnet_pool_subnets{family="IPv4"} 156`,
		"weft_ready 1",
		`weft_subnet_pool_free_subnets{family="IPv4"} 155`,
		`weft_convergence_duration_seconds_count`,
		// Each peer's key once, the skipped one too, its delay from the batch that brought it.
		"weft_peer_programming_delay_seconds_count 2\n",
		"weft_lease_events_applied_total 2\n",
		`weft_build_info{`,
		`go_goroutines`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s\n%s", want, metrics)
		}
	}

	_, body := get(base + "/status")
	var st status.Node
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status: %v\n%s", err, body)
	}
	if !st.Ready || st.Lease == nil || st.Lease.Expiration == nil || len(st.Peers) != 2 || st.Last == nil || st.Last.Error != "" ||
		st.Peers[0].State != "programmed" || st.Peers[1].State != "skipped" || st.Peers[1].Reason == "" {
		t.Errorf("/status = %s", body)
	}

	srv.Stop(t)
	eventually(t, "/readyz failing with etcd down", func() bool {
		code, body := get(base + "/readyz")
		return code == 503 && strings.Contains(body, "datastore unreachable")
	})
	if code, _ := get(base + "/healthz"); code != 200 {
		t.Errorf("/healthz fails while only etcd is down: the daemon itself is fine")
	}
	if _, metrics := get(base + "/metrics"); !strings.Contains(metrics, "\nweft_ready 0\n") {
		t.Errorf("/metrics while not ready lacks weft_ready 0")
	}
	srv.Restart(t)
	eventually(t, "/readyz recovering", func() bool { code, _ := get(base + "/readyz"); return code == 200 })
	_ = n
}

// TestDaemonEtcdQuorumLost: a three-member etcd loses two members under a running daemon.
// The last member still takes connections, but it has no leader: /readyz says the datastore
// is unreachable, and the data plane keeps its peer. Once a member is back the daemon is
// ready again on the same subnet and follows a peer added after.
func TestDaemonEtcdQuorumLost(t *testing.T) {
	members := etcdtest.StartCluster(t, 3)
	cli := etcdtest.ClusterClient(t, members)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", vxlanConf); err != nil {
		t.Fatal(err)
	}
	putPeer(t, cli, "10.244.7.0-24", "192.0.2.17", "0e:00:00:00:00:07")
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	plane := &fakePlane{mac: backend.MAC{0x0e, 1}}
	n := startNodeWith(t, cli, t.TempDir(), plane, func(c *Config) {
		c.HealthzPort = port
		c.DatastoreTimeout = time.Second
	})
	eventually(t, "ready", func() bool { code, _ := get(base + "/readyz"); return code == http.StatusOK })
	before, err := subnet.ReadEnv(n.cfg.SubnetFile)
	if err != nil {
		t.Fatal(err)
	}

	members[0].Stop(t)
	members[1].Stop(t)
	eventually(t, "/readyz failing without a quorum", func() bool {
		code, body := get(base + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "datastore unreachable") && strings.Contains(body, "no leader")
	})
	if st, _ := plane.last(); fmt.Sprint(routes(st)) != "[10.244.7.0/24]" {
		t.Errorf("routes without a quorum: %v; want the peer's kept", routes(st))
	}

	members[1].Restart(t)
	eventually(t, "ready once the quorum is back", func() bool { code, _ := get(base + "/readyz"); return code == http.StatusOK })
	putPeer(t, cli, "10.244.8.0-24", "192.0.2.18", "0e:00:00:00:00:08")
	eventually(t, "the peer added after", func() bool {
		st, _ := plane.last()
		return fmt.Sprint(routes(st)) == "[10.244.7.0/24 10.244.8.0/24]"
	})
	if after, err := subnet.ReadEnv(n.cfg.SubnetFile); err != nil || after.Subnet != before.Subnet {
		t.Errorf("subnet.env after the quorum came back: %+v, %v; had subnet %s", after, err, before.Subnet)
	}
}

// TestDaemonReadyzFrozenEtcd: etcd stops answering (frozen, as by SIGSTOP) under a running
// daemon, whose client is made as weftd makes it: /readyz says the datastore is unreachable
// within the test's bound, though the connection stays open and the watch says nothing; it
// is ready again once etcd answers.
func TestDaemonReadyzFrozenEtcd(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	if _, err := srv.Client(t).Put(t.Context(), etcd.DefaultPrefix+"/config", vxlanConf); err != nil {
		t.Fatal(err)
	}
	proxy := srv.Proxy(t)
	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: []string{proxy.Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	plane := &fakePlane{mac: backend.MAC{0x0e, 1}}
	n := startNodeWith(t, cli, t.TempDir(), plane, func(c *Config) { c.HealthzPort = port })
	defer n.stop() // before the client closes
	eventually(t, "ready", func() bool { code, _ := get(base + "/readyz"); return code == http.StatusOK })

	proxy.Freeze()
	start := time.Now()
	eventually(t, "/readyz failing with etcd frozen", func() bool {
		code, body := get(base + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "datastore unreachable")
	})
	t.Logf("/readyz failed %v after etcd froze", time.Since(start))
	proxy.Thaw()
	eventually(t, "ready once etcd answers", func() bool { code, _ := get(base + "/readyz"); return code == http.StatusOK })
}

// TestRunWithLeavesNoGoroutines: RunWith returns only once every goroutine it started (the
// lease watch, the data plane's watch, the datastore checker, the HTTP server) has ended.
func TestRunWithLeavesNoGoroutines(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", vxlanConf); err != nil {
		t.Fatal(err)
	}
	putPeer(t, cli, "10.244.7.0-24", "192.0.2.17", "0e:00:00:00:00:07")
	// Let the client's own goroutines (connections, keepalives) start before counting.
	if _, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/config"); err != nil {
		t.Fatal(err)
	}
	before := weftGoroutines()
	plane := &fakePlane{mac: backend.MAC{0x0e, 1}}
	port := freePort(t)
	n := startNodeWith(t, cli, t.TempDir(), plane, func(c *Config) { c.HealthzPort = port })
	eventually(t, "convergence", func() bool { st, _ := plane.last(); return len(st.peers) == 1 })
	if code, _ := get(fmt.Sprintf("http://127.0.0.1:%d/status", port)); code != 200 {
		t.Errorf("/status answered %d", code)
	}
	if during := weftGoroutines(); len(during) <= len(before) {
		t.Fatalf("%d goroutines in weft's code while RunWith runs, %d before: the count sees nothing", len(during), len(before))
	}
	n.stop()
	if w := plane.watching.Load(); w != 0 {
		t.Errorf("RunWith returned with the data plane's watch still running")
	}
	if after := weftGoroutines(); len(after) > len(before) {
		t.Errorf("%d goroutines in weft's code before RunWith, %d after it returned:\n%s", len(before), len(after), strings.Join(after, "\n\n"))
	}
}

// weftGoroutines are the stacks of the goroutines running weft's code, but the test's own:
// what RunWith started and left. The etcd client's and server's own goroutines (a watch
// stream the client closes a moment later, or when it is closed) are theirs to end.
func weftGoroutines() []string {
	buf := make([]byte, 4<<20)
	var gs []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "github.com/weftnet/weft/") && !strings.Contains(g, "[running]") &&
			!strings.Contains(g, "testing.tRunner") && !strings.Contains(g, "testing.(*T).Run") {
			gs = append(gs, g)
		}
	}
	return gs
}

// TestDaemonOlderClaimWins: on a real etcd, a new lease on a lower subnet that copies a live
// peer's public IP (a cloned VM) is skipped and the live peer stays programmed; once the
// live peer's lease goes, the newcomer is programmed.
func TestDaemonOlderClaimWins(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", vxlanConf); err != nil {
		t.Fatal(err)
	}
	putPeer(t, cli, "10.244.9.0-24", "192.0.2.19", "0e:00:00:00:00:09")
	plane := &fakePlane{mac: backend.MAC{0x0e, 1}}
	port := freePort(t)
	startNodeWith(t, cli, t.TempDir(), plane, func(c *Config) { c.HealthzPort = port })
	eventually(t, "the live peer", func() bool { st, _ := plane.last(); return fmt.Sprint(routes(st)) == "[10.244.9.0/24]" })

	putPeer(t, cli, "10.244.2.0-24", "192.0.2.19", "0e:00:00:00:00:02") // the clone: lower subnet, same IP
	putPeer(t, cli, "10.244.3.0-24", "192.0.2.13", "0e:00:00:00:00:03") // an unrelated peer, to know the clone was seen
	eventually(t, "the unrelated peer", func() bool {
		st, _ := plane.last()
		return fmt.Sprint(routes(st)) == "[10.244.3.0/24 10.244.9.0/24]"
	})
	// /status shows the clone skipped, with the lease it clashes with.
	_, body := get(fmt.Sprintf("http://127.0.0.1:%d/status", port))
	var st status.Node
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status: %v\n%s", err, body)
	}
	clone := slices.IndexFunc(st.Peers, func(p status.Peer) bool { return p.Key == "10.244.2.0-24" })
	if clone < 0 || st.Peers[clone].State != "skipped" || st.Peers[clone].ClashesWith != "10.244.9.0-24" {
		t.Errorf("/status peers %+v; want 10.244.2.0-24 skipped, clashing with 10.244.9.0-24", st.Peers)
	}
	if _, err := cli.Delete(t.Context(), etcd.DefaultPrefix+"/subnets/10.244.9.0-24"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the clone programmed once the live peer left", func() bool {
		st, _ := plane.last()
		return fmt.Sprint(routes(st)) == "[10.244.2.0/24 10.244.3.0/24]"
	})
}

// TestDaemonContestedOwnLease: a lease older than the node's own that claims the node's VTEP
// MAC (the node is a clone whose device came with the image) makes the node say so: /readyz
// fails naming it and weft_own_lease_contested is 1; the node keeps its own claim. When that
// lease goes, the node is ready again. (A lease with the node's public IP is not a rival in
// etcd mode: the node takes it as its own, as flanneld does after a restart.)
func TestDaemonContestedOwnLease(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", vxlanConf); err != nil {
		t.Fatal(err)
	}
	putPeer(t, cli, "10.244.9.0-24", "192.0.2.19", "0e:01:00:00:00:00") // this node's VTEP MAC, there first
	putPeer(t, cli, "10.244.3.0-24", "192.0.2.13", "0e:00:00:00:00:03")
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	plane := &fakePlane{mac: backend.MAC{0x0e, 1}}
	startNodeWith(t, cli, t.TempDir(), plane, func(c *Config) { c.HealthzPort = port })
	eventually(t, "the contest reported", func() bool {
		code, body := get(base + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "newcomer")
	})
	if _, body := get(base + "/metrics"); !strings.Contains(body, "weft_own_lease_contested 1") {
		t.Errorf("metrics lack weft_own_lease_contested 1")
	}
	if st, _ := plane.last(); fmt.Sprint(routes(st)) != "[10.244.3.0/24]" {
		t.Errorf("programmed %v; want the unrelated peer only", routes(st))
	}
	if _, err := cli.Delete(t.Context(), etcd.DefaultPrefix+"/subnets/10.244.9.0-24"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ready once the older lease went", func() bool { code, _ := get(base + "/readyz"); return code == http.StatusOK })
	if _, body := get(base + "/metrics"); !strings.Contains(body, "weft_own_lease_contested 0") {
		t.Errorf("metrics lack weft_own_lease_contested 0")
	}
}

// macChangingPlane is a fakePlane that can give its device a new VTEP MAC
// (backend.MACChanger), as the netlink plane does; it counts the changes.
type macChangingPlane struct {
	*fakePlane
	changes atomic.Int32
	applied atomic.Int32 // Applies made before the last change
}

func (p *macChangingPlane) ChangeMAC(_ context.Context, st *backend.State) (backend.MAC, error) {
	if st.Device == nil {
		return backend.MAC{}, errors.New("no device")
	}
	n := p.changes.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.applied.Store(int32(len(p.states)))
	p.mac = backend.MAC{0x0e, 0xcc, 0, 0, 0, byte(n)}
	return p.mac, nil
}

// TestDaemonNewMACWhenContested: where the plane can give the device a new MAC, a lease older
// than the node's own that claims its VTEP MAC (the device was made again with the MAC of a
// lease someone else had written) makes the node take a new one, once, and publish it: the
// older lease is then programmed beside the others, and the node is ready. (Every node
// programs the older lease and skips the node's: keeping its claim would cut it off.)
func TestDaemonNewMACWhenContested(t *testing.T) {
	cli := vxlanEtcd(t)
	putPeer(t, cli, "10.244.9.0-24", "192.0.2.19", "0e:01:00:00:00:00") // this node's VTEP MAC, there first
	putPeer(t, cli, "10.244.3.0-24", "192.0.2.13", "0e:00:00:00:00:03")
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	plane := &macChangingPlane{fakePlane: &fakePlane{mac: backend.MAC{0x0e, 1}}}
	startNodeAs(t, func(log *slog.Logger) subnet.Manager { return etcd.New(cli, etcd.Options{Logger: log}) },
		t.TempDir(), plane.fakePlane, plane, func(c *Config) { c.HealthzPort = port })
	published := func() string {
		resp, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if strings.Contains(string(kv.Value), `"192.0.2.10"`) {
				return string(kv.Value)
			}
		}
		return ""
	}
	eventually(t, "the new MAC published", func() bool { return strings.Contains(published(), "0e:cc:00:00:00:01") })
	eventually(t, "the older lease programmed", func() bool {
		st, _ := plane.last()
		return fmt.Sprint(routes(st)) == "[10.244.3.0/24 10.244.9.0/24]"
	})
	eventually(t, "ready", func() bool { code, _ := get(base + "/readyz"); return code == http.StatusOK })
	if _, body := get(base + "/metrics"); !strings.Contains(body, "weft_own_lease_contested 0") {
		t.Errorf("metrics lack weft_own_lease_contested 0")
	}
	plane.mu.Lock()
	if i := int(plane.applied.Load()); i >= len(plane.states) || !plane.states[i].full {
		t.Errorf("the Apply after the change of MAC (of %d, the change after %d) is not a full one", len(plane.states), i)
	}
	plane.mu.Unlock()
	// A resync later, nothing contests the new MAC: it stays.
	time.Sleep(1500 * time.Millisecond)
	if n := plane.changes.Load(); n != 1 {
		t.Errorf("the MAC changed %d times; want once", n)
	}
}

// TestDaemonDatastoreWiped: etcd's leases all gone (a restore from a backup taken before
// they were made, or a wipe; the network config stays): weftd publishes its lease again at
// once, with the same subnet and VTEP MAC, subnet.env untouched; a peer that publishes its
// own again is programmed again.
func TestDaemonDatastoreWiped(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", vxlanConf); err != nil {
		t.Fatal(err)
	}
	putPeer(t, cli, "10.244.7.0-24", "192.0.2.17", "0e:00:00:00:00:07")
	plane := &fakePlane{mac: backend.MAC{0x0e, 1}}
	n := startNode(t, cli, t.TempDir(), plane)
	eventually(t, "the peer", func() bool { st, _ := plane.last(); return fmt.Sprint(routes(st)) == "[10.244.7.0/24]" })
	env, err := subnet.ReadEnv(n.cfg.SubnetFile)
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := env.LeaseSubnets()
	own := etcd.DefaultPrefix + "/subnets/" + subnet.Key(sn, netip.Prefix{})
	before, err := cli.Get(t.Context(), own)
	if err != nil || len(before.Kvs) != 1 {
		t.Fatalf("own lease %s: %v %v", own, err, before.Kvs)
	}

	start := time.Now()
	if _, err := cli.Delete(t.Context(), etcd.DefaultPrefix+"/subnets/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the own lease published again", func() bool {
		r, err := cli.Get(t.Context(), own)
		return err == nil && len(r.Kvs) == 1 && string(r.Kvs[0].Value) == string(before.Kvs[0].Value)
	})
	t.Logf("own lease %s back after %v", own, time.Since(start).Round(time.Millisecond))
	if after, err := subnet.ReadEnv(n.cfg.SubnetFile); err != nil || after != env {
		t.Errorf("subnet.env %+v (%v), was %+v", after, err, env)
	}
	putPeer(t, cli, "10.244.7.0-24", "192.0.2.17", "0e:00:00:00:00:07") // the peer publishes again
	eventually(t, "the peer again", func() bool { st, _ := plane.last(); return fmt.Sprint(routes(st)) == "[10.244.7.0/24]" })
}

// TestDaemonDatastoreRestored: etcd restored from a backup taken before the node's lease and
// its peers' were written: the store, and its revision, go back in time, and the etcd client
// follows in silence. weftd notices the revision behind the one it saw, lists again, forgets
// the peers that are gone, publishes its own lease again on the same subnet, and programs a
// peer that joins after the restore.
func TestDaemonDatastoreRestored(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", vxlanConf); err != nil {
		t.Fatal(err)
	}
	backup := srv.Backup(t)
	cfg := DefaultConfig()
	cfg.SubnetFile = filepath.Join(t.TempDir(), "subnet.env")
	cfg.HealthzPort = 0
	cfg.Ifaces = []string{"eth0"}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	plane := &fakePlane{mac: backend.MAC{0x0e, 1}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunWith(ctx, cfg, log, Deps{Manager: etcd.New(cli, etcd.Options{Logger: log, RevisionCheck: 200 * time.Millisecond}), Plane: plane,
			Interfaces: func() ([]netif.Interface, error) { return testIfaces, nil },
			DefaultIf:  func() (string, error) { return "eth0", nil }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	// Enough writes that the revision after the restore stays behind the one weftd saw.
	for i := range 20 {
		putPeer(t, cli, fmt.Sprintf("10.244.%d.0-24", 20+i), fmt.Sprintf("192.0.2.%d", 100+i), fmt.Sprintf("0e:00:00:00:01:%02x", i))
	}
	eventually(t, "the peers", func() bool { st, _ := plane.last(); return len(st.peers) == 20 })
	env, err := subnet.ReadEnv(cfg.SubnetFile)
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := env.LeaseSubnets()
	own := etcd.DefaultPrefix + "/subnets/" + subnet.Key(sn, netip.Prefix{})

	srv.RestoreBackup(t, backup)
	eventually(t, "the peers of before the restore forgotten", func() bool { st, _ := plane.last(); return len(st.peers) == 0 })
	eventually(t, "the own lease published again on the same subnet", func() bool {
		r, err := cli.Get(t.Context(), own)
		return err == nil && len(r.Kvs) == 1
	})
	putPeer(t, cli, "10.244.7.0-24", "192.0.2.17", "0e:00:00:00:00:07")
	eventually(t, "a peer that joined after the restore", func() bool {
		st, _ := plane.last()
		return fmt.Sprint(routes(st)) == "[10.244.7.0/24]"
	})
	if after, err := subnet.ReadEnv(cfg.SubnetFile); err != nil || after != env {
		t.Errorf("subnet.env %+v (%v), was %+v", after, err, env)
	}
}
