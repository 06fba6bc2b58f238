package backend

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/weftnet/weft/subnet"
)

// VXLANOverhead is what VXLAN encapsulation adds to a packet (IPv4 underlay).
const VXLANOverhead = 50

// VXLANDeviceName is flannel's name for the overlay device of a VNI.
func VXLANDeviceName(vni uint32) string { return "flannel." + strconv.FormatUint(uint64(vni), 10) }

// VXLANData is the BackendData of a vxlan lease: {"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}.
type VXLANData struct {
	VNI     uint32
	VtepMAC MAC
}

type wireVXLANData struct {
	VNI     uint32
	VtepMAC string
}

// Encode renders the lease data as flannel writes it.
func (d VXLANData) Encode() json.RawMessage {
	b, _ := json.Marshal(wireVXLANData{VNI: d.VNI, VtepMAC: d.VtepMAC.String()}) // cannot fail
	return b
}

// DecodeVXLANData parses a peer's BackendData.
func DecodeVXLANData(raw json.RawMessage) (VXLANData, error) {
	var w wireVXLANData
	if len(raw) == 0 {
		return VXLANData{}, errors.New("no backend data")
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return VXLANData{}, fmt.Errorf("backend data: %w", err)
	}
	mac, err := ParseMAC(w.VtepMAC)
	if err != nil {
		return VXLANData{}, fmt.Errorf("backend data: VtepMAC: %w", err)
	}
	if !mac.IsUsable() {
		return VXLANData{}, fmt.Errorf("backend data: VtepMAC %s is not a unicast address", mac)
	}
	return VXLANData{VNI: w.VNI, VtepMAC: mac}, nil
}

// Node is what a backend knows of the node it runs on.
type Node struct {
	// Underlay is the external interface; Addr its IPv4 address (the tunnel's source), MTU
	// its MTU, Connected the networks directly attached to it.
	Underlay  string
	Addr      netip.Addr
	MTU       int
	Connected []netip.Prefix
	// PublicIP is the address published in the lease (--public-ip, else Addr).
	PublicIP netip.Addr
}

// Backend translates leases for one node under one network config; it is built once, by New.
type Backend struct {
	cfg  *subnet.Config
	node Node
	dev  *VXLANDevice // vxlan only
	mtu  int
}

// New builds the backend cfg names for node on the OS goos, whose defaults differ (the VNI)
// and whose data plane must be able to carry it (subnet.Config.CheckFor has said so).
func New(cfg *subnet.Config, node Node, goos string) (*Backend, error) {
	b := &Backend{cfg: cfg, node: node}
	switch cfg.Backend.Type {
	case subnet.BackendVXLAN:
		underlay := node.MTU
		if cfg.Backend.MTU > 0 {
			underlay = cfg.Backend.MTU // flanneld reads Backend.MTU as the underlay's
		}
		b.mtu = underlay - VXLANOverhead
		if b.mtu < 68 {
			return nil, fmt.Errorf("interface %s: MTU %d leaves no room for VXLAN's %d bytes", node.Underlay, underlay, VXLANOverhead)
		}
		vni := cfg.Backend.VNIFor(goos)
		b.dev = &VXLANDevice{Name: VXLANDeviceName(vni), VNI: vni, Port: cfg.Backend.Port, Local: node.Addr,
			Underlay: node.Underlay, MTU: b.mtu, Learning: cfg.Backend.Learning, GBP: cfg.Backend.GBP}
	case subnet.BackendHostGW:
		if node.PublicIP != node.Addr {
			return nil, fmt.Errorf("--public-ip=%s differs from %s's address %s: host-gw routes to peers by their public IPs, which must be on the interface", node.PublicIP, node.Underlay, node.Addr)
		}
		b.mtu = node.MTU
	default:
		return nil, &subnet.ConfigError{Key: "Backend.Type", Value: cfg.Backend.Type, Reason: "not a backend weftd has"}
	}
	return b, nil
}

// Type is the backend type published in leases.
func (b *Backend) Type() string { return b.cfg.Backend.Type }

// MTU is the pods' MTU, for subnet.env.
func (b *Backend) MTU() int { return b.mtu }

// Config is the network config the backend was built for.
func (b *Backend) Config() *subnet.Config { return b.cfg }

// State is the State of a node holding own, before any peer is known.
func (b *Backend) State(own netip.Prefix, masquerade bool) *State {
	st := &State{Config: b.cfg, Own: own, Underlay: b.node.Underlay, Masquerade: masquerade, Peers: PeerMap{}}
	if b.dev != nil {
		dev := *b.dev
		st.Device = &dev
	}
	return st
}

// Attrs are the lease attributes the node publishes once its device has the MAC vtep.
func (b *Backend) Attrs(vtep MAC) subnet.LeaseAttrs {
	a := subnet.LeaseAttrs{PublicIP: b.node.PublicIP, BackendType: b.Type()}
	if b.dev != nil {
		a.BackendData = VXLANData{VNI: b.dev.VNI, VtepMAC: vtep}.Encode()
	}
	return a
}

// candidate is a peer lease translated on its own, before it is weighed against the node's
// own lease and the other peers: what it would program and what it claims.
type candidate struct {
	peer Peer
	mac  MAC // the VTEP MAC it claims (vxlan), also when DirectRouting routes around it
	skip *Skipped
}

// translate checks a lease on its own, against the config and the node.
func (b *Backend) translate(key string, l subnet.Lease) candidate {
	c := candidate{peer: Peer{Subnet: l.Subnet, PublicIP: l.Attrs.PublicIP}}
	fail := func(code, reason string) candidate {
		c.skip = &Skipped{Key: key, Code: code, Reason: reason}
		return c
	}
	cfg := b.cfg
	switch {
	case l.Attrs.BackendType != b.Type():
		return fail(SkipBackendType, fmt.Sprintf("backend type %q, this node runs %q", l.Attrs.BackendType, b.Type()))
	case !l.Subnet.IsValid():
		return fail(SkipNoSubnet, "no IPv4 subnet")
	case l.Subnet.Bits() != cfg.SubnetLen || !cfg.Network.Contains(l.Subnet.Addr()):
		return fail(SkipOutside, fmt.Sprintf("subnet %s is not a /%d of the network %s", l.Subnet, cfg.SubnetLen, cfg.Network))
	case !PlausibleUnicast(l.Attrs.PublicIP) || !l.Attrs.PublicIP.Is4():
		return fail(SkipBadPublicIP, fmt.Sprintf("public IP %q is not a unicast IPv4 address", l.Attrs.PublicIP))
	}
	if b.dev == nil { // host-gw
		if !OnLink(b.node.Connected, l.Attrs.PublicIP) {
			return fail(SkipNotOnLink, fmt.Sprintf("public IP %s is not on a network of %s: host-gw needs the nodes on one layer-2 network", l.Attrs.PublicIP, b.node.Underlay))
		}
		return c
	}
	d, err := DecodeVXLANData(l.Attrs.BackendData)
	switch {
	case err != nil:
		return fail(SkipBadData, err.Error())
	case d.VNI != b.dev.VNI:
		return fail(SkipVNI, fmt.Sprintf("VNI %d, this node uses %d", d.VNI, b.dev.VNI))
	}
	c.mac = d.VtepMAC
	if !cfg.Backend.DirectRouting || !OnLink(b.node.Connected, l.Attrs.PublicIP) {
		c.peer.VTEPMAC = d.VtepMAC
	}
	return c
}

// ownClaims is what the node's own lease claims: no peer may take its subnet, public IP or
// VTEP MAC.
type ownClaims struct {
	subnet netip.Prefix
	ip     netip.Addr
	mac    MAC
}

func (b *Backend) ownClaims(own subnet.Lease) ownClaims {
	o := ownClaims{subnet: own.Subnet, ip: own.Attrs.PublicIP}
	if b.dev != nil {
		if d, err := DecodeVXLANData(own.Attrs.BackendData); err == nil {
			o.mac = d.VtepMAC
		}
	}
	return o
}

// against checks a candidate that passed translate against the node's own lease.
func (o ownClaims) against(key string, c candidate) *Skipped {
	switch {
	case o.subnet.IsValid() && c.peer.Subnet.Overlaps(o.subnet):
		return &Skipped{Key: key, Code: SkipOverlapsOwn, Reason: fmt.Sprintf("subnet %s overlaps this node's %s", c.peer.Subnet, o.subnet)}
	case c.peer.PublicIP == o.ip:
		return &Skipped{Key: key, Code: SkipDuplicateIP, Reason: fmt.Sprintf("public IP %s is this node's", o.ip)}
	case c.mac != MAC{} && c.mac == o.mac:
		return &Skipped{Key: key, Code: SkipDuplicateMAC, Reason: fmt.Sprintf("VtepMAC %s is this node's", o.mac)}
	}
	return nil
}
