package windows

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
)

// scope is what the plane may change: destinations inside the cluster network, except the
// node's own subnet (the CNI plugin's and HNS's).
type scope struct {
	network, own netip.Prefix
}

// within reports whether p equals or lies inside n.
func within(p, n netip.Prefix) bool {
	return p.IsValid() && n.IsValid() && n.Bits() <= p.Bits() && n.Contains(p.Addr())
}

// ours reports whether a destination is one the plane programs.
func (s scope) ours(dst netip.Prefix) bool {
	return within(dst, s.network) && !within(dst, s.own)
}

// rsrPlan is how to turn a network's RemoteSubnetRoute policies into the wanted ones.
// Removals go first: HNS takes one policy per destination.
type rsrPlan struct {
	Remove []Policy // exactly as HNS reported them, so that HNS finds them
	Add    []rsrEntry
	Keep   map[netip.Prefix]Policy // those that stay, as HNS reported them
}

// rsrEntry is the policy for one destination.
type rsrEntry struct {
	Dst    netip.Prefix
	Policy Policy
}

// rsrSettings is the RemoteSubnetRoute for a peer; the MAC in flannel's form, so that a
// node moving from flanneld to weftd finds its policies unchanged.
func rsrSettings(p backend.Peer, vni uint32) RemoteSubnetRouteSettings {
	return RemoteSubnetRouteSettings{
		DestinationPrefix:           p.Subnet.String(),
		IsolationID:                 uint16(vni), // checked to fit when the network is made
		ProviderAddress:             p.PublicIP.String(),
		DistributedRouterMacAddress: p.VTEPMAC.String(),
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

// sameRSRPolicy is sameRSR of two policies' settings.
func sameRSRPolicy(have, want Policy) bool {
	var h, w RemoteSubnetRouteSettings
	return have.Type == PolicyRemoteSubnetRoute && want.Type == PolicyRemoteSubnetRoute &&
		have.Decode(&h) == nil && want.Decode(&w) == nil && sameRSR(h, w)
}

// diffRemoteSubnetRoutes plans the RemoteSubnetRoute policies of the overlay network: one
// per peer; ours that match a peer stay untouched, ours that do not are removed; policies
// for destinations outside the cluster network are someone else's and stay.
func diffRemoteSubnetRoutes(peers []backend.Peer, vni uint32, have []Policy, sc scope) rsrPlan {
	want := map[netip.Prefix]RemoteSubnetRouteSettings{}
	for _, p := range peers {
		want[p.Subnet] = rsrSettings(p, vni)
	}
	plan := rsrPlan{Keep: map[netip.Prefix]Policy{}}
	for _, pol := range have {
		var s RemoteSubnetRouteSettings
		if pol.Type != PolicyRemoteSubnetRoute || pol.Decode(&s) != nil {
			continue
		}
		dst, err := netip.ParsePrefix(s.DestinationPrefix)
		if err != nil || !sc.ours(dst) {
			continue
		}
		if w, ok := want[dst]; ok && plan.Keep[dst].Type == "" && sameRSR(s, w) {
			plan.Keep[dst] = pol
			continue
		}
		plan.Remove = append(plan.Remove, pol)
	}
	for _, p := range peers {
		if _, ok := plan.Keep[p.Subnet]; !ok {
			plan.Add = append(plan.Add, rsrEntry{Dst: p.Subnet, Policy: RemoteSubnetRoutePolicy(want[p.Subnet])})
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
	last := subnet.LastAddr(sn)
	for a := sn.Masked().Addr().Next().Next(); a.IsValid() && a.Less(last); a = a.Next() {
		out = append(out, a)
	}
	return out
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
		SchemaVersion:      SchemaV2(),
	}
}

// epPlan is how to turn the network's remote endpoints into the wanted ones; deletions go
// first, since HNS takes one endpoint per address.
type epPlan struct {
	Delete []HostComputeEndpoint
	Create []HostComputeEndpoint
	Keep   map[netip.Addr]remoteEP // those that stay
}

// remoteEPOf is how the model keeps an endpoint HNS reported.
func remoteEPOf(ep *HostComputeEndpoint) remoteEP {
	mac, _ := backend.ParseMAC(ep.MacAddress) // zero if unreadable: then it matches no wanted one
	return remoteEP{id: ep.ID, name: ep.Name, mac: mac, pa: ep.ProviderAddress()}
}

// same reports whether two endpoints stand for the same peer's pod the same way.
func (e remoteEP) same(o remoteEP) bool {
	return e.mac != backend.MAC{} && e.mac == o.mac && e.name == o.name && e.pa == o.pa
}

// diffRemoteEndpoints plans the remote endpoints of the overlay network: one per pod
// address of every peer. Only remote endpoints named by weft, for addresses in the cluster
// network, are ours; local endpoints and kube-proxy's remote ones are never touched.
func diffRemoteEndpoints(peers []backend.Peer, networkID, macPrefix string, have []HostComputeEndpoint, sc scope) epPlan {
	want := map[netip.Addr]HostComputeEndpoint{}
	var order []netip.Addr
	for _, p := range peers {
		for _, ip := range podAddresses(p.Subnet) {
			want[ip] = remoteEndpoint(networkID, macPrefix, ip, p.PublicIP)
			order = append(order, ip)
		}
	}
	plan := epPlan{Keep: map[netip.Addr]remoteEP{}}
	for _, ep := range have {
		ip := ep.IP()
		if ep.Flags&EndpointRemote == 0 || !strings.HasPrefix(ep.Name, remoteEndpointPrefix) ||
			!ip.IsValid() || !sc.ours(netip.PrefixFrom(ip, 32)) {
			continue
		}
		_, kept := plan.Keep[ip]
		if w, ok := want[ip]; ok && !kept && remoteEPOf(&ep).same(remoteEPOf(&w)) {
			plan.Keep[ip] = remoteEPOf(&ep)
			continue
		}
		plan.Delete = append(plan.Delete, ep)
	}
	for _, ip := range order {
		if _, kept := plan.Keep[ip]; !kept {
			plan.Create = append(plan.Create, want[ip])
		}
	}
	return plan
}

// routePlan is how to turn the host's routes into the wanted ones; additions go first, so a
// peer whose route changes is never without one.
type routePlan struct {
	Add    []HostRoute
	Delete []HostRoute
}

// diffRoutes plans host-gw's routes. Ours are static routes through a gateway to a
// destination in the cluster network, not the node's own subnet.
func diffRoutes(want, have []HostRoute, sc scope) routePlan {
	var plan routePlan
	for _, w := range want {
		if !slices.ContainsFunc(have, w.same) {
			plan.Add = append(plan.Add, w)
		}
	}
	for _, h := range have {
		if h.Protocol != ProtoNetMgmt || !h.NextHop.IsValid() || h.NextHop.IsUnspecified() || !sc.ours(h.Dst) {
			continue
		}
		if !slices.ContainsFunc(want, h.same) {
			plan.Delete = append(plan.Delete, h)
		}
	}
	return plan
}
