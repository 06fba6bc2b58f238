// Package backend translates leases into the data plane a node needs: a pure function from
// (network config, own lease, peer leases) to a desired State of routes, neighbours, FDB
// entries and the VXLAN device. It makes no system calls; the linux and windows packages
// make the system match a State.
package backend

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// MAC is a 48-bit hardware address; unlike net.HardwareAddr it is comparable.
type MAC [6]byte

// ParseMAC reads "c6:d2:32:6f:8f:44" (or with dashes, as HNS writes it).
func ParseMAC(s string) (MAC, error) {
	hw, err := net.ParseMAC(strings.ReplaceAll(s, "-", ":"))
	if err != nil || len(hw) != 6 {
		return MAC{}, fmt.Errorf("%q is not a 48-bit MAC address", s)
	}
	return MAC(hw), nil
}

func (m MAC) String() string { return net.HardwareAddr(m[:]).String() }

// HardwareAddr converts for APIs that take net.HardwareAddr.
func (m MAC) HardwareAddr() net.HardwareAddr { return slices.Clone(m[:]) }

// IsUsable reports whether m can be a VTEP's address: not zero, not multicast.
func (m MAC) IsUsable() bool { return m != MAC{} && m[0]&1 == 0 }

// State is the whole desired data plane of a node. Lists are sorted, so two States of the
// same content are equal element by element.
type State struct {
	// VXLAN is the overlay device; nil for host-gw.
	VXLAN *VXLANDevice
	// Routes to peers' subnets.
	Routes []Route
	// Neighbours (ARP/NDP) on the VXLAN device: a peer's VTEP address to its VTEP MAC.
	Neighbors []Neighbor
	// FDB entries on the VXLAN device: a peer's VTEP MAC to its public IP.
	FDB []FDBEntry
}

// VXLANDevice is the overlay device, flannel.<VNI> on Linux.
type VXLANDevice struct {
	Name     string
	VNI      uint32
	Port     uint16     // UDP destination port; 0 is the kernel's default (8472)
	Local    netip.Addr // source address of the encapsulated packets: the node's public IP
	Underlay string     // external interface the tunnel runs over
	MTU      int
	Learning bool
	GBP      bool
	// Addresses the device holds: <own subnet>.0/32 (and the IPv6 one).
	Addresses []netip.Prefix
}

// Route is a route to a peer's subnet.
type Route struct {
	Dst    netip.Prefix
	Gw     netip.Addr
	Dev    string // outgoing interface by name
	Onlink bool   // the gateway is reachable on Dev without a route to it (VXLAN)
}

// Neighbor maps an address on Dev to a link-layer address, permanently.
type Neighbor struct {
	IP  netip.Addr
	MAC MAC
	Dev string
}

// FDBEntry tells Dev where (the remote public IP) to send frames for MAC.
type FDBEntry struct {
	MAC MAC
	Dst netip.Addr
	Dev string
}

// Skipped is a peer lease left out of the State, and why: Code is one of the Skip*
// constants (a metric label), Reason says it for a human.
type Skipped struct {
	Key    string
	Code   string
	Reason string
}

// Why a peer lease is skipped.
const (
	SkipBackendType  = "backend_type"
	SkipNoSubnet     = "no_subnet"
	SkipOutside      = "outside_network"
	SkipOverlapsOwn  = "overlaps_own"
	SkipOverlapsPeer = "overlaps_peer"
	SkipBadPublicIP  = "bad_public_ip"
	SkipDuplicateIP  = "duplicate_public_ip"
	SkipBadData      = "bad_backend_data"
	SkipVNI          = "vni_mismatch"
	SkipDuplicateMAC = "duplicate_vtep_mac"
	SkipNotOnLink    = "not_on_link"
	SkipMalformed    = "malformed" // the datastore's value could not be read at all
)

// Changes counts the entries a data plane wrote, by kind: "route", "neighbor", "fdb",
// "address", "masquerade", "hns_policy", "hns_endpoint".
type Changes map[string]int

// Total is the number of entries written.
func (c Changes) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// String lists the non-zero kinds, in a stable order.
func (c Changes) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		if c[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", k, c[k]))
		}
	}
	return strings.Join(parts, " ")
}

// Ownership says which system entries are the daemon's, so which ones a data plane may delete.
// Anything else is left alone, however stale it looks: it may belong to an administrator, the
// CNI bridge or another daemon.
type Ownership struct {
	// Networks are the cluster networks (IPv4 and IPv6): only routes whose Dst lies inside
	// one of them can be ours.
	Networks []netip.Prefix
	// Own are the node's own subnets: routes to them belong to the CNI bridge, never to us.
	Own []netip.Prefix
	// Devices are devices whose gatewayed routes into Networks are ours even when the State
	// routes nothing through them: the external interface of host-gw and DirectRouting. Without
	// it the route of the last host-gw peer could never be removed, since an empty
	// State.Routes names no device.
	Devices []string
}

// MissingDeviceError is returned by a data plane's Reconcile when the State's VXLAN device does not exist
// (deleted by hand): the caller must run EnsureVXLAN again, and publish the new device's MAC.
type MissingDeviceError struct{ Name string }

func (e *MissingDeviceError) Error() string {
	return fmt.Sprintf("VXLAN device %q does not exist", e.Name)
}
