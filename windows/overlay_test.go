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
// policies (VNI 4096) and remote endpoints ep-<address>, each peer keyed by its name in keys.
func overlayModel(rsr, eps map[string]backend.Peer) *netModel {
	m := &netModel{overlay: true, vni: 4096, networkID: "net", macPrefix: "0E-2A", v4: newFamModel(netip.Prefix{})}
	m.v4.valid = true
	for key, p := range rsr {
		m.v4.peers[key] = p.Subnet
		m.v4.rsr[p.Subnet] = RemoteSubnetRoutePolicy(rsrSettings(p, m.vni))
	}
	for key, p := range eps {
		m.v4.peers[key] = p.Subnet
		for _, ip := range podAddresses(p.Subnet) {
			e := remoteEndpoint(m.networkID, m.macPrefix, ip, p.PublicIP)
			e.ID = "ep-" + ip.String()
			m.v4.eps[ip] = remoteEPOf(&e)
		}
	}
	return m
}

// TestOverlayChanges: an incremental Apply's plan comes from the model: at each subnet the
// changes touch, the policy the model has is removed in the step that adds the one the
// changes want, and what the model has already is not written. What a peer had is the
// model's to know: a change's Old, wrong or missing, changes nothing.
func TestOverlayChanges(t *testing.T) {
	a := peer("10.244.2.0/24", "192.168.2.2", "6e:00:00:00:00:02")
	a2 := peer("10.244.2.0/24", "192.168.2.9", "6e:00:00:00:00:02")
	moved := peer("10.244.5.0/24", "192.168.2.2", "6e:00:00:00:00:02")
	b := peer("10.244.3.0/24", "192.168.2.3", "6e:00:00:00:00:03")
	aMoves := []string{
		"a: -10.244.2.0/24>6e:00:00:00:00:02@192.168.2.2",
		"a: +10.244.5.0/24>6e:00:00:00:00:02@192.168.2.2",
	}
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
		name:    "a moves, its Old's public IP and MAC wrong",
		changes: []backend.PeerChange{{Key: "a", Old: peer("10.244.2.0/24", "192.168.2.77", "6e:00:00:00:00:77"), New: moved}},
		want:    aMoves,
	}, {
		name:    "a moves, its Old naming another subnet",
		changes: []backend.PeerChange{{Key: "a", Old: b, New: moved}},
		want:    aMoves,
	}, {
		name:    "a moves, its Old missing",
		changes: []backend.PeerChange{{Key: "a", New: moved}},
		want:    aMoves,
	}, {
		name:    "a leaves, its Old missing",
		changes: []backend.PeerChange{{Key: "a"}},
		want:    []string{"a: -10.244.2.0/24>6e:00:00:00:00:02@192.168.2.2"},
	}, {
		name:    "b, which the model does not have, leaves: nothing to write",
		changes: []backend.PeerChange{{Key: "b", Old: a}},
	}, {
		name:    "a leaves and c takes its subnet as it was: nothing to write",
		changes: []backend.PeerChange{{Key: "a", Old: a}, {Key: "c", New: a}},
	}, {
		name:    "a changes to what the model has: nothing to write",
		changes: []backend.PeerChange{{Key: "a", Old: a2, New: a}},
	}} {
		m := overlayModel(map[string]backend.Peer{"a": a}, nil)
		if got := steps(m.overlayChanges(&m.v4, tt.changes, PeersRemoteSubnetRoute)); !slices.Equal(got, tt.want) {
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
	m := overlayModel(nil, map[string]backend.Peer{"a": a, "b": b})
	got := steps(m.overlayChanges(&m.v4, []backend.PeerChange{{Key: "a", Old: a, New: a2}, {Key: "b", Old: b}}, PeersRemoteEndpoints))
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
// has the route the model has for it deleted, whatever its Old says.
func TestRouteChanges(t *testing.T) {
	ifs := []Interface{{Index: 7, Name: "Ethernet", Prefixes: []netip.Prefix{netip.MustParsePrefix("192.168.1.10/24")}}}
	route := func(sn, gw string) HostRoute {
		return HostRoute{Dst: netip.MustParsePrefix(sn), NextHop: netip.MustParseAddr(gw), IfIndex: 7, Protocol: ProtoNetMgmt}
	}
	hg := func(sn, gw string) backend.Peer {
		return backend.Peer{Subnet: netip.MustParsePrefix(sn), PublicIP: netip.MustParseAddr(gw)}
	}
	// The model of a full Apply that programmed a and b.
	model := func() *netModel {
		m := &netModel{ifs: ifs, v4: newFamModel(netip.MustParsePrefix("10.244.1.0/24"))}
		m.v4.valid = true
		for key, r := range map[string]HostRoute{"a": route("10.244.2.0/24", "192.168.1.11"), "b": route("10.244.3.0/24", "192.168.1.12")} {
			m.v4.peers[key], m.v4.routes[r.Dst] = r.Dst, r
		}
		return m
	}
	m := model()
	pl, err := m.routeChanges(&m.v4, []backend.PeerChange{
		{Key: "a", Old: hg("10.244.2.0/24", "192.168.1.11"), New: hg("10.244.2.0/24", "192.168.1.21")},
		{Key: "b", Old: hg("10.244.9.0/24", "192.168.1.99")}, // an Old that is not what the plane programmed
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
	m = model()
	pl, err = m.routeChanges(&m.v4, []backend.PeerChange{
		{Key: "b"},
		{Key: "d", New: hg("10.244.3.0/24", "192.168.1.12")},
	})
	if err != nil || len(pl.add)+len(pl.del) != 0 {
		t.Errorf("plan %+v (%v), want nothing", pl, err)
	}
}
