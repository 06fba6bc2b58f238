package windows

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/weftnet/weft/backend"
)

// Peer is an overlay peer as HNS programs it: its subnet behind its public IP (the provider
// address), encapsulated to its VTEP MAC (a Linux node's flannel.<VNI> MAC, a Windows node's
// DR MAC). VTEP is the peer's VTEP address, <subnet>.0.
type Peer struct {
	Subnet   netip.Prefix
	VTEP     netip.Addr
	VtepMAC  backend.MAC
	PublicIP netip.Addr
}

// overlayPeer is a State's peer as HNS programs it; a peer routed around the overlay
// (DirectRouting) cannot be had on Windows.
func overlayPeer(p backend.Peer) (Peer, error) {
	if !p.Overlay() {
		return Peer{}, fmt.Errorf("peer %s via %s: DirectRouting is not supported on Windows", p.Subnet, p.PublicIP)
	}
	return Peer{Subnet: p.Subnet, VTEP: p.VTEP(), VtepMAC: p.VTEPMAC, PublicIP: p.PublicIP}, nil
}

// overlayPeers are the overlay peers of a vxlan State, in subnet order.
func overlayPeers(st *backend.State) ([]Peer, error) {
	if st.Device == nil {
		return nil, nil
	}
	var peers []Peer
	var errs []error
	for _, bp := range st.Peers.All() {
		p, err := overlayPeer(bp)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		peers = append(peers, p)
	}
	slices.SortFunc(peers, func(a, b Peer) int { return a.Subnet.Addr().Compare(b.Subnet.Addr()) })
	return peers, errors.Join(errs...)
}

// ownership says which HNS policies, endpoints and host routes are the daemon's: those for
// destinations inside the cluster network, not the node's own subnet (the CNI's and HNS's).
type ownership struct {
	Networks []netip.Prefix
	Own      []netip.Prefix
}

func ownershipOf(st *backend.State) ownership {
	o := ownership{Networks: []netip.Prefix{st.Network()}}
	if st.Own.IsValid() {
		o.Own = []netip.Prefix{st.Own}
	}
	return o
}

// within reports whether p equals or lies inside one of nets.
func within(p netip.Prefix, nets []netip.Prefix) bool {
	for _, n := range nets {
		if p.IsValid() && n.IsValid() && n.Bits() <= p.Bits() && n.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// ours reports whether a destination is one the daemon programs: inside the cluster
// networks, not the node's own subnet (the CNI's and HNS's).
func ours(dst netip.Prefix, owned ownership) bool {
	return within(dst, owned.Networks) && !within(dst, owned.Own)
}

// rsrPlan is how to turn a network's RemoteSubnetRoute policies into the wanted ones.
// Removals go first: HNS takes one policy per destination.
type rsrPlan struct {
	Remove []Policy // exactly as HNS reported them, so that HNS finds them
	Add    []Policy
}

// rsrSettings is the RemoteSubnetRoute for a peer; the MAC in flannel's form, so that a
// node moving from flanneld to weftd finds its policies unchanged.
func rsrSettings(p Peer, vni uint32) RemoteSubnetRouteSettings {
	return RemoteSubnetRouteSettings{
		DestinationPrefix:           p.Subnet.String(),
		IsolationID:                 uint16(vni), // checked to fit when the network is made
		ProviderAddress:             p.PublicIP.String(),
		DistributedRouterMacAddress: p.VtepMAC.String(),
	}
}

// sameRSR compares a reported policy with a wanted one by meaning: HNS may write the MAC
// with dashes and upper case.
func sameRSR(have, want RemoteSubnetRouteSettings) bool {
	hm, err1 := backend.ParseMAC(have.DistributedRouterMacAddress)
	wm, err2 := backend.ParseMAC(want.DistributedRouterMacAddress)
	hp, err3 := netip.ParseAddr(have.ProviderAddress)
	wp, err4 := netip.ParseAddr(want.ProviderAddress)
	hd, err5 := netip.ParsePrefix(have.DestinationPrefix)
	wd, err6 := netip.ParsePrefix(want.DestinationPrefix)
	if errors.Join(err1, err2, err3, err4, err5, err6) != nil {
		return false
	}
	return hm == wm && hp == wp && hd == wd && have.IsolationID == want.IsolationID
}

// diffRemoteSubnetRoutes plans the RemoteSubnetRoute policies of the overlay network: one
// per peer; ours that match a peer stay untouched, ours that do not are removed; policies
// for destinations outside the cluster network are someone else's and stay.
func diffRemoteSubnetRoutes(peers []Peer, vni uint32, have []Policy, owned ownership) rsrPlan {
	want := map[netip.Prefix]RemoteSubnetRouteSettings{}
	for _, p := range peers {
		want[p.Subnet] = rsrSettings(p, vni)
	}
	kept := map[netip.Prefix]bool{}
	var plan rsrPlan
	for _, pol := range have {
		var s RemoteSubnetRouteSettings
		if pol.Type != PolicyRemoteSubnetRoute || pol.Decode(&s) != nil {
			continue
		}
		dst, err := netip.ParsePrefix(s.DestinationPrefix)
		if err != nil || !ours(dst, owned) {
			continue
		}
		if w, ok := want[dst]; ok && !kept[dst] && sameRSR(s, w) {
			kept[dst] = true
			continue
		}
		plan.Remove = append(plan.Remove, pol)
	}
	for _, p := range peers {
		if !kept[p.Subnet] {
			plan.Add = append(plan.Add, RemoteSubnetRoutePolicy(want[p.Subnet]))
		}
	}
	return plan
}

// remoteEndpointPrefix names the remote endpoints weft (and flanneld before it) creates;
// others, such as kube-proxy's, are left alone.
const remoteEndpointPrefix = "remote_"

// podAddresses are the addresses pods of a subnet may have: .2 up to the last before the
// broadcast address (.1 is the gateway), as flanneld's remote endpoints covered them.
func podAddresses(sn netip.Prefix) []netip.Addr {
	var out []netip.Addr
	last := lastAddr(sn)
	for a := sn.Masked().Addr().Next().Next(); a.IsValid() && a.Less(last); a = a.Next() {
		out = append(out, a)
	}
	return out
}

// lastAddr is the broadcast address of an IPv4 prefix.
func lastAddr(sn netip.Prefix) netip.Addr {
	b := sn.Masked().Addr().As4()
	host := uint32(1)<<(32-sn.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// conjureMAC is flanneld's MAC for a remote endpoint: the configured two-byte prefix, then
// the four bytes of the address.
func conjureMAC(prefix string, ip netip.Addr) string {
	b := ip.As4()
	return fmt.Sprintf("%s-%02X-%02X-%02X-%02X", strings.ToUpper(strings.ReplaceAll(prefix, ":", "-")), b[0], b[1], b[2], b[3])
}

// remoteEndpoint is the endpoint that stands for one pod address of a peer.
func remoteEndpoint(networkID, macPrefix string, ip, pa netip.Addr) HostComputeEndpoint {
	return HostComputeEndpoint{
		Name:               remoteEndpointPrefix + ip.String(),
		HostComputeNetwork: networkID,
		Policies:           []Policy{ProviderAddressPolicy(pa)},
		IPConfigurations:   []IPConfig{{IPAddress: ip.String()}},
		MacAddress:         conjureMAC(macPrefix, ip),
		Flags:              EndpointRemote,
		SchemaVersion:      schemaV2(),
	}
}

// epPlan is how to turn the network's remote endpoints into the wanted ones; deletions go
// first, since HNS takes one endpoint per address.
type epPlan struct {
	Delete []HostComputeEndpoint
	Create []HostComputeEndpoint
}

// diffRemoteEndpoints plans the remote endpoints of the overlay network: one per pod
// address of every peer. Only remote endpoints named by weft, for addresses in the cluster
// network, are ours; local endpoints and kube-proxy's remote ones are never touched.
func diffRemoteEndpoints(peers []Peer, networkID, macPrefix string, have []HostComputeEndpoint, owned ownership) epPlan {
	want := map[netip.Addr]HostComputeEndpoint{}
	var order []netip.Addr
	for _, p := range peers {
		for _, ip := range podAddresses(p.Subnet) {
			want[ip] = remoteEndpoint(networkID, macPrefix, ip, p.PublicIP)
			order = append(order, ip)
		}
	}
	kept := map[netip.Addr]bool{}
	var plan epPlan
	for _, ep := range have {
		ip := ep.IP()
		if ep.Flags&EndpointRemote == 0 || !strings.HasPrefix(ep.Name, remoteEndpointPrefix) ||
			!ip.IsValid() || !ours(netip.PrefixFrom(ip, 32), owned) {
			continue
		}
		if w, ok := want[ip]; ok && !kept[ip] && sameEndpoint(ep, w) {
			kept[ip] = true
			continue
		}
		plan.Delete = append(plan.Delete, ep)
	}
	for _, ip := range order {
		if !kept[ip] {
			plan.Create = append(plan.Create, want[ip])
		}
	}
	return plan
}

func sameEndpoint(have, want HostComputeEndpoint) bool {
	hm, err1 := backend.ParseMAC(have.MacAddress)
	wm, err2 := backend.ParseMAC(want.MacAddress)
	return err1 == nil && err2 == nil && hm == wm && have.Name == want.Name &&
		have.ProviderAddress() == want.ProviderAddress()
}

// routePlan is how to turn the host's routes into the wanted ones; additions go first, so a
// peer whose route changes is never without one.
type routePlan struct {
	Add    []HostRoute
	Delete []HostRoute
}

// diffRoutes plans host-gw's routes. Ours are static routes through a gateway to a
// destination in the cluster network, not the node's own subnet.
func diffRoutes(want, have []HostRoute, owned ownership) routePlan {
	var plan routePlan
	for _, w := range want {
		if !slices.ContainsFunc(have, w.same) {
			plan.Add = append(plan.Add, w)
		}
	}
	for _, h := range have {
		if h.Protocol != ProtoNetMgmt || !h.NextHop.IsValid() || h.NextHop.IsUnspecified() || !ours(h.Dst, owned) {
			continue
		}
		if !slices.ContainsFunc(want, h.same) {
			plan.Delete = append(plan.Delete, h)
		}
	}
	return plan
}
