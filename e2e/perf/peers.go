package perf

import (
	"net/netip"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
)

// The cluster network, a /8 cut into /24s as the largest clusters run it (65,536 subnets):
// peers take its subnets from the second on, the node under test leases one of its last four
// (SubnetMin), so that a fake peer never takes the node's own subnet.
const (
	// NetConf is the network config of every run: flannel's vxlan backend, VNI 1.
	NetConf = `{"Network":"10.0.0.0/8","SubnetLen":24,"SubnetMin":"10.255.252.0","SubnetMax":"10.255.255.0",` +
		`"Backend":{"Type":"vxlan","VNI":1}}`
	// MaxPeers is how many peers fit below SubnetMin.
	MaxPeers = 1<<16 - 4 - 1
	// vni is the VNI of NetConf, which peers publish.
	vni = 1
)

// network is NetConf's Network.
func network() netip.Prefix { return netip.MustParsePrefix("10.0.0.0/8") }

// ownKubeSubnet is the podCIDR of the node under test in Kubernetes mode.
func ownKubeSubnet() netip.Prefix { return netip.MustParsePrefix("10.255.255.0/24") }

// peer is the i-th fake peer (1 <= i <= MaxPeers): subnet 10.<i/256>.<i%256>.0/24, public IP
// 198.18.0.0 + i (the benchmarking range; it need not exist, vxlan routes are onlink via the
// peer's VTEP address) and a VTEP MAC of its own.
func peer(i int) (netip.Prefix, subnet.LeaseAttrs) {
	sn := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
	return sn, subnet.LeaseAttrs{
		PublicIP:    peerIP(i),
		BackendType: subnet.BackendVXLAN,
		BackendData: backend.VXLANData{VNI: vni, VtepMAC: peerMAC(i)}.Encode(),
	}
}

// peerIP is peer i's public IP.
func peerIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18 + byte(i>>16), byte(i >> 8), byte(i)})
}

// peerMAC is peer i's VTEP MAC: locally administered unicast.
func peerMAC(i int) backend.MAC {
	return backend.MAC{0x02, 0x57, 0x46, byte(i >> 16), byte(i >> 8), byte(i)}
}

// peerSet is the set of the subnets of peers from..to (inclusive).
func peerSet(from, to int) map[netip.Prefix]struct{} {
	s := make(map[netip.Prefix]struct{}, max(0, to-from+1))
	for i := from; i <= to; i++ {
		sn, _ := peer(i)
		s[sn] = struct{}{}
	}
	return s
}
