package daemon

import (
	"net/netip"
	"testing"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/probe"
)

// TestProbeTarget: a peer is probed where it answers through what weft programmed for it, and
// its transport is checked only when it is reached through the overlay device.
func TestProbeTarget(t *testing.T) {
	sn := netip.MustParsePrefix("10.244.7.0/24")
	ip := netip.MustParseAddr("192.0.2.7")
	behind := netip.MustParseAddr("10.244.7.254")
	for _, tc := range []struct {
		name string
		p    backend.Peer
		want probe.Target
	}{
		{"vxlan", backend.Peer{Subnet: sn, PublicIP: ip, VTEPMAC: backend.MAC{0x0e, 7}},
			probe.Target{Key: "k", Addr: netip.MustParseAddr("10.244.7.0"), Behind: behind, Transport: true}},
		{"routed", backend.Peer{Subnet: sn, PublicIP: ip},
			probe.Target{Key: "k", Addr: netip.MustParseAddr("10.244.7.1"), Behind: behind}},
		{"wireguard", backend.Peer{Subnet: sn, PublicIP: ip, WireGuard: &backend.WireGuardPeer{}},
			probe.Target{Key: "k", Addr: netip.MustParseAddr("10.244.7.0"), Behind: behind}},
	} {
		if got := probeTarget("k", tc.p); got != tc.want {
			t.Errorf("%s: %+v; want %+v", tc.name, got, tc.want)
		}
	}
}
