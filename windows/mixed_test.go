package windows

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/linux"
	"github.com/weftnet/weft/subnet"
)

// TestMixedClusterAgrees: in a cluster of Linux and Windows nodes on VNI 4096 and port
// 4789, every node programs every other node the same way: the Linux vxlan backend's
// routes, neighbours and FDB entries and the Windows nodes' RemoteSubnetRoute policies name
// the same subnet, VTEP MAC and public IP for each peer, and the VTEP MAC a Windows node
// publishes is its HNS network's DR MAC.
func TestMixedClusterAgrees(t *testing.T) {
	cfg := mustConfig(t, vxlanConf)
	type linuxNode struct {
		b     *backend.Backend
		pub   netip.Addr
		lease subnet.Lease
	}
	var linuxNodes []linuxNode
	var leases []subnet.Lease
	for i, mac := range []string{"c6:d2:32:6f:8f:44", "6e:11:22:33:44:55"} {
		pub := fmt.Sprintf("192.168.1.%d", 21+i)
		l := vxlanLease(t, fmt.Sprintf("10.244.%d.0/24", 11+i), pub, mac)
		b, err := backend.New(cfg, backend.Node{Underlay: "eth0", Addr: netip.MustParseAddr(pub), MTU: 1500,
			Connected: []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")}, PublicIP: netip.MustParseAddr(pub)}, "linux")
		if err != nil {
			t.Fatal(err)
		}
		linuxNodes = append(linuxNodes, linuxNode{b, netip.MustParseAddr(pub), l})
		leases = append(leases, l)
	}
	var wins []*winNode
	for i := range 2 {
		w := newWinNode(t, cfg, fmt.Sprintf("192.168.1.%d", 31+i), hns10, Config{})
		w.hns.opts.MACByte = byte(0xA0 + i)
		leases = append(leases, w.mustAcquire(fmt.Sprintf("10.244.%d.0/24", 21+i)))
		wins = append(wins, w)
	}

	// truth is what every lease says of its node.
	truth := map[netip.Prefix]Peer{}
	for _, l := range leases {
		d, err := backend.DecodeVXLANData(l.Attrs.BackendData)
		if err != nil {
			t.Fatal(err)
		}
		truth[l.Subnet] = Peer{Subnet: l.Subnet, VTEP: l.Subnet.Addr(), VtepMAC: d.VtepMAC, PublicIP: l.Attrs.PublicIP}
	}
	for _, w := range wins {
		n, _ := w.hns.NetworkByName("flannel.4096")
		if dr, _ := n.DRMAC(); dr != truth[w.own.Subnet].VtepMAC {
			t.Errorf("%s publishes VtepMAC %s, its DR MAC is %s", w.pub, truth[w.own.Subnet].VtepMAC, dr)
		}
	}
	check := func(who string, own netip.Prefix, seen map[netip.Prefix]Peer) {
		t.Helper()
		for sn, want := range truth {
			if sn == own {
				continue
			}
			got, ok := seen[sn]
			if !ok {
				t.Errorf("%s does not program %s", who, sn)
				continue
			}
			if got.VtepMAC != want.VtepMAC || got.PublicIP != want.PublicIP {
				t.Errorf("%s programs %s as %s at %s, the lease says %s at %s", who, sn, got.VtepMAC, got.PublicIP, want.VtepMAC, want.PublicIP)
			}
		}
		if len(seen) != len(truth)-1 {
			t.Errorf("%s programs %d peers, want %d", who, len(seen), len(truth)-1)
		}
	}

	for _, ln := range linuxNodes {
		st, skipped := backend.Desired(ln.b, ln.lease, leases, false)
		if len(skipped) > 0 {
			t.Errorf("linux %s skipped %v", ln.pub, skipped)
		}
		if st.Device.VNI != 4096 || st.Device.Port != 4789 {
			t.Errorf("linux device VNI %d port %d", st.Device.VNI, st.Device.Port)
		}
		// What the Linux plane writes for that State.
		want, _ := linux.WantOf(st, true)
		seen := map[netip.Prefix]Peer{}
		neigh := map[netip.Addr]backend.MAC{}
		for _, n := range want.Neighbors {
			neigh[n.IP] = n.MAC
		}
		fdb := map[backend.MAC]netip.Addr{}
		for _, f := range want.FDB {
			fdb[f.MAC] = f.Dst
		}
		for _, r := range want.Routes {
			if !r.Onlink || r.Gw != r.Dst.Addr() {
				t.Errorf("linux %s: route %+v is not via the peer's VTEP address", ln.pub, r)
			}
			seen[r.Dst] = Peer{Subnet: r.Dst, VtepMAC: neigh[r.Gw], PublicIP: fdb[neigh[r.Gw]]}
		}
		check("linux "+ln.pub.String(), ln.lease.Subnet, seen)
	}

	for _, w := range wins {
		w.mustConverge(leases)
		n, err := w.hns.NetworkByName("flannel.4096")
		if err != nil {
			t.Fatal(err)
		}
		seen := map[netip.Prefix]Peer{}
		for _, p := range n.PoliciesOf(PolicyRemoteSubnetRoute) {
			var s RemoteSubnetRouteSettings
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
			seen[sn] = Peer{Subnet: sn, VtepMAC: mac, PublicIP: netip.MustParseAddr(s.ProviderAddress)}
		}
		check("windows "+w.pub.String(), w.own.Subnet, seen)
	}
}
