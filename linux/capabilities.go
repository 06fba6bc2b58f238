package linux

import (
	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
)

// defaultVXLANPort is the port the kernel gives a VXLAN device created without one (the
// vxlan module's vxlan_port parameter, which nobody changes).
const defaultVXLANPort = 8472

// Capabilities are what the netlink data plane carries: all flannel's vxlan and host-gw
// backends do on Linux, in both families, with flannel's Linux defaults (VNI 1, the kernel's
// port).
func Capabilities() backend.Capabilities {
	return backend.Capabilities{
		OS: "Linux",
		VXLAN: backend.VXLANCapabilities{
			DefaultVNI: 1, MinVNI: 0, MaxVNI: subnet.MaxVNI,
			DefaultPort:   defaultVXLANPort,
			IPv6:          backend.Feature{Has: true},
			DirectRouting: backend.Feature{Has: true},
			GBP:           backend.Feature{Has: true},
			Overhead:      backend.VXLANOverhead,
			Overhead6:     backend.VXLAN6Overhead,
		},
		HostGW: backend.HostGWCapabilities{IPv6: backend.Feature{Has: true}},
		WireGuard: backend.WireGuardCapabilities{
			Has:                   backend.Feature{Has: true},
			IPv6:                  backend.Feature{Has: true},
			SingleTunnelDualStack: backend.Feature{Has: true},
		},
		Probes: true,
	}
}
