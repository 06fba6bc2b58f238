package windows

import (
	"bytes"
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

// applyOverlay is a full Apply of a vxlan State: the network's RemoteSubnetRoute policies
// and remote endpoints are listed and diffed against st, and the plan written.
func (p *Plane) applyOverlay(ctx context.Context, st *backend.State, ch backend.Changes) error {
	f := p.net.fam(stateFamily(st))
	*f = famModel{}
	n, err := p.overlayNetworkFor(st)
	if err != nil {
		return err
	}
	p.net.adopt(st, n.ID, nil)
	nf := newFamModel(st.Own)
	nf.learnPeers(st)
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
	var pl overlayPlan
	rp := diffRemoteSubnetRoutes(rsrPeers, p.net.vni, n.Policies, sc)
	nf.rsr = rp.Keep
	for _, pol := range rp.Remove {
		pl.rsr = append(pl.rsr, rsrStep{remove: []rsrEntry{{Dst: rsrDst(pol), Policy: pol}}})
	}
	for _, a := range rp.Add {
		pl.rsr = append(pl.rsr, rsrStep{add: &a})
	}
	// The endpoints are listed after the policies are written, as they always were: a
	// failed listing leaves the policies written.
	if err := p.writeOverlay(ctx, pl, &nf, ch); err != nil {
		errs = append(errs, err)
		if ctx.Err() != nil {
			return errors.Join(errs...)
		}
	}
	eps, err := p.hns.NetworkEndpoints(n.ID)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("listing endpoints of HNS network %s: %w", n.Name, err))...)
	}
	ep := diffRemoteEndpoints(epPeers, n.ID, p.net.macPrefix, eps, sc)
	nf.eps = ep.Keep
	pl = overlayPlan{}
	for _, e := range ep.Delete {
		pl.eps = append(pl.eps, epStep{ip: e.IP(), del: &remoteEP{id: e.ID, name: e.Name}})
	}
	for _, e := range ep.Create {
		pl.eps = append(pl.eps, epStep{ip: e.IP(), create: &e})
	}
	if err := p.writeOverlay(ctx, pl, &nf, ch); err != nil {
		errs = append(errs, err)
		if ctx.Err() != nil {
			return errors.Join(errs...)
		}
	}
	nf.valid = true
	*f = nf
	return errors.Join(errs...)
}

// rsrDst is the destination of a RemoteSubnetRoute policy; invalid if it has none.
func rsrDst(pol Policy) netip.Prefix {
	var s RemoteSubnetRouteSettings
	if pol.Decode(&s) != nil {
		return netip.Prefix{}
	}
	dst, _ := netip.ParsePrefix(s.DestinationPrefix)
	return dst
}

// overlayPlan is what an Apply writes of an Overlay network's peers, full or incremental,
// in order: RemoteSubnetRoute policies, then remote endpoints. HNS takes one policy per
// destination and one endpoint per address, with no replace: each step removes, then adds
// what takes the place of what it removed, and adds nothing when a removal failed.
type overlayPlan struct {
	rsr []rsrStep
	eps []epStep
}

// rsrStep removes policies (as HNS has them), then adds one.
type rsrStep struct {
	peer   string // the key of the peer it is for, for errors; "" in a full Apply
	remove []rsrEntry
	add    *rsrEntry
}

// epStep deletes the remote endpoint of ip, then creates its new one.
type epStep struct {
	peer   string
	ip     netip.Addr
	del    *remoteEP
	create *HostComputeEndpoint
}

// overlayChanges is the plan of an incremental Apply of family f, in the model's peer mode:
// at each subnet (pod address) the changes touch, what f has becomes what the changes want,
// taken all together, so that peers that swap subnets in one batch end up as the State has
// them. What was programmed, and for which peer, is the model's: a change's Old is not read.
func (m *netModel) overlayChanges(f *famModel, changes []backend.PeerChange, mode PeerMode) overlayPlan {
	sns, keys, want := f.touched(changes)
	var pl overlayPlan
	if mode != PeersRemoteEndpoints {
		for _, sn := range sns {
			s := rsrStep{peer: keys[sn]}
			have, had := f.rsr[sn]
			if p, ok := want[sn]; ok {
				w := RemoteSubnetRoutePolicy(rsrSettings(p, m.vni))
				if had && sameRSRPolicy(have, w) {
					continue
				}
				s.add = &rsrEntry{Dst: sn, Policy: w}
			}
			if had {
				s.remove = []rsrEntry{{Dst: sn, Policy: have}}
			}
			if s.add != nil || s.remove != nil {
				pl.rsr = append(pl.rsr, s)
			}
		}
		return pl
	}
	wantEP := map[netip.Addr]HostComputeEndpoint{}
	for _, p := range want {
		for _, ip := range podAddresses(p.Subnet) {
			wantEP[ip] = remoteEndpoint(m.networkID, m.macPrefix, ip, p.PublicIP)
		}
	}
	seen := map[netip.Addr]bool{}
	for _, sn := range sns {
		for _, ip := range podAddresses(sn) {
			if seen[ip] {
				continue
			}
			seen[ip] = true
			have, had := f.eps[ip]
			w, wanted := wantEP[ip]
			if had && wanted && have.same(remoteEPOf(&w)) {
				continue
			}
			s := epStep{peer: keys[sn], ip: ip}
			if had {
				s.del = &have
			}
			if wanted {
				s.create = &w
			}
			if s.del != nil || s.create != nil {
				pl.eps = append(pl.eps, s)
			}
		}
	}
	return pl
}

// writeOverlay is the Overlay network's one writer: it executes pl on the model's network
// and keeps family f's model as HNS has it. It goes on past a failed step, so one bad peer
// cannot hold back the others, and stops, with ctx's error, when ctx ends.
func (p *Plane) writeOverlay(ctx context.Context, pl overlayPlan, f *famModel, ch backend.Changes) error {
	w := writeErrors{ctx: ctx, what: "HNS network " + p.net.network}
	for _, s := range pl.rsr {
		if w.stopped() {
			return w.err()
		}
		removed := true
		for _, r := range s.remove {
			err := p.hns.ModifyNetworkSettings(p.net.networkID, PolicyRequest(RequestRemove, r.Policy))
			if err != nil && !errors.Is(err, ErrNotFound) {
				w.fail(s.peer, fmt.Errorf("removing RemoteSubnetRoute policy for %s: %w", r.Dst, err))
				removed = false
				continue
			}
			if have, ok := f.rsr[r.Dst]; ok && have.Type == r.Policy.Type && bytes.Equal(have.Settings, r.Policy.Settings) {
				delete(f.rsr, r.Dst)
			}
			if err == nil {
				ch[changePolicy]++
			}
		}
		// HNS takes one policy per destination: no new one while an old one stays.
		if s.add == nil || !removed {
			continue
		}
		if err := p.hns.ModifyNetworkSettings(p.net.networkID, PolicyRequest(RequestAdd, s.add.Policy)); err != nil {
			w.fail(s.peer, fmt.Errorf("adding RemoteSubnetRoute policy for %s: %w", s.add.Dst, err))
			continue
		}
		f.rsr[s.add.Dst] = s.add.Policy
		ch[changePolicy]++
	}
	for _, s := range pl.eps {
		if w.stopped() {
			return w.err()
		}
		if d := s.del; d != nil {
			if err := p.hns.DeleteEndpoint(d.id); err != nil && !errors.Is(err, ErrNotFound) {
				w.fail(s.peer, fmt.Errorf("deleting remote endpoint %s: %w", d.name, err))
				continue // HNS takes one endpoint per address
			}
			if f.eps[s.ip].id == d.id {
				delete(f.eps, s.ip)
			}
			ch[changeEndpoint]++
		}
		if s.create == nil {
			continue
		}
		made, err := p.hns.CreateEndpoint(s.create)
		if err != nil {
			w.fail(s.peer, fmt.Errorf("creating remote endpoint %s: %w", s.create.Name, err))
			continue
		}
		f.eps[s.ip] = remoteEPOf(made)
		ch[changeEndpoint]++
	}
	return w.err()
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
