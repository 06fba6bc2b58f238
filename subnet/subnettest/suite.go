// Package subnettest is the conformance suite of subnet.Manager: the behaviour every
// datastore must show, run by each implementation's tests against a real server.
package subnettest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/weftnet/weft/subnet"
)

// NetConf is the network config the suite runs under: a /16 with /24 subnets.
const NetConf = `{"Network":"10.42.0.0/16","SubnetLen":24,"Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}`

// Harness gives the suite datastores to run against.
type Harness interface {
	// Env sets up a datastore of its own, holding netConf as the network config.
	Env(t *testing.T, netConf string) Env
}

// Env is one datastore seen by the suite.
type Env interface {
	// Node returns a new Manager for the node called name, as a freshly started daemon
	// would make it; called again for the same name it is that node restarting.
	Node(t *testing.T, name string) subnet.Manager
	// PutPeer publishes l as the lease of another node called name, as that node would.
	PutPeer(t *testing.T, name string, l subnet.Lease)
	// DeletePeer removes the lease of the node called name.
	DeletePeer(t *testing.T, name string, l subnet.Lease)
	// Drop makes the datastore lose l behind its holder's back (expired, revoked, deleted).
	Drop(t *testing.T, l subnet.Lease)
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	t.Run("Config", func(t *testing.T) { testConfig(t, h) })
	t.Run("AcquireIsStable", func(t *testing.T) { testAcquireIsStable(t, h) })
	t.Run("NodesGetDistinctSubnets", func(t *testing.T) { testDistinct(t, h) })
	t.Run("WatchSnapshotAndChanges", func(t *testing.T) { testWatch(t, h) })
	t.Run("RenewKeepsLease", func(t *testing.T) { testRenew(t, h) })
	t.Run("RenewAfterLoss", func(t *testing.T) { testRenewAfterLoss(t, h) })
	t.Run("Release", func(t *testing.T) { testRelease(t, h) })
	t.Run("Prepare", func(t *testing.T) { testPrepare(t, h) })
}

// NodeIP is the public IP the suite gives the node called name.
func NodeIP(name string) netip.Addr {
	var h byte
	for _, c := range name {
		h = h*31 + byte(c)
	}
	return netip.AddrFrom4([4]byte{192, 0, 2, h%250 + 2})
}

// Attrs are the attributes a vxlan node called name publishes.
func Attrs(name string) subnet.LeaseAttrs {
	ip := NodeIP(name)
	mac := fmt.Sprintf("0e:2a:c0:00:02:%02x", ip.As4()[3])
	return subnet.LeaseAttrs{
		PublicIP:    ip,
		BackendType: subnet.BackendVXLAN,
		BackendData: []byte(`{"VNI":4096,"VtepMAC":"` + mac + `"}`),
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func acquire(t *testing.T, m subnet.Manager, name string) subnet.Lease {
	t.Helper()
	l, err := m.Acquire(ctx(t), subnet.AcquireRequest{Attrs: Attrs(name)})
	if err != nil {
		t.Fatalf("acquire for %s: %v", name, err)
	}
	return l
}

func testConfig(t *testing.T, h Harness) {
	env := h.Env(t, NetConf)
	cfg, err := env.Node(t, "a").GetConfig(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Network != netip.MustParsePrefix("10.42.0.0/16") || cfg.SubnetLen != 24 || cfg.Backend.VNI == nil || *cfg.Backend.VNI != 4096 {
		t.Errorf("config = %+v, want Network 10.42.0.0/16, SubnetLen 24, VNI 4096", cfg)
	}
}

func testAcquireIsStable(t *testing.T, h Harness) {
	env := h.Env(t, NetConf)
	l := acquire(t, env.Node(t, "a"), "a")
	cfg, _ := subnet.ParseConfig([]byte(NetConf))
	if !cfg.Compatible(l.Subnet, l.IPv6Subnet) {
		t.Fatalf("lease %s does not fit the config", l)
	}
	if !l.Attrs.Equal(Attrs("a")) {
		t.Errorf("lease attrs = %+v, want %+v", l.Attrs, Attrs("a"))
	}
	// A restarted daemon (new Manager, same node) gets the same subnet back.
	again := acquire(t, env.Node(t, "a"), "a")
	if !again.SameSubnets(l) {
		t.Errorf("after restart got %s, want %s", again.Key(), l.Key())
	}
	// So does one that publishes new attributes (a new VTEP MAC), and they are stored.
	attrs := Attrs("a")
	attrs.BackendData = []byte(`{"VNI":4096,"VtepMAC":"0e:2a:00:00:00:99"}`)
	changed, err := env.Node(t, "a").Acquire(ctx(t), subnet.AcquireRequest{Attrs: attrs})
	if err != nil {
		t.Fatal(err)
	}
	if !changed.SameSubnets(l) {
		t.Errorf("with new attrs got %s, want %s", changed.Key(), l.Key())
	}
	snap := snapshot(t, env.Node(t, "observer"))
	if got, ok := snap[l.Key()]; !ok || !got.Attrs.Equal(attrs) {
		t.Errorf("datastore holds %+v for %s, want %+v", got.Attrs, l.Key(), attrs)
	}
}

func testDistinct(t *testing.T, h Harness) {
	env := h.Env(t, NetConf)
	seen := map[netip.Prefix]string{}
	for _, n := range []string{"a", "b", "c", "d"} {
		l := acquire(t, env.Node(t, n), n)
		if other, dup := seen[l.Subnet]; dup {
			t.Errorf("%s and %s both got %s", n, other, l.Subnet)
		}
		seen[l.Subnet] = n
	}
}

// snapshot returns the first batch of a new watch, by key.
func snapshot(t *testing.T, m subnet.Manager) map[string]subnet.Lease {
	t.Helper()
	w := startWatch(t, m)
	return w.next(t, "the first batch")
}

type watch struct {
	ch    chan subnet.Batch
	whole bool // the first whole batch came
	state map[string]subnet.Lease
}

func startWatch(t *testing.T, m subnet.Manager) *watch {
	c, cancel := context.WithCancel(t.Context())
	w := &watch{ch: make(chan subnet.Batch, 16), state: map[string]subnet.Lease{}}
	done := make(chan error, 1)
	go func() { done <- m.Watch(c, w.ch) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Watch did not return after its context was cancelled")
		}
	})
	return w
}

// next applies one whole batch to the watch's state, and the partial ones before it, and
// returns the state.
func (w *watch) next(t *testing.T, what string) map[string]subnet.Lease {
	t.Helper()
	for {
		b, ok := w.take(t, what)
		if !ok || !b.Partial {
			return w.state
		}
	}
}

// take applies one batch to the watch's state.
func (w *watch) take(t *testing.T, what string) (subnet.Batch, bool) {
	t.Helper()
	select {
	case b := <-w.ch:
		if b.Partial && w.whole {
			t.Errorf("a partial batch after the first whole one")
		}
		w.whole = w.whole || !b.Partial
		for _, ev := range b.Events {
			switch ev.Type {
			case subnet.EventAdded:
				w.state[ev.Lease.Key()] = ev.Lease
			case subnet.EventRemoved:
				if _, ok := w.state[ev.Lease.Key()]; !ok {
					t.Errorf("removal of %s, which was never added", ev.Lease.Key())
				}
				delete(w.state, ev.Lease.Key())
			}
		}
		return b, true
	case <-time.After(20 * time.Second):
		t.Fatalf("no watch batch for %s", what)
		return subnet.Batch{}, false
	}
}

// until applies batches until cond holds.
func (w *watch) until(t *testing.T, what string, cond func(map[string]subnet.Lease) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond(w.state) {
		if time.Now().After(deadline) {
			t.Fatalf("watch never showed %s; state %v", what, keys(w.state))
		}
		w.next(t, what)
	}
}

// otherSubnets returns two subnets of the suite's network for peers put after a node
// acquired own: neither is own, nor the early peer's 10.42.199.0/24.
func otherSubnets(own netip.Prefix) (netip.Prefix, netip.Prefix) {
	var out []netip.Prefix
	for _, s := range []string{"10.42.200.0/24", "10.42.201.0/24", "10.42.202.0/24"} {
		if p := netip.MustParsePrefix(s); p != own {
			out = append(out, p)
		}
	}
	return out[0], out[1]
}

func keys(m map[string]subnet.Lease) []string {
	var out []string
	for k, l := range m {
		out = append(out, k+"="+l.Attrs.PublicIP.String())
	}
	return out
}

func testWatch(t *testing.T, h Harness) {
	env := h.Env(t, NetConf)
	a := env.Node(t, "a")
	early := subnet.Lease{Subnet: netip.MustParsePrefix("10.42.199.0/24"), Attrs: Attrs("e")}
	env.PutPeer(t, "e", early)
	own := acquire(t, a, "a")
	// The node's subnet is drawn at random: the peers put after it take others.
	peerNet, lateNet := otherSubnets(own.Subnet)
	peer := subnet.Lease{Subnet: peerNet, Attrs: Attrs("p")}
	env.PutPeer(t, "p", peer)

	// The first batch is every lease as of one revision at or after the node's acquisition
	// (a manager may start from the listing its Acquire made): the own lease and every peer
	// there was then; what changed since follows.
	w := startWatch(t, a)
	first := w.next(t, "the first batch")
	if !first[own.Key()].Attrs.Equal(own.Attrs) || !first[early.Key()].Attrs.Equal(early.Attrs) || len(first) > 3 {
		t.Fatalf("first batch = %v, want own lease %s and peer %s (and perhaps %s)", keys(first), own.Key(), early.Key(), peer.Key())
	}
	w.until(t, "the peer put after the acquisition", func(s map[string]subnet.Lease) bool { return s[peer.Key()].Attrs.Equal(peer.Attrs) })

	late := subnet.Lease{Subnet: lateNet, Attrs: Attrs("q")}
	env.PutPeer(t, "q", late)
	w.until(t, "the late peer", func(s map[string]subnet.Lease) bool { return s[late.Key()].Attrs.Equal(late.Attrs) })

	// A peer that restarts with a new VTEP MAC is an update of its lease.
	moved := late
	moved.Attrs.BackendData = []byte(`{"VNI":4096,"VtepMAC":"0e:2a:00:00:00:42"}`)
	env.PutPeer(t, "q", moved)
	w.until(t, "the peer's new attributes", func(s map[string]subnet.Lease) bool { return s[late.Key()].Attrs.Equal(moved.Attrs) })

	env.DeletePeer(t, "p", peer)
	w.until(t, "the peer gone", func(s map[string]subnet.Lease) bool { _, ok := s[peer.Key()]; return !ok })
	if _, ok := w.state[own.Key()]; !ok {
		t.Errorf("own lease disappeared from the watch")
	}
}

func testRenew(t *testing.T, h Harness) {
	env := h.Env(t, NetConf)
	m := env.Node(t, "a")
	l := acquire(t, m, "a")
	r, err := m.Renew(ctx(t), l)
	if err != nil {
		t.Fatal(err)
	}
	if !r.SameSubnets(l) || !r.Attrs.Equal(l.Attrs) {
		t.Errorf("renewed lease %s, want %s", r, l)
	}
	if !l.Expiration.IsZero() && r.Expiration.Before(l.Expiration) {
		t.Errorf("renewal moved expiration back from %v to %v", l.Expiration, r.Expiration)
	}
}

func testRenewAfterLoss(t *testing.T, h Harness) {
	env := h.Env(t, NetConf)
	m := env.Node(t, "a")
	l := acquire(t, m, "a")
	w := startWatch(t, env.Node(t, "observer"))
	w.until(t, "the lease", func(s map[string]subnet.Lease) bool { _, ok := s[l.Key()]; return ok })

	env.Drop(t, l)
	w.until(t, "the lease dropped", func(s map[string]subnet.Lease) bool { _, ok := s[l.Key()]; return !ok })

	r, err := m.Renew(ctx(t), l)
	if err != nil {
		t.Fatalf("renew after loss: %v", err)
	}
	if !r.SameSubnets(l) {
		t.Errorf("renew after loss got %s, want the same subnet %s back", r.Key(), l.Key())
	}
	w.until(t, "the lease back", func(s map[string]subnet.Lease) bool { return s[l.Key()].Attrs.Equal(l.Attrs) })
}

func testRelease(t *testing.T, h Harness) {
	env := h.Env(t, NetConf)
	m := env.Node(t, "a")
	l := acquire(t, m, "a")
	w := startWatch(t, env.Node(t, "observer"))
	w.until(t, "the lease", func(s map[string]subnet.Lease) bool { _, ok := s[l.Key()]; return ok })
	err := m.Release(ctx(t), l)
	if err != nil {
		if errors.Is(err, subnet.ErrNotSupported) {
			t.Skip("the datastore has no release")
		}
		t.Fatal(err)
	}
	w.until(t, "the lease released", func(s map[string]subnet.Lease) bool { _, ok := s[l.Key()]; return !ok })
}

// testPrepare: the attributes Prepare makes for the chosen subnet are the ones published,
// in the one acquisition.
func testPrepare(t *testing.T, h Harness) {
	env := h.Env(t, NetConf)
	var calls []netip.Prefix
	made := Attrs("a")
	made.BackendData = []byte(`{"VNI":4096,"VtepMAC":"00:15:5d:00:00:01"}`)
	l, err := env.Node(t, "a").Acquire(ctx(t), subnet.AcquireRequest{
		Attrs: Attrs("a"),
		Prepare: func(_ context.Context, sn, _ netip.Prefix, _ subnet.LeaseAttrs) (subnet.LeaseAttrs, error) {
			calls = append(calls, sn)
			return made, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) == 0 || calls[len(calls)-1] != l.Subnet {
		t.Fatalf("Prepare called for %v, lease is %s", calls, l.Subnet)
	}
	if !l.Attrs.Equal(made) {
		t.Errorf("lease attrs %+v, want Prepare's %+v", l.Attrs, made)
	}
	snap := snapshot(t, env.Node(t, "observer"))
	if got := snap[l.Key()]; !got.Attrs.Equal(made) {
		t.Errorf("datastore holds %+v, want Prepare's %+v", got.Attrs, made)
	}
	// Acquired again (a restart), the node's Prepare is told what it published.
	var held subnet.LeaseAttrs
	again, err := env.Node(t, "a").Acquire(ctx(t), subnet.AcquireRequest{
		Attrs: Attrs("a"),
		Prepare: func(_ context.Context, _, _ netip.Prefix, h subnet.LeaseAttrs) (subnet.LeaseAttrs, error) {
			held = h
			return made, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if again.Subnet != l.Subnet || !held.Equal(made) {
		t.Errorf("acquired again: %s, Prepare told it held %+v; want %s and %+v", again.Subnet, held, l.Subnet, made)
	}
	failing := errors.New("no device")
	_, err = env.Node(t, "b").Acquire(ctx(t), subnet.AcquireRequest{
		Attrs: Attrs("b"),
		Prepare: func(context.Context, netip.Prefix, netip.Prefix, subnet.LeaseAttrs) (subnet.LeaseAttrs, error) {
			return subnet.LeaseAttrs{}, failing
		},
	})
	if !errors.Is(err, failing) {
		t.Errorf("a failing Prepare gave %v", err)
	}
	if snap := snapshot(t, env.Node(t, "observer2")); len(snap) != 1 {
		t.Errorf("after a failing Prepare the datastore holds %v, want only a's lease", keys(snap))
	}
}
