package backend

import (
	"fmt"

	"github.com/weftnet/weft/subnet"
)

// VXLANOverhead is what VXLAN encapsulation adds to a packet over an IPv4 underlay: outer
// IPv4 (20), UDP (8), VXLAN (8) and inner Ethernet (14) headers.
const VXLANOverhead = 50

// VXLAN6Overhead is the same over an IPv6 underlay (a 40-byte outer header); the kernel
// refuses a larger MTU on a VXLAN device bound to an IPv6 underlay.
const VXLAN6Overhead = 70

// Capabilities are what a data plane can carry, and its defaults where flannel's differ from
// one OS to another. Each Plane declares its own: the network config is checked against them
// (Check), each family's Backend is built with them (NewFor), and the daemon reads them, so
// that nothing above the plane asks which OS it runs on.
type Capabilities struct {
	// OS names the plane in messages: "Windows needs a VNI from 4096 to 65535 (...)".
	OS     string
	VXLAN  VXLANCapabilities
	HostGW HostGWCapabilities
	// WireGuard is the plane's wireguard backend.
	WireGuard WireGuardCapabilities
	// Probes: ICMP echoes sent to the peers' addresses go through what the plane programmed,
	// so the overlay probes tell whether a peer is reachable through it.
	Probes bool
	// ChangeKinds are every kind of entry the plane's Changes count, so that counters by
	// kind can start each at zero.
	ChangeKinds []string
}

// VXLANCapabilities are what the plane's vxlan backend carries.
type VXLANCapabilities struct {
	// DefaultVNI is the VNI of a config that names none. The plane carries the VNIs from
	// MinVNI to MaxVNI; VNIWhy says why, when that is narrower than VXLAN's 24 bits.
	DefaultVNI, MinVNI, MaxVNI uint32
	VNIWhy                     string
	// DefaultPort is the UDP port of a config that names none (Backend.Port 0); with
	// OnlyPort it is the only port the plane carries.
	DefaultPort uint16
	OnlyPort    bool
	// IPv6: the overlay carries the pods' IPv6 (a dual-stack or IPv6-only network).
	IPv6 Feature
	// DirectRouting: peers on the node's own network may be routed without encapsulation.
	DirectRouting Feature
	// GBP: the device carries VXLAN's Group Based Policy extension.
	GBP Feature
	// Overhead and Overhead6 are the bytes encapsulation adds over an IPv4 and an IPv6
	// underlay: the pods' MTU is the underlay's less this.
	Overhead, Overhead6 int
}

// HostGWCapabilities are what the plane's host-gw backend carries.
type HostGWCapabilities struct {
	// IPv6: routes to the peers' IPv6 subnets (a dual-stack or IPv6-only network).
	IPv6 Feature
}

// WireGuardCapabilities are what the plane's wireguard backend carries.
type WireGuardCapabilities struct {
	// Has: the plane runs WireGuard at all.
	Has Feature
	// IPv6: the pods' IPv6 in separate mode, over flannel-wg-v6.
	IPv6 Feature
	// SingleTunnelDualStack: Mode auto, ipv4 or ipv6 in a network with IPv6, where one
	// device carries both families. In an IPv4-only network every mode is one IPv4 device.
	SingleTunnelDualStack Feature
}

// Feature is something a data plane has or lacks.
type Feature struct {
	Has bool
	// Why says why the plane lacks it, in the words that end the message refusing a config
	// that asks for it.
	Why string
}

// Check refuses what the plane cannot carry of cfg with a *subnet.ConfigError naming the key
// of net-conf.json, its value, and why.
func (c Capabilities) Check(cfg *subnet.Config) error {
	lacks := func(key, value string, f Feature, what string) error {
		reason := "not available " + what + "on " + c.OS
		if f.Why != "" {
			reason += ": " + f.Why
		}
		return &subnet.ConfigError{Key: key, Value: value, Reason: reason}
	}
	be := cfg.Backend
	switch be.Type {
	case subnet.BackendHostGW:
		if cfg.EnableIPv6 && !c.HostGW.IPv6.Has {
			return lacks("EnableIPv6", "true", c.HostGW.IPv6, "with host-gw ")
		}
	case subnet.BackendWireGuard:
		w := c.WireGuard
		if !w.Has.Has {
			return lacks("Backend.Type", subnet.BackendWireGuard, w.Has, "")
		}
		if cfg.EnableIPv6 && be.Mode != subnet.WGSeparate && !w.SingleTunnelDualStack.Has {
			return lacks("Backend.Mode", be.Mode, w.SingleTunnelDualStack, "with IPv6 ")
		}
		if cfg.EnableIPv6 && !w.IPv6.Has {
			return lacks("EnableIPv6", "true", w.IPv6, "with wireguard ")
		}
		if cfg.EnableIPv4 && cfg.EnableIPv6 && be.Mode == subnet.WGSeparate && be.ListenPort == be.ListenPortV6 {
			return &subnet.ConfigError{Key: "Backend.ListenPortV6", Value: fmt.Sprint(be.ListenPortV6),
				Reason: "is ListenPort too: in separate mode flannel-wg and flannel-wg-v6 each need a port of their own"}
		}
	case subnet.BackendVXLAN:
		v := c.VXLAN
		if vni := c.VNI(be); vni < v.MinVNI || vni > v.MaxVNI {
			reason := fmt.Sprintf("%s needs a VNI from %d to %d", c.OS, v.MinVNI, v.MaxVNI)
			if v.VNIWhy != "" {
				reason += " (" + v.VNIWhy + ")"
			}
			return &subnet.ConfigError{Key: "Backend.VNI", Value: fmt.Sprint(vni), Reason: reason}
		}
		if cfg.EnableIPv6 && !v.IPv6.Has {
			return lacks("EnableIPv6", "true", v.IPv6, "with vxlan ")
		}
		if be.DirectRouting && !v.DirectRouting.Has {
			return lacks("Backend.DirectRouting", "true", v.DirectRouting, "")
		}
		if be.GBP && !v.GBP.Has {
			return lacks("Backend.GBP", "true", v.GBP, "")
		}
		if p := be.Port; v.OnlyPort && p != 0 && p != v.DefaultPort {
			return &subnet.ConfigError{Key: "Backend.Port", Value: fmt.Sprint(p),
				Reason: fmt.Sprintf("%s only carries VXLAN on UDP port %d", c.OS, v.DefaultPort)}
		}
	}
	return nil
}

// VNI is the VNI of the vxlan backend be: the configured one, else the plane's default.
func (c Capabilities) VNI(be subnet.BackendConfig) uint32 {
	if be.VNI != nil {
		return *be.VNI
	}
	return c.VXLAN.DefaultVNI
}

// Port is the UDP port of the vxlan backend be: the configured one, else the plane's
// default.
func (c Capabilities) Port(be subnet.BackendConfig) uint16 {
	if be.Port != 0 {
		return be.Port
	}
	return c.VXLAN.DefaultPort
}

// Overhead is what the backend of type typ adds to the pods' packets over an underlay of
// family f: VXLAN's headers, nothing for host-gw.
func (c Capabilities) Overhead(typ string, f Family) int {
	switch {
	case typ == subnet.BackendWireGuard:
		return WGOverhead
	case typ != subnet.BackendVXLAN:
		return 0
	case f == IPv6:
		return c.VXLAN.Overhead6
	}
	return c.VXLAN.Overhead
}
