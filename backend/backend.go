// Package backend translates leases into the data plane a node needs, and defines the seam
// every OS's data plane implements.
//
// A Backend (vxlan or host-gw), built once from the network config and the node's external
// interface, turns one peer lease into a Peer: how to reach that peer's subnet. A Set keeps
// every peer lease and the State the node should program, one lease at a time: an event costs
// work proportional to what it changed, not to the size of the cluster. Conflicting claims
// (two leases for one subnet, public IP or VTEP MAC) are settled the same way on every node.
// A Plane (linux, windows) makes the system match a State. Nothing here makes system calls.
package backend

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/weftnet/weft/subnet"
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

// State is the whole desired data plane of a node.
type State struct {
	// Config is the network config in force; planes read its Network and the backend keys
	// of their OS (the HNS network name, DNS servers).
	Config *subnet.Config
	// Family is the IP family the State programs: its network, subnets and device.
	Family Family
	// Own is the node's subnet in the family; invalid before the lease is known.
	Own netip.Prefix
	// Sibling is the node's subnet of the other family in a dual-stack network (invalid
	// otherwise), for a data plane that makes one network for both (HNS's L2Bridge).
	Sibling netip.Prefix
	// Underlay is the external interface: host-gw and DirectRouting routes go out of it,
	// and on Windows the HNS network is bound to its adapter.
	Underlay string
	// Device is the overlay device; nil for host-gw and wireguard.
	Device *VXLANDevice
	// WireGuard is the WireGuard device; nil for the other backends.
	WireGuard *WireGuardDevice
	// Masquerade: pod traffic leaving the network is masqueraded (--ip-masq).
	Masquerade bool
	// Peers are the peers to program, by lease key.
	Peers Peers
}

// Peers are the peers a State programs, by lease key: a view of a Set (which keeps no second
// copy of them), or a PeerMap.
type Peers interface {
	Len() int
	All() iter.Seq2[string, Peer]
}

// PeerMap is Peers held in a map, for a State built by hand.
type PeerMap map[string]Peer

// Len is the number of peers.
func (m PeerMap) Len() int { return len(m) }

// All yields every peer.
func (m PeerMap) All() iter.Seq2[string, Peer] { return maps.All(m) }

// Network is the family's cluster network.
func (s *State) Network() netip.Prefix { return s.family().Network(s.Config) }

// SubnetLen is the length of the family's node subnets.
func (s *State) SubnetLen() int { return s.family().SubnetLen(s.Config) }

// family is the State's family; a State built by hand without one is IPv4.
func (s *State) family() Family {
	if s.Family == 0 {
		return IPv4
	}
	return s.Family
}

// DeviceAddresses are the addresses the overlay device holds: the own subnet's first
// address, alone (<subnet>.0/32, <subnet>::/128), as flannel gives it.
func (s *State) DeviceAddresses() []netip.Prefix {
	if (s.Device == nil && s.WireGuard == nil) || !s.Own.IsValid() {
		return nil
	}
	return []netip.Prefix{netip.PrefixFrom(s.Own.Masked().Addr(), s.Own.Addr().BitLen())}
}

// VXLANDevice is the overlay device, flannel.<VNI> on Linux.
type VXLANDevice struct {
	Name     string // flannel.<VNI>, flannel-v6.<VNI>
	VNI      uint32
	Port     uint16     // UDP destination port; 0 is the kernel's default (8472)
	Local    netip.Addr // source address of the encapsulated packets, of the device's family
	Underlay string     // external interface the tunnel runs over
	MTU      int
	Learning bool
	GBP      bool
	// MAC, if set, is the MAC a device that must be made gets: the one the node's lease
	// publishes, when the device was deleted under the daemon, so that the peers, which
	// know that MAC, reach it again as soon as it is back, even with the datastore down.
	// Zero: a random one. An existing device keeps its own.
	MAC MAC
}

// Peer is how the node reaches one peer's subnet.
type Peer struct {
	Subnet   netip.Prefix
	PublicIP netip.Addr
	// VTEPMAC is the MAC of the peer's overlay device: its subnet is reached through the
	// overlay, at the VTEP address <subnet>.0. Zero when the subnet is routed straight to
	// PublicIP on the underlay (host-gw, and DirectRouting peers on a connected network).
	VTEPMAC MAC
	// WireGuard is a wireguard peer's key and endpoint; nil for the other backends, whose
	// peers (tens of thousands of them, in several copies) need not carry its 64 bytes.
	// Never changed once made: copies of a Peer share it.
	WireGuard *WireGuardPeer
}

// WireGuardPeer is what a wireguard peer has besides a Peer's other fields.
type WireGuardPeer struct {
	// Key is the peer's public key.
	Key Key
	// Endpoint is the address and UDP port its device is dialled at: PublicIP's in separate
	// mode; in flannel's single-tunnel modes (one device for both families) the one address
	// the mode picks for both halves of the lease.
	Endpoint netip.AddrPort
}

// IsValid reports whether p is a peer at all: the zero Peer stands for none.
func (p Peer) IsValid() bool { return p.Subnet.IsValid() }

// Equal reports whether p and q are the same peer, their WireGuard parts compared by value
// (== compares where they are).
func (p Peer) Equal(q Peer) bool {
	pw, qw := p.WireGuard, q.WireGuard
	p.WireGuard, q.WireGuard = nil, nil
	return p == q && (pw == qw || pw != nil && qw != nil && *pw == *qw)
}

// WGKey is a wireguard peer's public key; zero for the others.
func (p Peer) WGKey() Key {
	if p.WireGuard == nil {
		return Key{}
	}
	return p.WireGuard.Key
}

// Overlay reports whether p is reached through the overlay device.
func (p Peer) Overlay() bool { return p.VTEPMAC != MAC{} }

// VTEP is the address of the peer's overlay device: its subnet's first address.
func (p Peer) VTEP() netip.Addr { return p.Subnet.Masked().Addr() }

// Update says what a Plane's Apply must look at.
type Update struct {
	// Full: dump the system and diff it against the whole State (start-up, the periodic
	// resync, drift, a failed write, a change of the own lease or the device).
	Full bool
	// Peers that changed since the last Apply, when not Full: one change per key.
	Peers []PeerChange
}

// PeerChange is one peer's change: Old is what the previous State programmed, New what this
// one wants; a zero Peer stands for none.
type PeerChange struct {
	Key      string
	Old, New Peer
}

// Plane is a node's data plane: the kernel over netlink on Linux, HNS on Windows. Every
// method that talks to the system takes a context, so a stopping daemon never waits on a
// slow system.
type Plane interface {
	// Prepare makes (or adopts) the device st needs for its own subnet and returns the MAC
	// to publish as the node's VTEP MAC (zero for host-gw). It runs inside the lease
	// acquisition, before the lease is published, and again when Apply reports the device
	// missing (a *MissingDeviceError).
	Prepare(ctx context.Context, st *State) (MAC, error)
	// Apply makes the system match st: all of it on a Full update, else the changed peers
	// only, from the plane's model of what it programmed. It goes on past a failing entry and
	// returns what it wrote with the errors joined; the caller follows a failure with a Full
	// update.
	Apply(ctx context.Context, st *State, u Update) (Changes, error)
	// Watch calls drift, from one goroutine, whenever the system changes in a way the plane
	// did not make, until ctx is done; it returns nil then. A plane that cannot see changes
	// waits for ctx.
	Watch(ctx context.Context, drift func()) error
	// Close releases the plane's handles; what it programmed stays.
	Close() error
	// Capabilities are what the plane can carry, and its defaults. The States it is given
	// are made from a config that Capabilities().Check accepted: the plane need not check
	// them again.
	Capabilities() Capabilities
}

// MACChanger is a Plane that can give its overlay device a new VTEP MAC in place. The daemon
// asks for one when an older peer lease claims the node's MAC: every node then programs that
// lease and skips the node's, which is cut off from its peers until its MAC changes (a device
// made again with the MAC of a lease someone else had written, a cloned VM's device).
type MACChanger interface {
	// ChangeMAC gives the State's overlay device a new random MAC, keeping the device, and
	// returns it. The next Apply must be a full one: the system may drop entries of the
	// device with its old address (Linux drops its neighbours).
	ChangeMAC(ctx context.Context, st *State) (MAC, error)
}

// SubnetKeeper is a Plane whose device outlives weftd and serves one subnet, so that a lease
// on another replaces it (an HNS network, whose every re-creation blinks the host's NIC).
// Held returns the subnets of the device it finds for st's network, invalid ones if it finds
// none: the lease acquisition asks for them when the node has no subnet.env, as after a
// weftd stopped between making the device and publishing the lease.
type SubnetKeeper interface {
	Held(st *State) (sn, sn6 netip.Prefix)
}

// TxChecksumOffloader is a Plane that can switch transmit checksum offload on its overlay
// device. Some kernel, NIC and hypervisor combinations corrupt the checksums the device leaves
// to offload, so TCP and UDP through the tunnel die while ICMP passes; turning the offload off
// there fixes it, and costs throughput where nothing was broken. The daemon asks for it
// when a Plane offers it.
type TxChecksumOffloader interface {
	// TxChecksumOffload reports whether the device dev offloads transmit checksums.
	TxChecksumOffload(dev string) (bool, error)
	// SetTxChecksumOffload turns it on or off, and fails unless the device then is so.
	SetTxChecksumOffload(ctx context.Context, dev string, on bool) error
}

// WireGuardRunner is a Plane that runs WireGuard devices, and says how.
type WireGuardRunner interface {
	// Implementation is "kernel" or "user space" for the device dev it made, "" for none.
	Implementation(dev string) string
	// PeerHandshakes is when each peer of the device dev last completed a handshake (zero:
	// never), as the device itself says; it must not wait on the plane's Apply.
	PeerHandshakes(dev string) ([]time.Time, error)
}

// Skipped is a peer lease left out of the State, and why: Code is one of the Skip*
// constants (a metric label), Reason says it for a human.
type Skipped struct {
	Key    string
	Family Family // the half of the lease that is skipped: the other may be programmed
	Code   string
	Reason string
	// ClashesWith is the key of the lease that wins a claim this one also makes (the same
	// subnet, public IP or VTEP MAC): the older peer lease, or this node's own lease.
	ClashesWith string
	// Contests: the lease claims this node's own subnet, public IP or VTEP MAC and is older
	// than the node's lease: this node is the newcomer (a clone, a misconfiguration), and its
	// operator must hear of it; the node keeps its own claim meanwhile.
	Contests bool
	// typ is, for SkipBackendType, the backend type the lease publishes: a Set keeps the
	// type of no lease but those (the others' is the node's).
	typ string
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
	SkipDuplicateKey = "duplicate_wireguard_key"
	SkipNotOnLink    = "not_on_link"
	SkipMalformed    = "malformed" // the datastore's value could not be read at all
)

// SkipCodes lists every Skip* code, for counters that start each at zero.
func SkipCodes() []string {
	return []string{SkipBackendType, SkipNoSubnet, SkipOutside, SkipOverlapsOwn, SkipOverlapsPeer, SkipBadPublicIP,
		SkipDuplicateIP, SkipBadData, SkipVNI, SkipDuplicateMAC, SkipDuplicateKey, SkipNotOnLink, SkipMalformed}
}

// Changes counts the entries a data plane wrote, by kind ("route", "fdb", "hns_policy"):
// the kinds the plane's Capabilities list in ChangeKinds.
type Changes map[string]int

// Add adds o's counts to c; c may be nil.
func (c Changes) Add(o Changes) Changes {
	if len(o) == 0 {
		return c
	}
	if c == nil {
		c = Changes{}
	}
	for k, v := range o {
		c[k] += v
	}
	return c
}

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

// MissingDeviceError is returned by a Plane's Apply when the State's device does not exist
// (deleted by hand, or HNS lost its network): the caller must Prepare again and publish the
// new device's MAC.
type MissingDeviceError struct{ Name string }

func (e *MissingDeviceError) Error() string {
	return fmt.Sprintf("overlay device %q does not exist", e.Name)
}

// PlausibleUnicast reports whether a can be a node's address: a valid unicast address that
// is not loopback, multicast, link-local, unspecified or the IPv4 broadcast address.
func PlausibleUnicast(a netip.Addr) bool {
	return a.IsValid() && a.Zone() == "" && !a.IsUnspecified() && !a.IsLoopback() && !a.IsMulticast() &&
		!a.IsLinkLocalUnicast() && !a.IsLinkLocalMulticast() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// OnLink reports whether a lies in one of the directly connected networks nets.
func OnLink(nets []netip.Prefix, a netip.Addr) bool {
	for _, p := range nets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
