package windows_test

import (
	"context"
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

const dualConf = `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"host-gw"}}`

// dualWatchInterval is the Watch's interval in dualNode: its Sleep waits for a tick of the
// test there, and the fake clock's time for anything else (the blip).
const dualWatchInterval = 7 * time.Second

// dualNode is a dual-stack host-gw Windows node as weftd drives it: one Plane and its IPv6
// view, a backend and a Set of peer leases per family (IPv4 at 0, IPv6 at 1).
type dualNode struct {
	t      *testing.T
	clock  *fakeClock
	hns    *hnstest.HNS
	host   *hnstest.Host
	plane  *windows.Plane
	planes [2]backend.Plane
	bs     [2]*backend.Backend
	sets   [2]*backend.Set
	own    subnet.Lease
	// A Watch waiting for a tick sends its ctx on asleep; tick lets it look.
	asleep chan context.Context
	tick   chan struct{}
}

func newDualNode(t *testing.T) *dualNode {
	n := &dualNode{t: t, clock: newClock(), asleep: make(chan context.Context), tick: make(chan struct{})}
	pfx := netip.MustParsePrefix
	n.host = hnstest.NewHost(windows.Interface{Index: 4, Name: testAdapter, Prefixes: []netip.Prefix{pfx("192.168.1.10/24"), pfx("fd77:77::10/64")}})
	n.hns = hnstest.New(hnstest.Options{Version: windows.Version{Major: 11, Minor: 10}, ManagementIP: netip.MustParseAddr("192.168.1.10"),
		Blip: testBlip, Now: n.clock.Now, Host: n.host})
	sleep := func(ctx context.Context, d time.Duration) error {
		if d != dualWatchInterval {
			return n.clock.Sleep(ctx, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case n.asleep <- ctx:
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.tick:
			return nil
		}
	}
	n.plane = windows.New(n.hns, n.host, windows.Config{Sleep: sleep, Now: n.clock.Now, WatchInterval: dualWatchInterval}, testLogger(t))
	n.planes = [2]backend.Plane{n.plane, n.plane.IPv6()}
	cfg := mustConfig(t, dualConf)
	node := backend.Node{Underlay: testAdapter, Addr: netip.MustParseAddr("192.168.1.10"), Addr6: netip.MustParseAddr("fd77:77::10"), MTU: 1500,
		PublicIP: netip.MustParseAddr("192.168.1.10"), PublicIPv6: netip.MustParseAddr("fd77:77::10"),
		Connected: []netip.Prefix{pfx("192.168.1.0/24"), pfx("fd77:77::/64")}}
	for i, f := range []backend.Family{backend.IPv4, backend.IPv6} {
		b, err := backend.NewFor(cfg, node, windows.Capabilities(), f)
		if err != nil {
			t.Fatal(err)
		}
		n.bs[i] = b
	}
	n.own = dualLease("10.244.1.0/24", "fd00:10:244:1::/64", "192.168.1.10", "fd77:77::10")
	return n
}

func dualLease(sn, sn6, pub, pub6 string) subnet.Lease {
	return subnet.Lease{Subnet: netip.MustParsePrefix(sn), IPv6Subnet: netip.MustParsePrefix(sn6), Attrs: subnet.LeaseAttrs{
		PublicIP: netip.MustParseAddr(pub), PublicIPv6: netip.MustParseAddr(pub6), BackendType: subnet.BackendHostGW}}
}

// dualPeer is peer i's lease: 10.244.<10+i>.0/24 and fd00:10:244:<10+i>::/64.
func dualPeer(i int) subnet.Lease {
	return dualLease(fmt.Sprintf("10.244.%d.0/24", 10+i), fmt.Sprintf("fd00:10:244:%d::/64", 10+i),
		fmt.Sprintf("192.168.1.%d", 10+i), fmt.Sprintf("fd77:77::%d", 10+i))
}

// prepare runs family f's Prepare, as the lease acquisition does (IPv4's, then IPv6's).
func (n *dualNode) prepare(f int) {
	n.t.Helper()
	if _, err := n.planes[f].Prepare(n.t.Context(), n.bs[f].StateFor(n.own, false)); err != nil {
		n.t.Fatalf("Prepare of family %d: %v", f, err)
	}
	n.sets[f] = nil
}

// apply makes family f's Set hold exactly peers and applies it: in full the first time and
// when full is set (a new Set, as after drift or on the resync), else the changes only.
func (n *dualNode) apply(f int, peers []subnet.Lease, full bool) (backend.Changes, error) {
	if full || n.sets[f] == nil {
		n.sets[f] = backend.NewSet(n.bs[f], n.own, false)
		var r backend.Result
		for _, l := range peers {
			n.sets[f].Put(l, &r)
		}
		return n.planes[f].Apply(n.t.Context(), n.sets[f].State(), backend.Update{Full: true})
	}
	var r backend.Result
	keep := map[string]bool{}
	for _, l := range peers {
		keep[l.Key()] = true
	}
	for _, p := range n.sets[f].Peers() {
		if !keep[p.Key] {
			n.sets[f].Remove(p.Key, &r)
		}
	}
	for _, l := range peers {
		n.sets[f].Put(l, &r)
	}
	return n.planes[f].Apply(n.t.Context(), n.sets[f].State(), backend.Update{Peers: r.Changes})
}

// step applies family f as apply does and checks the HNS and host calls it made, reads too.
func (n *dualNode) step(what string, f int, peers []subnet.Lease, full bool, wantHNS, wantHost string) {
	n.t.Helper()
	n.hns.ResetCalls()
	n.host.ResetCalls()
	if _, err := n.apply(f, peers, full); err != nil {
		n.t.Fatalf("%s: %v", what, err)
	}
	n.checkCalls(what, wantHNS, wantHost)
}

func (n *dualNode) checkCalls(what, wantHNS, wantHost string) {
	n.t.Helper()
	if got := calls(n.hns.Calls()); got != wantHNS {
		n.t.Errorf("%s: HNS calls %q, want %q", what, got, wantHNS)
	}
	if got := calls(n.host.Calls()); got != wantHost {
		n.t.Errorf("%s: host calls %q, want %q", what, got, wantHost)
	}
}

// deleteNetwork deletes the node's network behind the plane's back.
func (n *dualNode) deleteNetwork() {
	n.t.Helper()
	net, err := n.hns.NetworkByName("cbr0")
	if err != nil {
		n.t.Fatal(err)
	}
	if err := n.hns.DeleteNetwork(net.ID); err != nil {
		n.t.Fatal(err)
	}
}

// watching waits until k Watches run on the plane.
func (n *dualNode) watching(k int) {
	for n.plane.Watchers() < k {
		time.Sleep(time.Millisecond)
	}
}

// routes are the host's routes into the cluster networks, "dst via next hop", sorted.
func (n *dualNode) routes() string {
	rs, err := n.host.Routes()
	if err != nil {
		n.t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		if netip.MustParsePrefix("10.244.0.0/16").Contains(r.Dst.Addr()) || netip.MustParsePrefix("fd00:10:244::/56").Contains(r.Dst.Addr()) {
			out = append(out, r.Dst.String()+" via "+r.NextHop.String())
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// routesOf are the routes both families want to peers, as routes renders them.
func routesOf(peers ...subnet.Lease) string {
	var out []string
	for _, l := range peers {
		out = append(out, l.Subnet.String()+" via "+l.Attrs.PublicIP.String(), l.IPv6Subnet.String()+" via "+l.Attrs.PublicIPv6.String())
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// The calls of a look at the network and the host for a dual-stack full Apply: the network,
// its host endpoint, HNS's version (IPv6 needs 11.10), the interfaces for each of the four
// forwardings and for the routes, and the route table; with the writes of routes, in the
// order calls renders them.
const (
	dualLookHNS        = "NetworkByName:1 NetworkEndpoints:1 Version:1"
	dualLookHost       = "Interfaces:5 Routes:1"
	dualLookHostRepair = "AddRoute:1 DeleteRoute:1 Interfaces:5 Routes:1"
)

// TestDualStackOneLook: a dual-stack node's two families share one model of their one
// L2Bridge network. The IPv6 family's Prepare, right after IPv4's, finds the network made and
// asks nothing; its full Apply, right after IPv4's, starts from what IPv4's listed and writes
// its routes without listing anything; an IPv4 change and an IPv6 change in one period cost a
// route each and no listing.
func TestDualStackOneLook(t *testing.T) {
	n := newDualNode(t)
	n.prepare(0)
	n.checkCalls("IPv4's Prepare", "CreateEndpoint:1 CreateNetwork:1 HostAttach:1 NetworkByName:7 NetworkEndpoints:1 Version:1",
		"Interfaces:4 SetForwarding:4")
	n.hns.ResetCalls()
	n.host.ResetCalls()
	n.prepare(1)
	n.checkCalls("IPv6's Prepare after IPv4's", "", "")

	a, b, c := dualPeer(1), dualPeer(2), dualPeer(3)
	n.step("IPv4's first full Apply", 0, []subnet.Lease{a, b}, false, dualLookHNS, "AddRoute:2 Interfaces:5 Routes:1")
	n.step("IPv6's first full Apply, after IPv4's", 1, []subnet.Lease{a, b}, false, "", "AddRoute:2")
	if got, want := n.routes(), routesOf(a, b); got != want {
		t.Errorf("routes %s, want %s", got, want)
	}

	n.step("c joins: IPv4", 0, []subnet.Lease{a, b, c}, false, "", "AddRoute:1")
	n.step("c joins: IPv6", 1, []subnet.Lease{a, b, c}, false, "", "AddRoute:1")
	n.step("a leaves: IPv6 first", 1, []subnet.Lease{b, c}, false, "", "DeleteRoute:1")
	n.step("a leaves: IPv4", 0, []subnet.Lease{b, c}, false, "", "DeleteRoute:1")
	if got, want := n.routes(), routesOf(b, c); got != want {
		t.Errorf("routes %s, want %s", got, want)
	}

	// The resync: both families in full, IPv6 first this time; one look serves both.
	n.step("the resync: IPv6", 1, []subnet.Lease{b, c}, true, dualLookHNS, dualLookHost)
	n.step("the resync: IPv4", 0, []subnet.Lease{b, c}, true, "", "")
	// A look lent is for the other family's next call only.
	n.step("IPv4 again in full", 0, []subnet.Lease{b, c}, true, dualLookHNS, dualLookHost)
	n.step("IPv4 in full once more: it lent its look, it borrows none", 0, []subnet.Lease{b, c}, true, dualLookHNS, dualLookHost)
	n.step("an IPv6 change takes the lent look away", 1, []subnet.Lease{b}, false, "", "DeleteRoute:1")
	n.step("IPv6 in full", 1, []subnet.Lease{b}, true, dualLookHNS, dualLookHost)
	// A look is lent for a moment: the daemon applies the two families back to back.
	if err := n.clock.Sleep(t.Context(), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	n.step("IPv4 in full, two seconds after IPv6's", 0, []subnet.Lease{b}, true, dualLookHNS, "DeleteRoute:1 "+dualLookHost)
}

// TestDualStackFullApplyKeepsToItsFamily: a family's full Apply writes its own family's routes
// and no other's, whatever it finds of the other's; the other family's full Apply, on the
// look lent to it, repairs its own.
func TestDualStackFullApplyKeepsToItsFamily(t *testing.T) {
	for _, first := range []int{0, 1} {
		t.Run(fmt.Sprintf("IPv%d first", map[int]int{0: 4, 1: 6}[first]), func(t *testing.T) {
			n := newDualNode(t)
			n.prepare(0)
			n.prepare(1)
			a, b := dualPeer(1), dualPeer(2)
			peers := []subnet.Lease{a, b}
			for f := range 2 {
				if _, err := n.apply(f, peers, false); err != nil {
					t.Fatal(err)
				}
			}
			want := n.routes()
			// Behind the plane's back, in both families: a's route deleted, a stray one added.
			rs, err := n.host.Routes()
			if err != nil {
				t.Fatal(err)
			}
			stray := [2]netip.Prefix{netip.MustParsePrefix("10.244.99.0/24"), netip.MustParsePrefix("fd00:10:244:99::/64")}
			for _, r := range rs {
				if r.Dst == a.Subnet || r.Dst == a.IPv6Subnet {
					if err := n.host.DeleteRoute(r); err != nil {
						t.Fatal(err)
					}
					r.Dst = stray[map[bool]int{true: 0, false: 1}[r.Dst.Addr().Is4()]]
					if err := n.host.AddRoute(r); err != nil {
						t.Fatal(err)
					}
				}
			}
			second := 1 - first
			n.step("the first family's full Apply", first, peers, true, dualLookHNS, dualLookHostRepair)
			// The first family's routes are back; the second's drift is as it was.
			aRoute := [2]string{a.Subnet.String() + " via " + a.Attrs.PublicIP.String(), a.IPv6Subnet.String() + " via " + a.Attrs.PublicIPv6.String()}
			strayRoute := [2]string{stray[0].String() + " via " + a.Attrs.PublicIP.String(), stray[1].String() + " via " + a.Attrs.PublicIPv6.String()}
			fixed := []string{aRoute[first], strayRoute[second]}
			for _, r := range strings.Split(want, ", ") {
				if r != aRoute[0] && r != aRoute[1] {
					fixed = append(fixed, r)
				}
			}
			slices.Sort(fixed)
			if got := n.routes(); got != strings.Join(fixed, ", ") {
				t.Errorf("after the first family's full Apply: routes\n%s\nwant\n%s", got, strings.Join(fixed, ", "))
			}
			n.step("the second family's full Apply, on the lent look", second, peers, true, "", "AddRoute:1 DeleteRoute:1")
			if got := n.routes(); got != want {
				t.Errorf("after both full Applies: routes\n%s\nwant\n%s", got, want)
			}
			n.step("the second family's full Apply again", second, peers, true, dualLookHNS, dualLookHost)
		})
	}
}

// TestDualStackNetworkMadeAgain: a full Apply of one family that finds the network gone makes
// it again, and with it the host's vNIC: the other family's routes are gone too. That
// family's model is dropped: its next Apply, even with nothing changed, is a full one, and
// the Watch tells it (only it) of drift at its next look.
func TestDualStackNetworkMadeAgain(t *testing.T) {
	n := newDualNode(t)
	n.prepare(0)
	n.prepare(1)
	a := dualPeer(1)
	peers := []subnet.Lease{a}
	for f := range 2 {
		if _, err := n.apply(f, peers, false); err != nil {
			t.Fatal(err)
		}
	}
	remake := func() {
		t.Helper()
		n.deleteNetwork()
		if got := n.routes(); got != "" {
			t.Fatalf("routes %s once the network is gone, want none", got)
		}
		ch, err := n.apply(0, peers, true)
		if err != nil || ch["hns_network"] != 1 {
			t.Fatalf("IPv4's full Apply changed %v (%v), want the network made again", ch, err)
		}
		if got, want := n.routes(), a.Subnet.String()+" via "+a.Attrs.PublicIP.String(); got != want {
			t.Fatalf("routes %s after IPv4's full Apply, want %s", got, want)
		}
	}

	remake()
	n.step("IPv6's Apply of nothing new", 1, peers, false, "", "AddRoute:1")
	if got, want := n.routes(), routesOf(a); got != want {
		t.Errorf("routes %s, want %s", got, want)
	}

	remake()
	ctx, cancel := context.WithCancel(t.Context())
	told := [2]chan struct{}{make(chan struct{}, 8), make(chan struct{}, 8)}
	done := make(chan error, 2)
	for f := range 2 {
		go func() { done <- n.planes[f].Watch(ctx, func() { told[f] <- struct{}{} }) }()
	}
	n.watching(2)
	<-n.asleep
	n.hns.ResetCalls()
	n.tick <- struct{}{}
	<-n.asleep // the look is over
	if got := calls(n.hns.Calls()); got != "NetworkByName:1" {
		t.Errorf("a look of the Watches called HNS %q, want one NetworkByName", got)
	}
	if len(told[1]) != 1 || len(told[0]) != 0 {
		t.Errorf("the Watch told IPv4 %d times and IPv6 %d, want IPv6 once", len(told[0]), len(told[1]))
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("Watch ended with %v", err)
		}
	}
}

// TestDualStackWatchOneLook: the two families' Watches share one look at the network a tick:
// all well, one query and no drift; the network gone, one query and both families told.
// When the Watch that looks ends, the other takes over.
func TestDualStackWatchOneLook(t *testing.T) {
	n := newDualNode(t)
	n.prepare(0)
	n.prepare(1)
	for f := range 2 {
		if _, err := n.apply(f, []subnet.Lease{dualPeer(1)}, false); err != nil {
			t.Fatal(err)
		}
	}
	var ctxs [2]context.Context
	var cancels [2]context.CancelFunc
	told := [2]chan struct{}{make(chan struct{}, 8), make(chan struct{}, 8)}
	done := [2]chan error{make(chan error, 1), make(chan error, 1)}
	for f := range 2 {
		ctxs[f], cancels[f] = context.WithCancel(t.Context())
		go func() { done[f] <- n.planes[f].Watch(ctxs[f], func() { told[f] <- struct{}{} }) }()
	}
	n.watching(2)
	look := func(what string) {
		t.Helper()
		n.hns.ResetCalls()
		n.tick <- struct{}{}
		<-n.asleep // the look is over
		if got := calls(n.hns.Calls()); got != "NetworkByName:1" {
			t.Errorf("%s: a tick's look called HNS %q, want one NetworkByName", what, got)
		}
	}
	looker := <-n.asleep
	look("all well")
	look("all well, again")
	if len(told[0])+len(told[1]) != 0 {
		t.Errorf("drift told with all well: IPv4 %d, IPv6 %d", len(told[0]), len(told[1]))
	}

	n.deleteNetwork()
	look("the network gone")
	if len(told[0]) != 1 || len(told[1]) != 1 {
		t.Errorf("the network gone: drift told IPv4 %d times, IPv6 %d, want each once", len(told[0]), len(told[1]))
	}

	// Whichever Watch looks, the other goes on looking once it ends.
	cancels[0]()
	if err := <-done[0]; err != nil {
		t.Errorf("IPv4's Watch ended with %v", err)
	}
	if looker == ctxs[0] {
		if looker = <-n.asleep; looker != ctxs[1] {
			t.Fatal("IPv4's Watch ended, and not IPv6's took over")
		}
	}
	look("IPv4's Watch ended")
	if len(told[0]) != 1 || len(told[1]) != 2 {
		t.Errorf("after IPv4's Watch ended: drift told IPv4 %d times, IPv6 %d, want 1 and 2", len(told[0]), len(told[1]))
	}
	cancels[1]()
	if err := <-done[1]; err != nil {
		t.Errorf("IPv6's Watch ended with %v", err)
	}
}

// TestDualStackIncrementalMatchesFull is a differential test of the shared model: peers join,
// leave and move to other public IPs, each family applies the changes in either order, a
// family is applied in full now and then (on a look of its own, or one the other lent it), and
// a while later routes vanish or appear behind the plane's back before both families' full
// Applies. The
// routes are always those the peers want after both families applied, a full Apply at the
// end finds nothing to do, and the node ends as a fresh node's full Applies leave it.
func TestDualStackIncrementalMatchesFull(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	n := newDualNode(t)
	n.prepare(0)
	n.prepare(1)
	live := map[int]subnet.Lease{}
	peers := func() []subnet.Lease {
		var out []subnet.Lease
		for _, i := range slices.Sorted(maps.Keys(live)) {
			out = append(out, live[i])
		}
		return out
	}
	apply := func(step int, f int, full bool) {
		t.Helper()
		if _, err := n.apply(f, peers(), full); err != nil {
			t.Fatalf("step %d: family %d (full %t): %v", step, f, full, err)
		}
	}
	for step := range 300 {
		switch op := rng.IntN(10); {
		case op < 7:
			i := 2 + rng.IntN(12)
			if _, ok := live[i]; ok && rng.IntN(3) == 0 {
				delete(live, i)
			} else {
				l := dualPeer(i)
				pub := 100 + 4*i + rng.IntN(4) // a peer's own: two peers of one public IP are one too many
				l.Attrs.PublicIP = netip.MustParseAddr(fmt.Sprintf("192.168.1.%d", pub))
				l.Attrs.PublicIPv6 = netip.MustParseAddr(fmt.Sprintf("fd77:77::%d", pub))
				live[i] = l
			}
			first := rng.IntN(2)
			apply(step, first, false)
			apply(step, 1-first, false)
		case op < 9:
			apply(step, rng.IntN(2), true)
		default:
			// A while later, routes vanish and appear behind the plane's back.
			if err := n.clock.Sleep(t.Context(), time.Minute); err != nil {
				t.Fatal(err)
			}
			rs, err := n.host.Routes()
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if r.Protocol == windows.ProtoNetMgmt && rng.IntN(3) == 0 {
					if err := n.host.DeleteRoute(r); err != nil {
						t.Fatal(err)
					}
				}
			}
			ifs, err := n.host.Interfaces()
			if err != nil {
				t.Fatal(err)
			}
			vnic := ifs[slices.IndexFunc(ifs, func(i windows.Interface) bool { return i.Name == "vEthernet ("+testAdapter+")" })]
			stray := dualPeer(50 + rng.IntN(3))
			for _, r := range []windows.HostRoute{{Dst: stray.Subnet, NextHop: stray.Attrs.PublicIP}, {Dst: stray.IPv6Subnet, NextHop: stray.Attrs.PublicIPv6}} {
				if rng.IntN(2) == 0 {
					r.IfIndex, r.Protocol = vnic.Index, windows.ProtoNetMgmt
					_ = n.host.AddRoute(r) // it may be there from before
				}
			}
			first := rng.IntN(2)
			apply(step, first, true)
			apply(step, 1-first, true)
		}
		if got, want := n.routes(), routesOf(peers()...); got != want {
			t.Fatalf("step %d: routes\n%s\nwant\n%s", step, got, want)
		}
	}
	for f := range 2 {
		n.hns.ResetRequests()
		if ch, err := n.apply(f, peers(), true); err != nil || ch.Total() != 0 || len(n.hns.Requests()) != 0 {
			t.Errorf("family %d: a full Apply at the end changed %v (%v): the model had drifted", f, ch, err)
		}
	}
	fresh := newDualNode(t)
	fresh.prepare(0)
	fresh.prepare(1)
	for f := range 2 {
		if _, err := fresh.apply(f, peers(), true); err != nil {
			t.Fatal(err)
		}
	}
	if d := lineDiff(fresh.hns.Render()+fresh.host.Render(), n.hns.Render()+n.host.Render()); d != "" {
		t.Errorf("incremental (+) and full (-) differ:\n%s", d)
	}
}
