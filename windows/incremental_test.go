package windows_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

// vxlanPeers are n overlay peers, 10.244.10.0/24 and up.
func vxlanPeers(t *testing.T, n int) []subnet.Lease {
	var out []subnet.Lease
	for i := range n {
		out = append(out, vxlanLease(t, fmt.Sprintf("10.244.%d.0/24", 10+i), fmt.Sprintf("192.168.2.%d", 10+i), fmt.Sprintf("6e:00:00:00:01:%02x", i)))
	}
	return out
}

// calls renders a call count as "Method:n ..." in a stable order.
func calls(c map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, c[k]))
	}
	return strings.Join(parts, " ")
}

// step converges to peers and checks the HNS and host calls it made: reads too, so that a
// listing shows.
func (n *winNode) step(what string, peers []subnet.Lease, wantHNS, wantHost string) {
	n.t.Helper()
	n.hns.ResetCalls()
	n.host.ResetCalls()
	n.mustConverge(peers)
	if got := calls(n.hns.Calls()); got != wantHNS {
		n.t.Errorf("%s: HNS calls %q, want %q", what, got, wantHNS)
	}
	if got := calls(n.host.Calls()); got != wantHost {
		n.t.Errorf("%s: host calls %q, want %q", what, got, wantHost)
	}
	n.mutations()
}

// TestIncrementalOneRequestPerPeer: once a full Apply has listed the network, a peer that
// joins or leaves costs one HNS request and nothing else: no listing, no version query. A
// peer whose VTEP MAC changes costs two (HNS takes one policy per destination: the old one
// goes first). With remote endpoints a peer costs one request per pod address; host-gw
// costs one route and no HNS call at all.
func TestIncrementalOneRequestPerPeer(t *testing.T) {
	const modify = "ModifyNetworkSettings:1"
	t.Run("RemoteSubnetRoute", func(t *testing.T) {
		n := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.10", hns10, windows.Config{})
		n.mustAcquire("10.244.1.0/24")
		peers := vxlanPeers(t, 40)
		n.mustConverge(peers[:30])
		for i := 30; i < 40; i++ {
			n.step(fmt.Sprintf("peer %d joins", i), peers[:i+1], modify, "")
		}
		for i := 39; i >= 35; i-- {
			n.step(fmt.Sprintf("peer %d leaves", i), peers[:i], modify, "")
		}
		peers[3] = vxlanLease(t, "10.244.13.0/24", "192.168.2.13", "6e:00:00:00:02:03")
		n.step("peer 3's VTEP MAC changes", peers[:35], "ModifyNetworkSettings:2", "")
		n.step("nothing changes", peers[:35], "", "")
	})
	t.Run("RemoteEndpoints", func(t *testing.T) {
		conf := `{"Network":"10.244.0.0/16","SubnetLen":28,"Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}`
		n := newWinNode(t, mustConfig(t, conf), "192.168.1.10", hns10, windows.Config{Peers: windows.PeersRemoteEndpoints})
		n.mustAcquire("10.244.1.0/28")
		a := vxlanLease(t, "10.244.2.0/28", "192.168.1.11", "c6:d2:32:6f:8f:44")
		b := vxlanLease(t, "10.244.3.0/28", "192.168.1.12", "00:15:5d:c0:00:09")
		n.mustConverge([]subnet.Lease{a})
		n.step("b joins", []subnet.Lease{a, b}, "CreateEndpoint:13", "")
		b2 := vxlanLease(t, "10.244.3.0/28", "192.168.1.12", "00:15:5d:c0:00:0a")
		n.step("b's MAC changes: its endpoints do not depend on it", []subnet.Lease{a, b2}, "", "")
		n.step("a leaves", []subnet.Lease{b2}, "DeleteEndpoint:13", "")
	})
	t.Run("host-gw", func(t *testing.T) {
		n := newWinNode(t, mustConfig(t, hostgwConf), "192.168.1.10", hns10, windows.Config{})
		n.mustAcquire("10.244.1.0/24")
		a := hostgwLease("10.244.2.0/24", "192.168.1.11")
		b := hostgwLease("10.244.3.0/24", "192.168.1.12")
		n.mustConverge([]subnet.Lease{a})
		n.step("b joins", []subnet.Lease{a, b}, "", "AddRoute:1")
		b2 := hostgwLease("10.244.3.0/24", "192.168.1.22")
		n.step("b moves: the new route first", []subnet.Lease{a, b2}, "", "AddRoute:1 DeleteRoute:1")
		n.step("a leaves", []subnet.Lease{b2}, "", "DeleteRoute:1")
	})
}

// TestFullApplyRepairsDrift: HNS changed behind the plane's back (a peer's policy removed,
// a stranger's policy added for a cluster subnet) is not seen by incremental Applies, which
// list nothing; the next full one (the resync, or the one after a failed write) puts it
// right, and leaves alone what is outside the cluster network.
func TestFullApplyRepairsDrift(t *testing.T) {
	n := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.10", hns10, windows.Config{})
	n.mustAcquire("10.244.1.0/24")
	peers := vxlanPeers(t, 3)
	n.mustConverge(peers)
	want := n.hns.Render()

	net := n.network("flannel.4096")
	var gone windows.Policy
	for _, p := range net.PoliciesOf(windows.PolicyRemoteSubnetRoute) {
		if strings.Contains(string(p.Settings), "10.244.11.0/24") {
			gone = p
		}
	}
	stranger := windows.RemoteSubnetRoutePolicy(windows.RemoteSubnetRouteSettings{DestinationPrefix: "10.244.77.0/24", IsolationID: 4096, ProviderAddress: "192.168.2.77", DistributedRouterMacAddress: "00-15-5D-77-77-77"})
	taken := windows.RemoteSubnetRoutePolicy(windows.RemoteSubnetRouteSettings{DestinationPrefix: "10.244.20.0/24", IsolationID: 4096, ProviderAddress: "192.168.2.99", DistributedRouterMacAddress: "00-15-5D-99-99-99"})
	foreign := windows.RemoteSubnetRoutePolicy(windows.RemoteSubnetRouteSettings{DestinationPrefix: "172.16.0.0/24", IsolationID: 4096, ProviderAddress: "192.168.2.98", DistributedRouterMacAddress: "00-15-5D-98-98-98"})
	for _, req := range []*windows.ModifyNetworkSettingRequest{
		windows.PolicyRequest(windows.RequestRemove, gone),
		windows.PolicyRequest(windows.RequestAdd, stranger),
		windows.PolicyRequest(windows.RequestAdd, taken),
		windows.PolicyRequest(windows.RequestAdd, foreign),
	} {
		if err := n.hns.ModifyNetworkSettings(net.ID, req); err != nil {
			t.Fatal(err)
		}
	}
	n.mutations()

	// A peer joins for the subnet the stranger took: the write fails, and says so.
	joined := append(peers, vxlanLease(t, "10.244.20.0/24", "192.168.2.20", "6e:00:00:00:01:20"))
	if _, err := n.converge(joined); !errors.Is(err, windows.ErrExists) {
		t.Fatalf("adding a policy for a taken destination gave %v, want ErrExists", err)
	}
	// The daemon follows a failure with a full Apply.
	if _, err := n.full(joined); err != nil {
		t.Fatalf("full Apply: %v", err)
	}
	n.mustConverge(peers) // and the joined peer leaves again
	got := n.hns.Render()
	foreignLine := `  policy RemoteSubnetRoute {"DestinationPrefix":"172.16.0.0/24","DistributedRouterMacAddress":"00-15-5D-98-98-98","IsolationId":4096,"ProviderAddress":"192.168.2.98"}`
	if !strings.Contains(got, foreignLine) {
		t.Errorf("the policy outside the cluster network was removed:\n%s", got)
	}
	if d := lineDiff(want, strings.Replace(got, foreignLine+"\n", "", 1)); d != "" {
		t.Errorf("after repair (-before drift +now):\n%s", d)
	}
	if ch, err := n.full(peers); err != nil || ch.Total() != 0 {
		t.Errorf("a second full Apply changed %v, %v", ch, err)
	}
}

// TestPrepareCanceled: a stopping daemon is not held by the wait for the host network after
// HNS made a network (30 s at most): Prepare returns at once with ctx's error, whether HNS
// has not reported the management IP yet or the host has not got it back.
func TestPrepareCanceled(t *testing.T) {
	cfg := mustConfig(t, vxlanConf)
	pub := netip.MustParseAddr("192.168.1.10")
	b, err := backend.NewFor(cfg, backend.Node{Underlay: testAdapter, Addr: pub, PublicIP: pub, MTU: 1500}, windows.Capabilities(), backend.IPv4)
	if err != nil {
		t.Fatal(err)
	}
	st := b.State(netip.MustParsePrefix("10.244.1.0/24"), false)
	hostBlocks := func(ctx context.Context, _ netip.Addr) error {
		<-ctx.Done()
		return ctx.Err()
	}
	for _, tc := range []struct {
		name      string
		blip      time.Duration
		hostReady func(context.Context, netip.Addr) error
	}{
		{"HNS has no management IP yet", time.Hour, nil},
		{"the host has not got it back", 0, hostBlocks},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Real time: the plane's own Sleep, a blip of an hour.
			hns := hnstest.New(hnstest.Options{ManagementIP: pub, Blip: tc.blip})
			p := windows.New(hns, nil, windows.Config{HostReady: tc.hostReady}, testLogger(t))
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(50*time.Millisecond, cancel)
			start := time.Now()
			_, err := p.Prepare(ctx, st)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("Prepare returned %v after the cancel", took)
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Prepare gave %v, want context.Canceled", err)
			}
		})
	}
}

// TestIncrementalMatchesFull is a differential test: any sequence of peers joining,
// leaving and changing (subnets, public IPs and MACs drawn from small pools, so claims
// collide), applied one change at a time, ends in the same HNS and host state as one full
// Apply of the final State on a fresh node; and a full Apply after it finds nothing to do,
// so the model matched HNS all along.
func TestIncrementalMatchesFull(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, tc := range []struct {
		name  string
		conf  string
		pcfg  windows.Config
		bits  int
		steps int
	}{
		{"RemoteSubnetRoute", vxlanConf, windows.Config{}, 24, 300},
		{"RemoteEndpoints", `{"Network":"10.244.0.0/16","SubnetLen":28,"Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}`,
			windows.Config{Peers: windows.PeersRemoteEndpoints}, 28, 80},
		{"host-gw", hostgwConf, windows.Config{}, 24, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0))
			cfg := mustConfig(t, tc.conf)
			own := fmt.Sprintf("10.244.1.0/%d", tc.bits)
			lease := func(i int) subnet.Lease {
				sn := fmt.Sprintf("10.244.%d.0/%d", 2+rng.IntN(16), tc.bits)
				pub := fmt.Sprintf("192.168.1.%d", 100+rng.IntN(20))
				if cfg.Backend.Type == subnet.BackendHostGW {
					return hostgwLease(sn, pub)
				}
				return vxlanLease(t, sn, pub, fmt.Sprintf("6e:00:00:00:00:%02x", rng.IntN(12)))
			}
			a := newWinNode(t, cfg, "192.168.1.10", hns10, tc.pcfg)
			a.mustAcquire(own)
			live := map[string]subnet.Lease{}
			a.mustConverge(nil)
			for i := range tc.steps {
				l := lease(i)
				if _, ok := live[l.Key()]; ok && rng.IntN(2) == 0 {
					delete(live, l.Key())
				} else {
					live[l.Key()] = l
				}
				if _, err := a.converge(slices.Collect(maps.Values(live))); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
			final := slices.Collect(maps.Values(live))
			a.mutations()
			if ch, err := a.full(final); err != nil || ch.Total() != 0 || len(a.mutations()) != 0 {
				t.Errorf("a full Apply after the incremental ones changed %v (%v): the model had drifted from HNS", ch, err)
			}

			b := newWinNode(t, cfg, "192.168.1.10", hns10, tc.pcfg)
			b.mustAcquire(own)
			if _, err := b.full(final); err != nil {
				t.Fatal(err)
			}
			if d := lineDiff(b.state(), a.state()); d != "" {
				t.Errorf("incremental (+) and full (-) differ after %d steps, %d peers:\n%s", tc.steps, len(final), d)
			}
		})
	}
}

// TestIncrementalTrustsItsModel: what the plane programmed for a peer is its model's to know,
// not the change's Old. A peer that leaves with an Old naming another peer's subnet, or with
// none, has its own entries taken away and the other peer's left; the node ends as a fresh
// node's full Apply of the same State leaves it.
func TestIncrementalTrustsItsModel(t *testing.T) {
	const conf28 = `{"Network":"10.244.0.0/16","SubnetLen":28,"Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}`
	for _, tc := range []struct {
		name string
		conf string
		pcfg windows.Config
		bits int
	}{
		{"RemoteSubnetRoute", vxlanConf, windows.Config{}, 24},
		{"RemoteEndpoints", conf28, windows.Config{Peers: windows.PeersRemoteEndpoints}, 28},
		{"host-gw", hostgwConf, windows.Config{}, 24},
	} {
		cfg := mustConfig(t, tc.conf)
		lease := func(i int) subnet.Lease {
			sn, pub := fmt.Sprintf("10.244.%d.0/%d", i, tc.bits), fmt.Sprintf("192.168.1.%d", 10+i)
			if cfg.Backend.Type == subnet.BackendHostGW {
				return hostgwLease(sn, pub)
			}
			return vxlanLease(t, sn, pub, fmt.Sprintf("6e:00:00:00:00:%02x", i))
		}
		own, x, y := fmt.Sprintf("10.244.1.0/%d", tc.bits), lease(2), lease(3)
		for _, old := range []string{"another peer's", "none"} {
			t.Run(tc.name+", Old "+old, func(t *testing.T) {
				n := newWinNode(t, cfg, "192.168.1.10", hns10, tc.pcfg)
				n.mustAcquire(own)
				if _, err := n.full([]subnet.Lease{x, y}); err != nil {
					t.Fatal(err)
				}
				var yPeer backend.Peer
				for key, p := range n.set.State().Peers.All() {
					if key == y.Key() {
						yPeer = p
					}
				}
				var r backend.Result
				n.set.Remove(x.Key(), &r)
				if len(r.Changes) != 1 || r.Changes[0].Key != x.Key() {
					t.Fatalf("x leaving made changes %+v", r.Changes)
				}
				r.Changes[0].Old = backend.Peer{}
				if old != "none" {
					r.Changes[0].Old = yPeer
				}
				if _, err := n.plane.Apply(t.Context(), n.set.State(), backend.Update{Peers: r.Changes}); err != nil {
					t.Fatal(err)
				}

				fresh := newWinNode(t, cfg, "192.168.1.10", hns10, tc.pcfg)
				fresh.mustAcquire(own)
				if _, err := fresh.full([]subnet.Lease{y}); err != nil {
					t.Fatal(err)
				}
				if d := lineDiff(fresh.state(), n.state()); d != "" {
					t.Errorf("after x left with Old %s: incremental (+) and full (-) differ:\n%s", old, d)
				}
			})
		}
	}
}
