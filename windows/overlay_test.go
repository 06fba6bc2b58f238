package windows

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/weftnet/weft/backend"
)

// steps renders a plan's policy steps as "-removed... +added" per step.
func steps(pl overlayPlan) []string {
	var out []string
	for _, s := range pl.rsr {
		var parts []string
		for _, r := range s.remove {
			parts = append(parts, "-"+describe([]Policy{r.Policy}))
		}
		if s.add != nil {
			parts = append(parts, "+"+describe([]Policy{s.add.Policy}))
		}
		out = append(out, s.peer+": "+strings.Join(parts, " "))
	}
	for _, s := range pl.eps {
		e := s.ip.String()
		if s.del != nil {
			e += " -" + s.del.id
		}
		if s.create != nil {
			e += " +" + s.create.MacAddress
		}
		out = append(out, s.peer+": "+e)
	}
	return out
}

// overlayModel is the model of a full Apply that programmed peers as RemoteSubnetRoute
// policies (VNI 4096) and remote endpoints ep-<address>.
func overlayModel(rsr []backend.Peer, eps []backend.Peer) *model {
	m := &model{valid: true, overlay: true, vni: 4096, networkID: "net", macPrefix: "0E-2A",
		rsr: map[netip.Prefix]Policy{}, eps: map[netip.Addr]remoteEP{}}
	for _, p := range rsr {
		m.rsr[p.Subnet] = RemoteSubnetRoutePolicy(rsrSettings(p, m.vni))
	}
	for _, p := range eps {
		for _, ip := range podAddresses(p.Subnet) {
			e := remoteEndpoint(m.networkID, m.macPrefix, ip, p.PublicIP)
			e.ID = "ep-" + ip.String()
			m.eps[ip] = remoteEPOf(&e)
		}
	}
	return m
}

// TestOverlayChanges: an incremental Apply's plan comes from the model: at each subnet the
// changes touch, the policy the model has is removed in the step that adds the one the
// changes want, and what the model has already is not written.
func TestOverlayChanges(t *testing.T) {
	a := peer("10.244.2.0/24", "192.168.2.2", "6e:00:00:00:00:02")
	a2 := peer("10.244.2.0/24", "192.168.2.9", "6e:00:00:00:00:02")
	moved := peer("10.244.5.0/24", "192.168.2.2", "6e:00:00:00:00:02")
	b := peer("10.244.3.0/24", "192.168.2.3", "6e:00:00:00:00:03")
	m := overlayModel([]backend.Peer{a}, nil)
	for _, tt := range []struct {
		name    string
		changes []backend.PeerChange
		want    []string
	}{{
		name:    "a's public IP changes, b joins",
		changes: []backend.PeerChange{{Key: "a", Old: a, New: a2}, {Key: "b", New: b}},
		want: []string{
			"a: -10.244.2.0/24>6e:00:00:00:00:02@192.168.2.2 +10.244.2.0/24>6e:00:00:00:00:02@192.168.2.9",
			"b: +10.244.3.0/24>6e:00:00:00:00:03@192.168.2.3",
		},
	}, {
		// The model, not the change's Old, says what is removed.
		name:    "a moves, its Old wrong",
		changes: []backend.PeerChange{{Key: "a", Old: peer("10.244.2.0/24", "192.168.2.77", "6e:00:00:00:00:77"), New: moved}},
		want: []string{
			"a: -10.244.2.0/24>6e:00:00:00:00:02@192.168.2.2",
			"a: +10.244.5.0/24>6e:00:00:00:00:02@192.168.2.2",
		},
	}, {
		name:    "a leaves and c takes its subnet as it was: nothing to write",
		changes: []backend.PeerChange{{Key: "a", Old: a}, {Key: "c", New: a}},
	}, {
		name:    "a changes to what the model has: nothing to write",
		changes: []backend.PeerChange{{Key: "a", Old: a2, New: a}},
	}} {
		if got := steps(m.overlayChanges(tt.changes, PeersRemoteSubnetRoute)); !slices.Equal(got, tt.want) {
			t.Errorf("%s: plan:\n got %q\nwant %q", tt.name, got, tt.want)
		}
	}
}

// TestOverlayEndpointChanges: with remote endpoints, a peer whose public IP changes has each
// pod address's endpoint deleted and made again in one step; a peer that leaves has its
// endpoints deleted.
func TestOverlayEndpointChanges(t *testing.T) {
	a := peer("10.244.2.0/29", "192.168.2.2", "6e:00:00:00:00:02")
	a2 := peer("10.244.2.0/29", "192.168.2.9", "6e:00:00:00:00:02")
	b := peer("10.244.3.0/29", "192.168.2.3", "6e:00:00:00:00:03")
	m := overlayModel(nil, []backend.Peer{a, b})
	got := steps(m.overlayChanges([]backend.PeerChange{{Key: "a", Old: a, New: a2}, {Key: "b", Old: b}}, PeersRemoteEndpoints))
	var want []string
	for i := 2; i <= 6; i++ {
		ip := fmt.Sprintf("10.244.2.%d", i)
		want = append(want, fmt.Sprintf("a: %s -ep-%s +%s", ip, ip, conjureMAC("0E-2A", netip.MustParseAddr(ip))))
	}
	for i := 2; i <= 6; i++ {
		ip := fmt.Sprintf("10.244.3.%d", i)
		want = append(want, fmt.Sprintf("b: %s -ep-%s", ip, ip))
	}
	if !slices.Equal(got, want) {
		t.Errorf("plan:\n got %q\nwant %q", got, want)
	}
}

// TestRouteChanges: host-gw's incremental plan from the family's model: new routes are added
// before old ones are deleted; what the model has already is not written; a peer that leaves
// has the model's route deleted, whatever its Old says.
func TestRouteChanges(t *testing.T) {
	ifs := []Interface{{Index: 7, Name: "Ethernet", Prefixes: []netip.Prefix{netip.MustParsePrefix("192.168.1.10/24")}}}
	route := func(sn, gw string) HostRoute {
		return HostRoute{Dst: netip.MustParsePrefix(sn), NextHop: netip.MustParseAddr(gw), IfIndex: 7, Protocol: ProtoNetMgmt}
	}
	hg := func(sn, gw string) backend.Peer {
		return backend.Peer{Subnet: netip.MustParsePrefix(sn), PublicIP: netip.MustParseAddr(gw)}
	}
	m := &model{valid: true, ifs: ifs, routes: map[netip.Prefix]HostRoute{}}
	for _, r := range []HostRoute{route("10.244.2.0/24", "192.168.1.11"), route("10.244.3.0/24", "192.168.1.12")} {
		m.routes[r.Dst] = r
	}
	pl, err := m.routeChanges([]backend.PeerChange{
		{Key: "a", Old: hg("10.244.2.0/24", "192.168.1.11"), New: hg("10.244.2.0/24", "192.168.1.21")},
		{Key: "b", Old: hg("10.244.3.0/24", "192.168.1.99")},
		{Key: "c", New: hg("10.244.4.0/24", "192.168.1.12")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range pl.add {
		got = append(got, e.peer+": +"+e.route.String())
	}
	for _, e := range pl.del {
		got = append(got, e.peer+": -"+e.route.String())
	}
	want := []string{
		"a: +10.244.2.0/24 via 192.168.1.21 if 7",
		"c: +10.244.4.0/24 via 192.168.1.12 if 7",
		"a: -10.244.2.0/24 via 192.168.1.11 if 7",
		"b: -10.244.3.0/24 via 192.168.1.12 if 7",
	}
	if !slices.Equal(got, want) {
		t.Errorf("plan:\n got %q\nwant %q", got, want)
	}

	// A peer leaves and another takes its subnet with the same route in one batch: the
	// route the model has is what both together want, so nothing is written.
	pl, err = m.routeChanges([]backend.PeerChange{
		{Key: "b", Old: hg("10.244.3.0/24", "192.168.1.12")},
		{Key: "d", New: hg("10.244.3.0/24", "192.168.1.12")},
	})
	if err != nil || len(pl.add)+len(pl.del) != 0 {
		t.Errorf("plan %+v (%v), want nothing", pl, err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("plan:\n got %q\nwant %q", got, want)
	}
}
