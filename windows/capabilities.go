package windows

import "github.com/weftnet/weft/backend"

// HNS's VXLAN, as flanneld's Windows backend uses it and hcn carries it.
const (
	// minVNI is the lowest VSID HNS takes for an Overlay network: flanneld's Windows default.
	minVNI = 4096
	// maxVNI is the highest VNI hcn's RemoteSubnetRoute policy carries, in 16 bits.
	maxVNI = 1<<16 - 1
	// vxlanPort is the only UDP port HNS carries VXLAN on.
	vxlanPort = 4789
)

// Capabilities are what the HNS data plane carries, as flanneld's Windows backends: vxlan
// (an Overlay network) with a VNI from 4096 to 65535 on port 4789, IPv4 only, always
// encapsulated; host-gw (an L2Bridge network) in both families. The overlay probes are not
// written for HNS yet.
func Capabilities() backend.Capabilities {
	return backend.Capabilities{
		OS: "Windows",
		VXLAN: backend.VXLANCapabilities{
			DefaultVNI: minVNI, MinVNI: minVNI, MaxVNI: maxVNI,
			VNIWhy:      "HNS takes Overlay VSIDs from 4096 and keeps them in 16 bits",
			DefaultPort: vxlanPort, OnlyPort: true,
			IPv6:          backend.Feature{Why: "HNS Overlay networks cannot carry IPv6 between pods (host-gw, an L2Bridge network, can)"},
			DirectRouting: backend.Feature{Why: "HNS overlay networks always encapsulate"},
			GBP:           backend.Feature{Why: "flanneld refuses it on Windows too"},
			Overhead:      backend.VXLANOverhead,
			Overhead6:     backend.VXLAN6Overhead,
		},
		HostGW: backend.HostGWCapabilities{IPv6: backend.Feature{Has: true}},
		// flanneld's wireguard backend is not built for Windows: a node there stops on such a
		// config, and so does weftd, saying so.
		WireGuard:   backend.WireGuardCapabilities{Has: backend.Feature{Why: "flanneld has no WireGuard backend on Windows either; run Linux nodes, or vxlan or host-gw"}},
		ChangeKinds: []string{changeNetwork, changePolicy, changeEndpoint, changeNamespace, changeForward, changeRoute},
	}
}

// Capabilities implements backend.Plane: see the package's Capabilities.
func (p *Plane) Capabilities() backend.Capabilities { return Capabilities() }
