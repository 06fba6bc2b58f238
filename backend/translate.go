package backend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/weftnet/weft/subnet"
)

// VXLANDeviceName is flannel's name for the IPv4 overlay device of a VNI.
func VXLANDeviceName(vni uint32) string { return "flannel." + strconv.FormatUint(uint64(vni), 10) }

// VXLAN6DeviceName is flannel's name for the IPv6 overlay device of a VNI.
func VXLAN6DeviceName(vni uint32) string {
	return "flannel-v6." + strconv.FormatUint(uint64(vni), 10)
}

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
	if !scanVXLANData(raw, &w) {
		w = wireVXLANData{}
		if err := json.Unmarshal(raw, &w); err != nil {
			return VXLANData{}, fmt.Errorf("backend data: %w", err)
		}
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

// scanVXLANData reads raw into w as json.Unmarshal would, when raw is VXLAN backend data as
// flanneld and weftd write it, {"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}: those two keys in
// that order, no whitespace, a VNI of decimal digits that fits, a MAC of printable ASCII
// without escapes. Every node reads every peer's at start-up (65,000 in the largest
// clusters), and encoding/json took 1.3 µs and 7 allocations for each (this, 0.27 µs and 3:
// BenchmarkDecodeVXLANData). It returns false for anything else, which encoding/json is to
// read; where it returns true, encoding/json reads the same (FuzzScanVXLANData).
func scanVXLANData(raw []byte, w *wireVXLANData) bool {
	const vni, mac = `{"VNI":`, `,"VtepMAC":"`
	s, ok := bytes.CutPrefix(raw, []byte(vni))
	if !ok {
		return false
	}
	digits := 0
	for digits < len(s) && s[digits] >= '0' && s[digits] <= '9' {
		digits++
	}
	// JSON numbers have no leading zeros; more than ten digits cannot fit.
	if digits == 0 || digits > 10 || digits > 1 && s[0] == '0' {
		return false
	}
	n, err := strconv.ParseUint(string(s[:digits]), 10, 32)
	if err != nil {
		return false
	}
	if s, ok = bytes.CutPrefix(s[digits:], []byte(mac)); !ok {
		return false
	}
	end := bytes.IndexByte(s, '"')
	if end < 0 || string(s[end:]) != `"}` {
		return false
	}
	for _, c := range s[:end] {
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return false
		}
	}
	w.VNI, w.VtepMAC = uint32(n), string(s[:end])
	return true
}

// Node is what a backend knows of the node it runs on.
type Node struct {
	// Underlay is the external interface; Addr and Addr6 its IPv4 and IPv6 addresses (the
	// tunnels' sources; invalid where the family is off), MTU its MTU, Connected the networks
	// of both families directly attached to it.
	Underlay  string
	Addr      netip.Addr
	Addr6     netip.Addr
	MTU       int
	Connected []netip.Prefix
	// PublicIP and PublicIPv6 are the addresses published in the lease (--public-ip and
	// --public-ipv6, else Addr and Addr6).
	PublicIP   netip.Addr
	PublicIPv6 netip.Addr
	// WireGuardKey is the node's WireGuard private key, one for both families as flannel
	// keeps it (wireguard only).
	WireGuardKey Key
}

// addr is the node's address in family f, and the one it publishes.
func (n Node) addr(f Family) (local, public netip.Addr) {
	if f == IPv6 {
		return n.Addr6, n.PublicIPv6
	}
	return n.Addr, n.PublicIP
}

// Backend translates leases for one node under one network config, for one IP family: a
// dual-stack node has one per family. It is built once, by NewFor.
type Backend struct {
	cfg      *subnet.Config
	node     Node
	fam      Family
	network  netip.Prefix // the family's cluster network
	bits     int          // the length of the family's node subnets
	public   netip.Addr   // the node's public address in the family
	dev      *VXLANDevice // vxlan only
	wg       *WireGuardDevice
	wgPublic Key // wg's public key
	mtu      int
	overhead int // what encapsulation takes of the underlay's MTU
}

// NewFor builds the backend cfg names for the family f of node, on a data plane with the
// capabilities caps, whose defaults it takes (the VNI, the encapsulation's overhead) and
// which must be able to carry it (caps.Check has said so).
func NewFor(cfg *subnet.Config, node Node, caps Capabilities, f Family) (*Backend, error) {
	b := &Backend{cfg: cfg, node: node, fam: f, network: f.Network(cfg), bits: f.SubnetLen(cfg)}
	local, public := node.addr(f)
	b.public = public
	switch cfg.Backend.Type {
	case subnet.BackendVXLAN:
		underlay := node.MTU
		if cfg.Backend.MTU > 0 {
			underlay = cfg.Backend.MTU // flanneld reads Backend.MTU as the underlay's
		}
		name := VXLANDeviceName
		if f == IPv6 {
			name = VXLAN6DeviceName
		}
		b.overhead = caps.Overhead(cfg.Backend.Type, f)
		b.mtu = underlay - b.overhead
		if b.mtu < f.MinMTU() {
			return nil, fmt.Errorf("interface %s: MTU %d leaves no room for VXLAN's %d bytes over %s", node.Underlay, underlay, b.overhead, f)
		}
		vni := caps.VNI(cfg.Backend)
		b.dev = &VXLANDevice{Name: name(vni), VNI: vni, Port: cfg.Backend.Port, Local: local,
			Underlay: node.Underlay, MTU: b.mtu, Learning: cfg.Backend.Learning, GBP: cfg.Backend.GBP}
	case subnet.BackendWireGuard:
		be := cfg.Backend
		underlay := node.MTU
		if be.MTU > 0 {
			underlay = be.MTU
		}
		b.overhead = WGOverhead
		b.mtu = underlay - WGOverhead
		if b.mtu < f.MinMTU() {
			return nil, fmt.Errorf("interface %s: MTU %d leaves no room for WireGuard's %d bytes over %s", node.Underlay, underlay, WGOverhead, f)
		}
		if node.WireGuardKey.IsZero() {
			return nil, fmt.Errorf("no WireGuard private key for the %s device", f)
		}
		dev := &WireGuardDevice{Name: WGDeviceName, ListenPort: be.ListenPort, MTU: b.mtu,
			PrivateKey: node.WireGuardKey, Keepalive: be.PersistentKeepalive}
		if f == IPv6 && be.Mode == subnet.WGSeparate {
			dev.Name, dev.ListenPort = WG6DeviceName, be.ListenPortV6
		}
		if be.PSK != "" {
			psk, err := ParseKey(be.PSK)
			if err != nil {
				return nil, &subnet.ConfigError{Key: "Backend.PSK", Reason: "not a WireGuard key"}
			}
			dev.PSK = psk
		}
		b.wg, b.wgPublic = dev, node.WireGuardKey.PublicKey()
	case subnet.BackendHostGW:
		if public != local {
			return nil, fmt.Errorf("the public %s address %s differs from %s's address %s: host-gw routes to peers by their public IPs, which must be on the interface", f, public, node.Underlay, local)
		}
		b.mtu = node.MTU
	default:
		return nil, &subnet.ConfigError{Key: "Backend.Type", Value: cfg.Backend.Type, Reason: "not a backend weftd has"}
	}
	return b, nil
}

// Family is the IP family the backend carries.
func (b *Backend) Family() Family { return b.fam }

// Type is the backend type published in leases.
func (b *Backend) Type() string { return b.cfg.Backend.Type }

// MTU is the pods' MTU, for subnet.env.
func (b *Backend) MTU() int { return b.mtu }

// Overhead is what the backend's encapsulation takes of the underlay's MTU (0 for host-gw):
// MTU is the underlay's (Backend.MTU, else the interface's) less this.
func (b *Backend) Overhead() int { return b.overhead }

// Config is the network config the backend was built for.
func (b *Backend) Config() *subnet.Config { return b.cfg }

// State is the State of a node holding own (its subnet of the backend's family), before any
// peer is known.
func (b *Backend) State(own netip.Prefix, masquerade bool) *State {
	st := &State{Config: b.cfg, Family: b.fam, Own: own, Underlay: b.node.Underlay, Masquerade: masquerade, Peers: PeerMap{}}
	if b.dev != nil {
		dev := *b.dev
		st.Device = &dev
	}
	if b.wg != nil {
		wg := *b.wg
		st.WireGuard = &wg
	}
	return st
}

// Attrs are the lease attributes the node publishes once its device has the MAC vtep, for
// this family alone; AddAttrs adds another family's.
func (b *Backend) Attrs(vtep MAC) subnet.LeaseAttrs {
	var a subnet.LeaseAttrs
	b.AddAttrs(&a, vtep)
	return a
}

// AddAttrs sets the family's half of a: its public address and backend data (the MAC vtep
// of its device), and the backend type.
func (b *Backend) AddAttrs(a *subnet.LeaseAttrs, vtep MAC) {
	a.BackendType = b.Type()
	var data json.RawMessage
	if b.dev != nil {
		data = VXLANData{VNI: b.dev.VNI, VtepMAC: vtep}.Encode()
	}
	if b.wg != nil {
		data = WireGuardData{PublicKey: b.wgPublic, Port: b.wg.ListenPort}.Encode()
	}
	if b.fam == IPv6 {
		a.PublicIPv6, a.BackendV6Data = b.public, data
		return
	}
	a.PublicIP, a.BackendData = b.public, data
}

// sibling is own's subnet of the other family when the network enables both.
func (b *Backend) sibling(own subnet.Lease) netip.Prefix {
	if !b.cfg.EnableIPv4 || !b.cfg.EnableIPv6 {
		return netip.Prefix{}
	}
	return b.fam.Other().Subnet(own)
}

// StateFor is State for the node holding own's subnets: its subnet of the family, and of the
// other (Sibling) in a dual-stack network.
func (b *Backend) StateFor(own subnet.Lease, masquerade bool) *State {
	st := b.State(b.fam.Subnet(own), masquerade)
	st.Sibling = b.sibling(own)
	return st
}

// half is the family's half of a lease: its subnet, public address and backend data.
func (b *Backend) half(l subnet.Lease) (netip.Prefix, netip.Addr, json.RawMessage) {
	if b.fam == IPv6 {
		return l.IPv6Subnet, l.Attrs.PublicIPv6, l.Attrs.BackendV6Data
	}
	return l.Subnet, l.Attrs.PublicIP, l.Attrs.BackendData
}

// candidate is a peer lease translated on its own, before it is weighed against the node's
// own lease and the other peers: what it would program and what it claims.
type candidate struct {
	peer Peer
	mac  MAC // the VTEP MAC it claims (vxlan), also when DirectRouting routes around it
	skip *Skipped
}

// key is the WireGuard public key the candidate claims (wireguard): the peer's own, kept
// once (a Set keeps a candidate per lease).
func (c candidate) key() Key { return c.peer.WGKey() }

// translate checks a lease on its own, against the config and the node.
func (b *Backend) translate(key string, l subnet.Lease) candidate {
	sn, ip, data := b.half(l)
	c := candidate{peer: Peer{Subnet: sn, PublicIP: ip}}
	fail := func(code, reason string) candidate {
		c.skip = &Skipped{Key: key, Family: b.fam, Code: code, Reason: reason}
		return c
	}
	switch {
	case l.Attrs.BackendType != b.Type():
		c = fail(SkipBackendType, fmt.Sprintf("backend type %q, this node runs %q", l.Attrs.BackendType, b.Type()))
		c.skip.typ = l.Attrs.BackendType
		return c
	case !sn.IsValid():
		return fail(SkipNoSubnet, "no "+b.fam.String()+" subnet")
	case sn.Bits() != b.bits || !b.network.Contains(sn.Addr()):
		return fail(SkipOutside, fmt.Sprintf("subnet %s is not a /%d of the network %s", sn, b.bits, b.network))
	case !PlausibleUnicast(ip) || !b.fam.Of(ip):
		shown := ip.String()
		if b.fam == IPv6 && l.Attrs.BadPublicIPv6 != "" {
			shown = l.Attrs.BadPublicIPv6
		}
		return fail(SkipBadPublicIP, fmt.Sprintf("public %s address %q is not a unicast %s address", b.fam, shown, b.fam))
	}
	if b.wg != nil {
		d, err := DecodeWireGuardData(data)
		if err != nil {
			return fail(SkipBadData, err.Error())
		}
		c.peer.WireGuard = &WireGuardPeer{Key: d.PublicKey, Endpoint: b.wgEndpoint(l, ip, d.Port)}
		return c
	}
	if b.dev == nil { // host-gw
		if !OnLink(b.node.Connected, ip) {
			return fail(SkipNotOnLink, fmt.Sprintf("public IP %s is not on a network of %s: host-gw needs the nodes on one layer-2 network", ip, b.node.Underlay))
		}
		return c
	}
	d, err := DecodeVXLANData(data)
	switch {
	case err != nil:
		return fail(SkipBadData, err.Error())
	case d.VNI != b.dev.VNI:
		return fail(SkipVNI, fmt.Sprintf("VNI %d, this node uses %d", d.VNI, b.dev.VNI))
	}
	c.mac = d.VtepMAC
	if !b.cfg.Backend.DirectRouting || !OnLink(b.node.Connected, ip) {
		c.peer.VTEPMAC = d.VtepMAC
	}
	return c
}

// wgEndpoint is where the node dials the peer of lease l whose half of the family has the
// public address ip and the port port.
//
// In separate mode each family's device listens on its own port: ip:port. In flannel's
// single-tunnel modes one device, on ListenPort, carries both families, and flanneld picks
// one address for it: the IPv4 one in mode ipv4, the IPv6 one in mode ipv6, and in mode auto
// (flannel's selectMode) the IPv4 one unless the peer's IPv4 address is private (RFC 1918)
// while its IPv6 one and the node's are public. The port is that device's, the one the peer
// publishes in BackendData: flanneld publishes ListenPortV6 in BackendV6Data even in these
// modes, where nothing listens on it, and dials it for IPv6 (so that flanneld's own ipv6 and
// auto modes reach a peer over IPv6 only where both ports are equal); weft publishes the
// device's port in both and dials BackendData's port where the lease has one.
func (b *Backend) wgEndpoint(l subnet.Lease, ip netip.Addr, port uint16) netip.AddrPort {
	if b.cfg.Backend.Mode != subnet.WGSeparate {
		if b.fam == IPv6 && len(l.Attrs.BackendData) > 0 {
			if d, err := DecodeWireGuardData(l.Attrs.BackendData); err == nil {
				port = d.Port
			}
		}
		v4, v6 := l.Attrs.PublicIP, l.Attrs.PublicIPv6
		use6 := false
		switch b.cfg.Backend.Mode {
		case subnet.WGIPv6:
			use6 = true
		case subnet.WGAuto:
			use6 = v6.IsValid() && v4.IsPrivate() && !v6.IsPrivate() &&
				b.node.PublicIPv6.IsValid() && !b.node.PublicIPv6.IsPrivate()
		}
		switch {
		case use6 && PlausibleUnicast(v6) && IPv6.Of(v6):
			ip = v6
		case !use6 && PlausibleUnicast(v4) && IPv4.Of(v4):
			ip = v4
		}
	}
	if port == 0 {
		// flannel before v0.22 published no port: its peers dial their own.
		port = b.wg.ListenPort
	}
	return netip.AddrPortFrom(ip, port)
}

// ownClaims is what the node's own lease claims: no peer may take its subnet, public IP or
// VTEP MAC.
type ownClaims struct {
	fam     Family
	key     string // the own lease's key
	created int64  // the own lease's age (subnet.Lease.Created)
	subnet  netip.Prefix
	ip      netip.Addr
	mac     MAC
	wgKey   Key
}

func (b *Backend) ownClaims(own subnet.Lease) ownClaims {
	sn, ip, data := b.half(own)
	o := ownClaims{fam: b.fam, key: own.Key(), subnet: sn, ip: ip, created: own.Created}
	if b.dev != nil {
		if d, err := DecodeVXLANData(data); err == nil {
			o.mac = d.VtepMAC
		}
	}
	if b.wg != nil {
		o.wgKey = b.wgPublic
	}
	return o
}

// against checks a candidate that passed translate, of age created, against the node's own
// lease. A clashing lease that the peers order before the own one (claimOrder: older, or as
// old and of a lower subnet; not when the own lease's age is unknown) contests it.
func (o ownClaims) against(key string, c candidate, created int64) *Skipped {
	sk := o.clash(key, c)
	if sk != nil && o.created != 0 && claimOrder(created, o.created, c.peer.Subnet.Addr(), o.subnet.Addr(), key, o.key) < 0 {
		sk.Contests = true
		if age(created, o.created) < 0 {
			sk.Reason += "; that lease is the older: this node is the newcomer"
		} else {
			sk.Reason += "; that lease is as old and comes first (its subnet or key): every node programs it, not this one"
		}
	}
	return sk
}

func (o ownClaims) clash(key string, c candidate) *Skipped {
	switch {
	case o.subnet.IsValid() && c.peer.Subnet.Overlaps(o.subnet):
		return &Skipped{Key: key, Family: o.fam, Code: SkipOverlapsOwn, ClashesWith: o.key,
			Reason: fmt.Sprintf("subnet %s overlaps this node's %s", c.peer.Subnet, o.subnet)}
	case c.peer.PublicIP == o.ip:
		return &Skipped{Key: key, Family: o.fam, Code: SkipDuplicateIP, ClashesWith: o.key,
			Reason: fmt.Sprintf("public IP %s is this node's", o.ip)}
	case c.mac != MAC{} && c.mac == o.mac:
		return &Skipped{Key: key, Family: o.fam, Code: SkipDuplicateMAC, ClashesWith: o.key,
			Reason: fmt.Sprintf("VtepMAC %s is this node's", o.mac)}
	case !c.key().IsZero() && c.key() == o.wgKey:
		return &Skipped{Key: key, Family: o.fam, Code: SkipDuplicateKey, ClashesWith: o.key,
			Reason: fmt.Sprintf("WireGuard public key %s is this node's", o.wgKey)}
	}
	return nil
}
