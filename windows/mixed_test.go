package windows_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/linux"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

// TestMixedClusterAgrees: in a cluster of Linux and Windows nodes on VNI 4096 and port
// 4789, every node programs every other node the same way: the peers of a Linux node's
// State and the Windows nodes' RemoteSubnetRoute policies name the same subnet, VTEP MAC
// and public IP for each peer, and the VTEP MAC a Windows node publishes is its HNS
// network's DR MAC.
func TestMixedClusterAgrees(t *testing.T) {
	cfg := mustConfig(t, vxlanConf)
	type linuxNode struct {
		b     *backend.Backend
		lease subnet.Lease
	}
	var linuxNodes []linuxNode
	var leases []subnet.Lease
	for i, mac := range []string{"c6:d2:32:6f:8f:44", "6e:11:22:33:44:55"} {
		pub := netip.MustParseAddr(fmt.Sprintf("192.168.1.%d", 21+i))
		l := vxlanLease(t, fmt.Sprintf("10.244.%d.0/24", 11+i), pub.String(), mac)
		b, err := backend.NewFor(cfg, backend.Node{Underlay: "eth0", Addr: pub, PublicIP: pub, MTU: 1500,
			Connected: []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")}}, linux.Capabilities(), backend.IPv4)
		if err != nil {
			t.Fatal(err)
		}
		linuxNodes = append(linuxNodes, linuxNode{b, l})
		leases = append(leases, l)
	}
	var wins []*winNode
	for i := range 2 {
		w := newWinNode(t, cfg, fmt.Sprintf("192.168.1.%d", 31+i), hns10, windows.Config{},
			func(o *hnstest.Options) { o.MACByte = byte(0xA0 + i) })
		leases = append(leases, w.mustAcquire(fmt.Sprintf("10.244.%d.0/24", 21+i)))
		wins = append(wins, w)
	}

	// truth is what every lease says of its node.
	truth := map[netip.Prefix]backend.Peer{}
	for _, l := range leases {
		d, err := backend.DecodeVXLANData(l.Attrs.BackendData)
		if err != nil {
			t.Fatal(err)
		}
		truth[l.Subnet] = backend.Peer{Subnet: l.Subnet, VTEPMAC: d.VtepMAC, PublicIP: l.Attrs.PublicIP}
	}
	for _, w := range wins {
		if dr, _ := w.network("flannel.4096").DRMAC(); dr != truth[w.own.Subnet].VTEPMAC {
			t.Errorf("%s publishes VtepMAC %s, its DR MAC is %s", w.pub, truth[w.own.Subnet].VTEPMAC, dr)
		}
	}
	check := func(who string, own netip.Prefix, seen map[netip.Prefix]backend.Peer) {
		t.Helper()
		for sn, want := range truth {
			if sn == own {
				continue
			}
			if got, ok := seen[sn]; !ok {
				t.Errorf("%s does not program %s", who, sn)
			} else if got != want {
				t.Errorf("%s programs %s as %s at %s, the lease says %s at %s", who, sn, got.VTEPMAC, got.PublicIP, want.VTEPMAC, want.PublicIP)
			}
		}
		if len(seen) != len(truth)-1 {
			t.Errorf("%s programs %d peers, want %d", who, len(seen), len(truth)-1)
		}
	}

	for _, ln := range linuxNodes {
		st, skipped := backend.Desired(ln.b, ln.lease, leases, false)
		if len(skipped) > 0 {
			t.Errorf("linux %s skipped %v", ln.lease.Attrs.PublicIP, skipped)
		}
		if st.Device.VNI != 4096 || st.Device.Port != 4789 {
			t.Errorf("linux device VNI %d port %d", st.Device.VNI, st.Device.Port)
		}
		seen := map[netip.Prefix]backend.Peer{}
		for _, p := range st.Peers.All() {
			seen[p.Subnet] = p
		}
		check("linux "+ln.lease.Attrs.PublicIP.String(), ln.lease.Subnet, seen)
	}

	for _, w := range wins {
		w.mustConverge(leases)
		seen := map[netip.Prefix]backend.Peer{}
		for _, p := range w.network("flannel.4096").PoliciesOf(windows.PolicyRemoteSubnetRoute) {
			var s windows.RemoteSubnetRouteSettings
			if err := p.Decode(&s); err != nil {
				t.Fatal(err)
			}
			if s.IsolationID != 4096 {
				t.Errorf("windows %s: policy %s has IsolationId %d", w.pub, s.DestinationPrefix, s.IsolationID)
			}
			mac, err := backend.ParseMAC(s.DistributedRouterMacAddress)
			if err != nil {
				t.Fatal(err)
			}
			sn := netip.MustParsePrefix(s.DestinationPrefix)
			seen[sn] = backend.Peer{Subnet: sn, VTEPMAC: mac, PublicIP: netip.MustParseAddr(s.ProviderAddress)}
		}
		check("windows "+w.pub.String(), w.own.Subnet, seen)
	}
}
