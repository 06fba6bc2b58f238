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

// TestOverlayChanges: an incremental Apply's plan comes from the model: per change, the
// policies the model has at the subnets it touches are removed before the new one is added,
// in one step, and what the model has already is not written.
func TestOverlayChanges(t *testing.T) {
	a := peer("10.244.2.0/24", "192.168.2.2", "6e:00:00:00:00:02")
	a2 := peer("10.244.2.0/24", "192.168.2.9", "6e:00:00:00:00:02")
	moved := peer("10.244.5.0/24", "192.168.2.2", "6e:00:00:00:00:02")
	b := peer("10.244.3.0/24", "192.168.2.3", "6e:00:00:00:00:03")
	m := overlayModel([]backend.Peer{a}, nil)
	got := steps(m.overlayChanges([]backend.PeerChange{
		{Key: "a", Old: a, New: a2},
		{Key: "b", New: b},
		{Key: "same", Old: a, New: a}, // what the model has: nothing to write
	}, PeersRemoteSubnetRoute))
	want := []string{
		"a: -10.244.2.0/24>6e:00:00:00:00:02@192.168.2.2 +10.244.2.0/24>6e:00:00:00:00:02@192.168.2.9",
		"b: +10.244.3.0/24>6e:00:00:00:00:03@192.168.2.3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("plan:\n got %q\nwant %q", got, want)
	}

	// The model, not the change's Old, says what is removed; a subnet change removes the old
	// subnet's policy in the step that adds the new one.
	wrongOld := peer("10.244.2.0/24", "192.168.2.77", "6e:00:00:00:00:77")
	got = steps(m.overlayChanges([]backend.PeerChange{{Key: "a", Old: wrongOld, New: moved}}, PeersRemoteSubnetRoute))
	want = []string{"a: -10.244.2.0/24>6e:00:00:00:00:02@192.168.2.2 +10.244.5.0/24>6e:00:00:00:00:02@192.168.2.2"}
	if !slices.Equal(got, want) {
		t.Errorf("plan:\n got %q\nwant %q", got, want)
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
