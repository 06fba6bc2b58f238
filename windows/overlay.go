package windows

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/windows/hnsfile"
)

// PeerMode says how overlay peers are programmed.
type PeerMode string

// Peer modes. Auto takes RemoteSubnetRoute where HNS has it (9.2 and later) and remote
// endpoints otherwise.
const (
	PeersAuto              PeerMode = ""
	PeersRemoteSubnetRoute PeerMode = "RemoteSubnetRoute"
	PeersRemoteEndpoints   PeerMode = "RemoteEndpoints"
)

// ParsePeerMode reads a peer mode as given in a flag: "auto", "RemoteSubnetRoute" or
// "RemoteEndpoints" (any case).
func ParsePeerMode(s string) (PeerMode, error) {
	for _, m := range []PeerMode{PeersRemoteSubnetRoute, PeersRemoteEndpoints} {
		if strings.EqualFold(s, string(m)) {
			return m, nil
		}
	}
	if s == "" || strings.EqualFold(s, "auto") {
		return PeersAuto, nil
	}
	return "", fmt.Errorf("peer mode %q: want auto, %s or %s", s, PeersRemoteSubnetRoute, PeersRemoteEndpoints)
}

// macPrefix is the two bytes remote endpoints' MACs start with: Backend.MacPrefix, by
// default "0E-2A".
func macPrefix(st *backend.State) string {
	if st.Config != nil && st.Config.Backend.MacPrefix != "" {
		return st.Config.Backend.MacPrefix
	}
	return "0E-2A"
}

// overlayNetwork is the Overlay network flanneld makes for a subnet, bound to adapter.
func overlayNetwork(name string, vni uint32, adapter string, sn netip.Prefix) *HostComputeNetwork {
	n := &HostComputeNetwork{
		Name:  name,
		Type:  NetworkOverlay,
		Flags: EnableNonPersistent,
		Ipams: []Ipam{{Type: "Static", Subnets: []Subnet{{
			IPAddressPrefix: sn.String(),
			Policies:        []Policy{VSIDPolicy(vni)},
			Routes:          []Route{{NextHop: gateway(sn).String(), DestinationPrefix: "0.0.0.0/0"}},
		}}}},
		SchemaVersion: SchemaV2(),
	}
	if adapter != "" {
		n.Policies = []Policy{NetAdapterNamePolicy(physicalAdapter(adapter))}
	}
	return n
}

// overlayMismatch is subnetMismatch for an Overlay network of VNI vni: a VSID that HNS
// reports must be vni; one it does not report is taken to be.
func overlayMismatch(n *HostComputeNetwork, vni uint32, sn netip.Prefix) string {
	if why := subnetMismatch(n, NetworkOverlay, sn); why != "" {
		return why
	}
	for _, pol := range n.StaticSubnet().Policies {
		var s VSIDSettings
		if pol.Type == PolicyVSID && pol.Decode(&s) == nil && s.IsolationID != vni {
			return fmt.Sprintf("VSID %d, want %d", s.IsolationID, vni)
		}
	}
	return ""
}

func resolveMode(m PeerMode, v Version) (PeerMode, error) {
	switch {
	case m == PeersAuto && v.SupportsRemoteSubnet():
		return PeersRemoteSubnetRoute, nil
	case m == PeersAuto:
		return PeersRemoteEndpoints, nil
	case m == PeersRemoteSubnetRoute && !v.SupportsRemoteSubnet():
		return "", fmt.Errorf("peers as %s: HNS %s has none (they need 9.2, Windows Server 2019): %w", m, v, ErrNotSupported)
	}
	return m, nil
}

// ensureOverlay makes or adopts the Overlay network for st's subnet and returns its DR MAC.
func (p *Plane) ensureOverlay(ctx context.Context, st *backend.State) (backend.MAC, error) {
	dev, sn := st.Device, st.Own
	if err := checkSubnet(sn); err != nil {
		return backend.MAC{}, err
	}
	v, err := p.hns.Version()
	if err != nil {
		return backend.MAC{}, fmt.Errorf("HNS version: %w", err)
	}
	mode, err := resolveMode(p.cfg.Peers, v)
	if err != nil {
		return backend.MAC{}, err
	}
	name := networkName(st)
	adapter := st.Underlay
	if adapter == "" {
		adapter = dev.Underlay
	}
	n, _, err := p.ensureNetwork(ctx, name, sn, func(n *HostComputeNetwork) string { return overlayMismatch(n, dev.VNI, sn) },
		func() *HostComputeNetwork { return overlayNetwork(name, dev.VNI, adapter, sn) })
	if err != nil {
		return backend.MAC{}, err
	}
	mac, err := n.DRMAC()
	if err != nil {
		return backend.MAC{}, err
	}
	if !mac.IsUsable() {
		return backend.MAC{}, fmt.Errorf("network %s: DR MAC %s cannot be a VTEP MAC", name, mac)
	}
	for _, path := range p.cfg.SourceVIPFiles {
		if err := hnsfile.WriteSourceVIP(path, netip.PrefixFrom(SourceVIP(sn), sn.Bits())); err != nil {
			return backend.MAC{}, err
		}
	}
	if err := p.writeNetworkFile(n); err != nil {
		return backend.MAC{}, err
	}
	p.mode = mode
	p.log.Info("HNS overlay network ready", "network", name, "id", n.ID, "subnet", sn, "vtep_mac", mac,
		"hns", v, "peers_as", mode, "source_vip", SourceVIP(sn))
	return mac, nil
}

// overlayPeers are the peers of a vxlan State in subnet order, every one through the overlay
// (the plane's Capabilities have no DirectRouting).
func overlayPeers(st *backend.State) []backend.Peer {
	peers := make([]backend.Peer, 0, st.Peers.Len())
	for _, pr := range st.Peers.All() {
		peers = append(peers, pr)
	}
	slices.SortFunc(peers, func(a, b backend.Peer) int { return a.Subnet.Addr().Compare(b.Subnet.Addr()) })
	return peers
}

// overlayNetworkFor looks up st's Overlay network and checks that it still serves st.
func (p *Plane) overlayNetworkFor(st *backend.State) (*HostComputeNetwork, error) {
	name := networkName(st)
	n, err := p.hns.NetworkByName(name)
	if errors.Is(err, ErrNotFound) {
		return nil, &backend.MissingDeviceError{Name: name}
	}
	if err != nil {
		return nil, fmt.Errorf("looking up HNS network %s: %w", name, err)
	}
	if why := overlayMismatch(n, st.Device.VNI, st.Own); why != "" {
		p.log.Warn("HNS network no longer fits the node", "network", name, "reason", why)
		return nil, &backend.MissingDeviceError{Name: name}
	}
	if p.mode == PeersAuto {
		v, err := p.hns.Version()
		if err != nil {
			return nil, fmt.Errorf("HNS version: %w", err)
		}
		if p.mode, err = resolveMode(p.cfg.Peers, v); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// applyOverlay is a full Apply of a vxlan State.
func (p *Plane) applyOverlay(ctx context.Context, st *backend.State, ch backend.Changes) error {
	p.m = model{}
	n, err := p.overlayNetworkFor(st)
	if err != nil {
		return err
	}
	m := model{own: st.Own, network: n.Name, networkID: n.ID, overlay: true, vni: st.Device.VNI, macPrefix: macPrefix(st),
		rsr: map[netip.Prefix]Policy{}, eps: map[netip.Addr]remoteEP{}}
	peers := overlayPeers(st)
	var errs []error
	if added, err := p.ensureHostRoute(n); err != nil {
		errs = append(errs, err)
	} else if added {
		ch[changePolicy]++
	}
	rsrPeers, epPeers := peers, []backend.Peer(nil)
	if p.mode == PeersRemoteEndpoints {
		rsrPeers, epPeers = nil, peers
	}
	sc := scope{network: st.Network(), own: st.Own}
	// Both kinds are always diffed, so a change of mode leaves nothing of the other behind.
	plan := diffRemoteSubnetRoutes(rsrPeers, m.vni, n.Policies, sc)
	m.rsr = plan.Keep
	for _, pol := range plan.Remove {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, fmt.Errorf("HNS network %s: %w", n.Name, err))...)
		}
		if err := p.hns.ModifyNetworkSettings(n.ID, PolicyRequest(RequestRemove, pol)); err != nil {
			errs = append(errs, fmt.Errorf("removing %s policy %s: %w", pol.Type, pol.Settings, err))
			continue
		}
		ch[changePolicy]++
	}
	for _, a := range plan.Add {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, fmt.Errorf("HNS network %s: %w", n.Name, err))...)
		}
		if err := p.hns.ModifyNetworkSettings(n.ID, PolicyRequest(RequestAdd, a.Policy)); err != nil {
			errs = append(errs, fmt.Errorf("adding %s policy for %s: %w", a.Policy.Type, a.Dst, err))
			continue
		}
		m.rsr[a.Dst] = a.Policy
		ch[changePolicy]++
	}
	eps, err := p.hns.NetworkEndpoints(n.ID)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("listing endpoints of HNS network %s: %w", n.Name, err))...)
	}
	epp := diffRemoteEndpoints(epPeers, n.ID, m.macPrefix, eps, sc)
	m.eps = epp.Keep
	for _, ep := range epp.Delete {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, fmt.Errorf("HNS network %s: %w", n.Name, err))...)
		}
		if err := p.hns.DeleteEndpoint(ep.ID); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, fmt.Errorf("deleting remote endpoint %s: %w", ep.Name, err))
			continue
		}
		ch[changeEndpoint]++
	}
	for _, ep := range epp.Create {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, fmt.Errorf("HNS network %s: %w", n.Name, err))...)
		}
		made, err := p.hns.CreateEndpoint(&ep)
		if err != nil {
			errs = append(errs, fmt.Errorf("creating remote endpoint %s: %w", ep.Name, err))
			continue
		}
		m.eps[ep.IP()] = remoteEPOf(made)
		ch[changeEndpoint]++
	}
	m.valid = true
	p.m = m
	return errors.Join(errs...)
}

// ensureHostRoute adds the HostRoute policy, which lets the host reach its own pods on the
// Overlay network, where HNS has it (as flanneld does).
func (p *Plane) ensureHostRoute(n *HostComputeNetwork) (bool, error) {
	if len(n.PoliciesOf(PolicyHostRoute)) > 0 {
		return false, nil
	}
	v, err := p.hns.Version()
	if err != nil || !v.SupportsRemoteSubnet() {
		return false, nil // without it only host-to-local-pod traffic suffers; nothing to do about it
	}
	if err := p.hns.ModifyNetworkSettings(n.ID, PolicyRequest(RequestAdd, HostRoutePolicy())); err != nil {
		return false, fmt.Errorf("adding HostRoute policy to HNS network %s: %w", n.Name, err)
	}
	return true, nil
}

// changeRSR brings one peer's RemoteSubnetRoute policy to what c.New wants.
func (p *Plane) changeRSR(c backend.PeerChange, ch backend.Changes) error {
	var want Policy
	if c.New.IsValid() {
		want = RemoteSubnetRoutePolicy(rsrSettings(c.New, p.m.vni))
	}
	for _, sn := range changed(c) {
		have, ok := p.m.rsr[sn]
		if !ok {
			continue
		}
		if c.New.IsValid() && sn == c.New.Subnet && sameRSRPolicy(have, want) {
			return nil
		}
		err := p.hns.ModifyNetworkSettings(p.m.networkID, PolicyRequest(RequestRemove, have))
		if err != nil && !errors.Is(err, ErrNotFound) {
			// HNS takes one policy per destination: no new one while the old one stays.
			return fmt.Errorf("peer %s: removing RemoteSubnetRoute policy for %s: %w", c.Key, sn, err)
		}
		delete(p.m.rsr, sn)
		if err == nil {
			ch[changePolicy]++
		}
	}
	if c.New.IsValid() {
		if err := p.hns.ModifyNetworkSettings(p.m.networkID, PolicyRequest(RequestAdd, want)); err != nil {
			return fmt.Errorf("peer %s: adding RemoteSubnetRoute policy for %s: %w", c.Key, c.New.Subnet, err)
		}
		p.m.rsr[c.New.Subnet] = want
		ch[changePolicy]++
	}
	return nil
}

// changeEndpoints brings the remote endpoints of one peer's pod addresses to what c.New
// wants: those that already stand for the same peer stay.
func (p *Plane) changeEndpoints(c backend.PeerChange, ch backend.Changes) error {
	want := map[netip.Addr]HostComputeEndpoint{}
	var errs []error
	if c.New.IsValid() {
		for _, ip := range podAddresses(c.New.Subnet) {
			want[ip] = remoteEndpoint(p.m.networkID, p.m.macPrefix, ip, c.New.PublicIP)
		}
	}
	for _, sn := range changed(c) {
		for _, ip := range podAddresses(sn) {
			have, ok := p.m.eps[ip]
			w, wanted := want[ip]
			if ok && wanted && have.same(remoteEPOf(&w)) {
				delete(want, ip)
				continue
			}
			if ok {
				if err := p.hns.DeleteEndpoint(have.id); err != nil && !errors.Is(err, ErrNotFound) {
					errs = append(errs, fmt.Errorf("peer %s: deleting remote endpoint %s: %w", c.Key, have.name, err))
					delete(want, ip) // HNS takes one endpoint per address
					continue
				}
				delete(p.m.eps, ip)
				ch[changeEndpoint]++
			}
			if !wanted {
				continue
			}
			made, err := p.hns.CreateEndpoint(&w)
			if err != nil {
				errs = append(errs, fmt.Errorf("peer %s: creating remote endpoint %s: %w", c.Key, w.Name, err))
				continue
			}
			p.m.eps[ip] = remoteEPOf(made)
			ch[changeEndpoint]++
		}
	}
	return errors.Join(errs...)
}
