// Package vxlan is the VXLAN backend: for every peer lease, a route to the peer's subnet
// through the overlay device, a permanent neighbour entry for the peer's VTEP address and an
// FDB entry sending the peer's VTEP MAC to its public IP (flannel's layout, so weft and
// flannel nodes reach each other). With DirectRouting, peers on a directly connected
// network get a plain route instead.
package vxlan

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
)

// Type is the backend type published in leases.
const Type = subnet.BackendVXLAN

// Data is the BackendData of a vxlan lease: {"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}.
type Data struct {
	VNI     uint32
	VtepMAC backend.MAC
}

type wireData struct {
	VNI     uint32
	VtepMAC string
}

// Encode renders the lease data as flannel writes it.
func (d Data) Encode() json.RawMessage {
	b, _ := json.Marshal(wireData{VNI: d.VNI, VtepMAC: d.VtepMAC.String()}) // cannot fail
	return b
}

// DecodeData parses a peer's BackendData.
func DecodeData(raw json.RawMessage) (Data, error) {
	var w wireData
	if len(raw) == 0 {
		return Data{}, fmt.Errorf("no backend data")
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return Data{}, fmt.Errorf("backend data: %w", err)
	}
	mac, err := backend.ParseMAC(w.VtepMAC)
	if err != nil {
		return Data{}, fmt.Errorf("backend data: VtepMAC: %w", err)
	}
	if !mac.IsUsable() {
		return Data{}, fmt.Errorf("backend data: VtepMAC %s is not a unicast address", mac)
	}
	return Data{VNI: w.VNI, VtepMAC: mac}, nil
}

// DeviceName is flannel's name for the overlay device of a VNI.
func DeviceName(vni uint32) string { return "flannel." + strconv.FormatUint(uint64(vni), 10) }

// Node is what the backend knows of the node it runs on.
type Node struct {
	Config *subnet.Config
	VNI    uint32     // the VNI in force (config or the OS default)
	Local  netip.Addr // address of the external interface: source of the tunnel
	// Underlay is the external interface, UnderlayMTU its MTU; Connected are the networks
	// directly attached to it (for DirectRouting).
	Underlay    string
	UnderlayMTU int
	Connected   []netip.Prefix
}

// Overhead is what VXLAN encapsulation adds to a packet (IPv4 underlay).
const Overhead = 50

// MTU is the overlay MTU: the underlay's less the 50 bytes of VXLAN encapsulation. The
// underlay MTU is Backend.MTU when set, as flanneld reads that key (the MTU of the outgoing,
// encapsulated packets), else the external interface's.
func (n Node) MTU() int {
	if n.Config.Backend.MTU > 0 {
		return n.Config.Backend.MTU - Overhead
	}
	return n.UnderlayMTU - Overhead
}

// Device is the overlay device the node needs, before it holds a lease.
func (n Node) Device() backend.VXLANDevice {
	return backend.VXLANDevice{
		Name:     DeviceName(n.VNI),
		VNI:      n.VNI,
		Port:     n.Config.Backend.Port,
		Local:    n.Local,
		Underlay: n.Underlay,
		MTU:      n.MTU(),
		Learning: n.Config.Backend.Learning,
		GBP:      n.Config.Backend.GBP,
	}
}

// Desired is the data plane a node holding own needs to reach peers.
func Desired(n Node, own subnet.Lease, peers []subnet.Lease) (backend.State, []backend.Skipped) {
	dev := n.Device()
	if own.Subnet.IsValid() {
		dev.Addresses = []netip.Prefix{netip.PrefixFrom(own.Subnet.Addr(), 32)}
	}
	st := backend.State{VXLAN: &dev}
	sel := backend.SelectPeers(n.Config, Type, own, peers)
	skipped := sel.Skipped
	macOwner := map[backend.MAC]string{}
	for _, l := range sel.Usable {
		d, err := DecodeData(l.Attrs.BackendData)
		switch {
		case err != nil:
			skipped = append(skipped, backend.Skipped{Key: l.Key(), Code: backend.SkipBadData, Reason: err.Error()})
			continue
		case d.VNI != n.VNI:
			skipped = append(skipped, backend.Skipped{Key: l.Key(), Code: backend.SkipVNI, Reason: fmt.Sprintf("VNI %d, this node uses %d", d.VNI, n.VNI)})
			continue
		case macOwner[d.VtepMAC] != "":
			skipped = append(skipped, backend.Skipped{Key: l.Key(), Code: backend.SkipDuplicateMAC, Reason: fmt.Sprintf("VtepMAC %s is also used by %s", d.VtepMAC, macOwner[d.VtepMAC])})
			continue
		}
		macOwner[d.VtepMAC] = l.Key()
		if n.Config.Backend.DirectRouting && backend.OnLink(n.Connected, l.Attrs.PublicIP) {
			st.Routes = append(st.Routes, backend.Route{Dst: l.Subnet, Gw: l.Attrs.PublicIP, Dev: n.Underlay})
			continue
		}
		vtep := l.Subnet.Addr() // the peer's overlay device holds <subnet>.0
		st.Routes = append(st.Routes, backend.Route{Dst: l.Subnet, Gw: vtep, Dev: dev.Name, Onlink: true})
		st.Neighbors = append(st.Neighbors, backend.Neighbor{IP: vtep, MAC: d.VtepMAC, Dev: dev.Name})
		st.FDB = append(st.FDB, backend.FDBEntry{MAC: d.VtepMAC, Dst: l.Attrs.PublicIP, Dev: dev.Name})
	}
	st.Sort()
	return st, skipped
}
