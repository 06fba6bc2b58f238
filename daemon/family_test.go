package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/linux"
	"github.com/weftnet/weft/subnet"
)

// updatesPlane is a fakePlane that keeps every Update it is given and reports drift when the
// test says so.
type updatesPlane struct {
	*fakePlane
	updates []backend.Update
	drift   chan struct{} // each send is one drift report
}

func (p *updatesPlane) Apply(ctx context.Context, st *backend.State, u backend.Update) (backend.Changes, error) {
	u.Peers = slices.Clone(u.Peers)
	p.updates = append(p.updates, u)
	return p.fakePlane.Apply(ctx, st, u)
}

func (p *updatesPlane) Watch(ctx context.Context, drift func()) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.drift:
			drift()
		}
	}
}

// lastUpdate is the Update of the last Apply.
func (p *updatesPlane) lastUpdate(t *testing.T) backend.Update {
	t.Helper()
	if len(p.updates) == 0 {
		t.Fatal("no Apply yet")
	}
	return p.updates[len(p.updates)-1]
}

// vxLease is a vxlan lease of sn at ip, its VTEP's MAC ending in mac.
func vxLease(sn, ip string, mac byte) subnet.Lease {
	return subnet.Lease{Subnet: netip.MustParsePrefix(sn), Attrs: subnet.LeaseAttrs{
		PublicIP: netip.MustParseAddr(ip), BackendType: subnet.BackendVXLAN,
		BackendData: backend.VXLANData{VNI: 1, VtepMAC: backend.MAC{0x0e, 0, 0, 0, 0, mac}}.Encode()}}
}

var ownLease = vxLease("10.244.1.0/24", "192.0.2.10", 1)

// newTestPath is an IPv4 vxlan family path on an updatesPlane, started with ownLease and
// applied once (the start's full Apply).
func newTestPath(t *testing.T) (*familyPath, *updatesPlane) {
	t.Helper()
	return newTestPathFor(t, `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`, ownLease)
}

// newTestPathFor is newTestPath for the network config conf and the own lease own.
func newTestPathFor(t *testing.T, conf string, own subnet.Lease) (*familyPath, *updatesPlane) {
	t.Helper()
	cfg, err := subnet.ParseConfig([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	b, err := backend.NewFor(cfg, backend.Node{Underlay: "eth0", Addr: netip.MustParseAddr("192.0.2.10"), PublicIP: netip.MustParseAddr("192.0.2.10"),
		Addr6: netip.MustParseAddr("fd77::10"), PublicIPv6: netip.MustParseAddr("fd77::10"), MTU: 1500}, linux.Capabilities(), backend.IPv4)
	if err != nil {
		t.Fatal(err)
	}
	plane := &updatesPlane{fakePlane: &fakePlane{mac: backend.MAC{0x0e, 0, 0, 0, 0, 1}}, drift: make(chan struct{})}
	m := newMetrics()
	fp := newFamilyPath(b, plane, pathConfig{log: slog.New(slog.NewTextHandler(testWriter{t}, nil)), m: m, events: noEvents{},
		offload: OffloadAuto, mtu: b.MTU()})
	fp.Start(t.Context(), own)
	if !fp.Busy() || !fp.Full() {
		t.Fatalf("a path just started: busy %t, full %t; want its first Apply full", fp.Busy(), fp.Full())
	}
	mustApply(t, fp)
	if u := plane.lastUpdate(t); !u.Full {
		t.Fatalf("first Apply: %+v, want a full one", u)
	}
	return fp, plane
}

func mustApply(t *testing.T, fp *familyPath) backend.Changes {
	t.Helper()
	c, err := fp.Apply(t.Context())
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if fp.Busy() {
		t.Fatal("busy after a successful Apply with nothing new")
	}
	return c
}

func added(ls ...subnet.Lease) []subnet.Event {
	var evs []subnet.Event
	for _, l := range ls {
		evs = append(evs, subnet.Event{Type: subnet.EventAdded, Lease: l})
	}
	return evs
}

// keysOf lists the keys of an Update's peer changes.
func keysOf(u backend.Update) []string {
	var out []string
	for _, c := range u.Peers {
		out = append(out, c.Key)
	}
	return out
}

// TestFamilyPathCoalesces: events observed in several batches before an Apply are one
// incremental Apply, one change per peer, and leave the plane with the Set's peers.
func TestFamilyPathCoalesces(t *testing.T) {
	fp, plane := newTestPath(t)
	a, b := vxLease("10.244.2.0/24", "192.0.2.12", 2), vxLease("10.244.3.0/24", "192.0.2.13", 3)
	b2 := vxLease("10.244.3.0/24", "192.0.2.23", 3) // b moved to another address
	fp.Observe(added(a, b))
	fp.Observe(added(b2))
	fp.Observe([]subnet.Event{{Type: subnet.EventRemoved, Lease: a}})
	if !fp.Busy() || fp.Full() {
		t.Fatalf("after three batches: busy %t, full %t; want an incremental Apply pending", fp.Busy(), fp.Full())
	}
	n := len(plane.updates)
	mustApply(t, fp)
	if len(plane.updates) != n+1 {
		t.Fatalf("%d Applies for three batches; want 1", len(plane.updates)-n)
	}
	u := plane.lastUpdate(t)
	if u.Full || fmt.Sprint(keysOf(u)) != fmt.Sprint([]string{a.Key(), b.Key()}) {
		t.Fatalf("Update %+v; want incremental, one change each for %s and %s", u, a.Key(), b.Key())
	}
	last, _ := plane.last()
	if got := routes(last); fmt.Sprint(got) != "[10.244.3.0/24]" || last.peers[b.Key()].PublicIP != b2.Attrs.PublicIP {
		t.Errorf("plane holds %v (%+v); want b at its new address alone", got, last.peers)
	}
	if plane.mismatch != nil {
		t.Error(plane.mismatch)
	}
}

// TestFamilyPathOwnChanged: a new VTEP MAC of the own lease weighs the peers again without a
// full Apply (a peer that claimed the new MAC is dropped, incrementally); a move of the own
// subnet makes the next Apply full, however little changed among the peers.
func TestFamilyPathOwnChanged(t *testing.T) {
	fp, plane := newTestPath(t)
	peer := vxLease("10.244.2.0/24", "192.0.2.12", 7)
	peer.Created = 5
	fp.Observe(added(peer))
	mustApply(t, fp)

	// The same subnets, and only a new expiry: nothing to apply.
	own := ownLease
	own.Expiration = time.Unix(1e9, 0)
	fp.OwnChanged(own)
	if fp.Busy() {
		t.Fatal("busy after the own lease came back unchanged")
	}

	// The device made again with the MAC the peer claims (older claims win but against the
	// own lease, which beats every peer): the peer goes, incrementally.
	own.Attrs.BackendData = backend.VXLANData{VNI: 1, VtepMAC: backend.MAC{0x0e, 0, 0, 0, 0, 7}}.Encode()
	skipped := fp.OwnChanged(own)
	if len(skipped) != 1 || skipped[0].Key != peer.Key() || skipped[0].Code != backend.SkipDuplicateMAC {
		t.Errorf("skipped %+v; want %s for its MAC", skipped, peer.Key())
	}
	if !fp.Busy() || fp.Full() {
		t.Fatalf("after a new own MAC: busy %t, full %t; want an incremental Apply", fp.Busy(), fp.Full())
	}
	mustApply(t, fp)
	if u := plane.lastUpdate(t); u.Full || fmt.Sprint(keysOf(u)) != fmt.Sprint([]string{peer.Key()}) {
		t.Errorf("Update %+v; want the peer's removal alone", u)
	}

	// The own subnet moved: full, whatever the peers did.
	own.Subnet = netip.MustParsePrefix("10.244.9.0/24")
	fp.OwnChanged(own)
	if !fp.Busy() || !fp.Full() {
		t.Fatalf("after the own subnet moved: busy %t, full %t; want a full Apply", fp.Busy(), fp.Full())
	}
	mustApply(t, fp)
	u := plane.lastUpdate(t)
	if !u.Full {
		t.Errorf("Update %+v after the own subnet moved; want a full one", u)
	}
	if got := fp.set.State().Own; got != own.Subnet {
		t.Errorf("State's own subnet %s; want %s", got, own.Subnet)
	}
}

// TestFamilyPathSiblingMoved: in a dual-stack network, a move of the node's subnet of the
// other family alone makes the IPv4 path's next Apply full, since its State names that
// subnet too (Sibling; a Windows host-gw network carries both families' subnets).
func TestFamilyPathSiblingMoved(t *testing.T) {
	own := ownLease
	own.Attrs.BackendType, own.Attrs.BackendData = subnet.BackendHostGW, nil
	own.IPv6Subnet = netip.MustParsePrefix("fd42:0:0:1::/64")
	own.Attrs.PublicIPv6 = netip.MustParseAddr("fd77::10")
	fp, plane := newTestPathFor(t, `{"Network": "10.244.0.0/16", "EnableIPv6": true, "IPv6Network": "fd42::/48", "Backend": {"Type": "host-gw"}}`, own)
	if got := fp.set.State().Sibling; got != own.IPv6Subnet {
		t.Fatalf("State's sibling %s; want %s", got, own.IPv6Subnet)
	}
	own.IPv6Subnet = netip.MustParsePrefix("fd42:0:0:9::/64")
	fp.OwnChanged(own)
	if !fp.Busy() || !fp.Full() {
		t.Fatalf("after the IPv6 subnet moved: busy %t, full %t; want a full Apply", fp.Busy(), fp.Full())
	}
	mustApply(t, fp)
	if u := plane.lastUpdate(t); !u.Full {
		t.Errorf("Update %+v after the sibling subnet moved; want a full one", u)
	}
	if got := fp.set.State().Sibling; got != own.IPv6Subnet {
		t.Errorf("State's sibling %s; want %s", got, own.IPv6Subnet)
	}
}

// TestFamilyPathDrift: a drift report makes the next Apply full, once; without one, Drifted
// changes nothing.
func TestFamilyPathDrift(t *testing.T) {
	fp, plane := newTestPath(t)
	fp.Drifted()
	if fp.Busy() {
		t.Fatal("busy with no drift reported")
	}
	ctx, cancel := context.WithCancel(t.Context())
	woken := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- fp.Watch(ctx, func() { woken <- struct{}{} }) }()
	plane.drift <- struct{}{}
	<-woken
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Watch: %v", err)
	}
	fp.Drifted()
	if !fp.Busy() || !fp.Full() {
		t.Fatalf("after drift: busy %t, full %t; want a full Apply", fp.Busy(), fp.Full())
	}
	mustApply(t, fp)
	if u := plane.lastUpdate(t); !u.Full {
		t.Errorf("Update %+v after drift; want a full one", u)
	}
	fp.Drifted()
	if fp.Busy() {
		t.Error("a drift report made more than one full Apply")
	}
}

// TestFamilyPathFailureAndResync: a failed Apply makes the next one full, and so does Resync;
// the peers observed meanwhile are in it.
func TestFamilyPathFailureAndResync(t *testing.T) {
	fp, plane := newTestPath(t)
	plane.fail = errors.New("netlink: no buffer space")
	fp.Observe(added(vxLease("10.244.2.0/24", "192.0.2.12", 2)))
	if _, err := fp.Apply(t.Context()); err == nil {
		t.Fatal("Apply did not pass the plane's failure on")
	}
	plane.fail = nil
	if !fp.Busy() || !fp.Full() {
		t.Fatalf("after a failure: busy %t, full %t; want a full Apply", fp.Busy(), fp.Full())
	}
	fp.Observe(added(vxLease("10.244.3.0/24", "192.0.2.13", 3)))
	mustApply(t, fp)
	u := plane.lastUpdate(t)
	last, _ := plane.last()
	if !u.Full || fmt.Sprint(routes(last)) != "[10.244.2.0/24 10.244.3.0/24]" {
		t.Errorf("after the failure: Update %+v, plane %v; want a full Apply of both peers", u, routes(last))
	}
	fp.Resync()
	if !fp.Busy() || !fp.Full() {
		t.Fatalf("after Resync: busy %t, full %t; want a full Apply", fp.Busy(), fp.Full())
	}
}

// TestFamilyPathRemake: an Apply that finds the device gone says so; Remake makes it with
// the MAC the lease publishes, and the next Apply is full.
func TestFamilyPathRemake(t *testing.T) {
	fp, plane := newTestPath(t)
	plane.gone = true
	fp.Resync()
	_, err := fp.Apply(t.Context())
	if missing := new(backend.MissingDeviceError); !errors.As(err, &missing) {
		t.Fatalf("Apply on a deleted device: %v; want a MissingDeviceError", err)
	}
	published := ownLease.Attrs
	published.BackendData = backend.VXLANData{VNI: 1, VtepMAC: backend.MAC{0x0e, 0, 0, 0, 0, 0x42}}.Encode()
	mac, err := fp.Remake(t.Context(), published)
	if err != nil {
		t.Fatal(err)
	}
	if want := (backend.MAC{0x0e, 0, 0, 0, 0, 0x42}); mac != want || plane.asked[len(plane.asked)-1] != want {
		t.Errorf("device made with %s (asked %v); want the published %s", mac, plane.asked, want)
	}
	if !fp.Full() {
		t.Fatal("the Apply after Remake is not full")
	}
	mustApply(t, fp)
}

// TestFamilyPathObserve: the own lease's events are not peers; a lease skipped is reported
// once however often it comes.
func TestFamilyPathObserve(t *testing.T) {
	fp, _ := newTestPath(t)
	if skipped := fp.Observe(added(ownLease)); len(skipped) != 0 || fp.Busy() {
		t.Fatalf("the own lease observed: skipped %+v, busy %t; want nothing", skipped, fp.Busy())
	}
	bad := vxLease("10.244.2.0/24", "192.0.2.10", 2) // this node's public IP
	for i := range 2 {
		skipped := fp.Observe(added(bad))
		if want := 1 - i; len(skipped) != want {
			t.Errorf("observation %d: skipped %+v; want %d", i+1, skipped, want)
		}
	}
	if fp.Busy() {
		t.Error("busy with only a skipped peer")
	}
}
