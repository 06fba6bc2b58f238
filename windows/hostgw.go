package windows

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/weftnet/weft/backend"
)

// bridgeNetwork is host-gw's L2Bridge network on adapter: pods of sn behind the gateway .1.
func bridgeNetwork(name, adapter string, dns []string, sn netip.Prefix) *HostComputeNetwork {
	n := &HostComputeNetwork{
		Name:  name,
		Type:  NetworkL2Bridge,
		Flags: EnableNonPersistent,
		DNS:   DNS{ServerList: dns},
		Ipams: []Ipam{{Type: "Static", Subnets: []Subnet{{
			IPAddressPrefix: sn.String(),
			Routes:          []Route{{NextHop: gateway(sn).String(), DestinationPrefix: "0.0.0.0/0"}},
		}}}},
		SchemaVersion: SchemaV2(),
	}
	if adapter != "" {
		n.Policies = []Policy{NetAdapterNamePolicy(physicalAdapter(adapter))}
	}
	return n
}

// hostEndpointIP is the host's address on the pod network: .2, as flanneld has it.
func hostEndpointIP(sn netip.Prefix) netip.Addr { return gateway(sn).Next() }

// ensureBridge makes or adopts the L2Bridge network for st's subnet, its host endpoint at .2
// attached to the host's default namespace, and forwarding on the host's vNICs. It counts
// what it changed into ch.
func (p *Plane) ensureBridge(ctx context.Context, st *backend.State, ch backend.Changes) (string, error) {
	sn := st.Own
	if err := checkSubnet(sn); err != nil {
		return "", err
	}
	if p.host == nil {
		return "", errors.New("host-gw needs the host's route table")
	}
	name := networkName(st)
	n, created, err := p.ensureNetwork(ctx, name, sn, func(n *HostComputeNetwork) string { return subnetMismatch(n, NetworkL2Bridge, sn) },
		func() *HostComputeNetwork { return bridgeNetwork(name, st.Underlay, dnsServers(st), sn) })
	if err != nil {
		return "", err
	}
	if created {
		ch[changeNetwork]++
	}
	ep, made, err := p.ensureHostEndpoint(n, sn)
	if err != nil {
		return "", err
	}
	if made {
		ch[changeEndpoint]++
	}
	attached, err := p.attachToHost(ep)
	if err != nil {
		return "", err
	}
	if attached {
		ch[changeNamespace]++
	}
	turned, err := p.ensureForwarding(ctx, n.ManagementIP(), hostEndpointIP(sn))
	ch[changeForward] += turned
	if err != nil {
		return "", err
	}
	return n.ID, p.writeNetworkFile(n)
}

// ensureHostEndpoint returns the network's host endpoint, "<network>_ep" at .2, making it
// (again) if it is missing or wrong.
func (p *Plane) ensureHostEndpoint(n *HostComputeNetwork, sn netip.Prefix) (*HostComputeEndpoint, bool, error) {
	name := n.Name + "_ep"
	want := HostComputeEndpoint{
		Name:               name,
		HostComputeNetwork: n.ID,
		IPConfigurations:   []IPConfig{{IPAddress: hostEndpointIP(sn).String(), PrefixLength: uint8(sn.Bits())}},
		SchemaVersion:      SchemaV2(),
	}
	eps, err := p.hns.NetworkEndpoints(n.ID)
	if err != nil {
		return nil, false, fmt.Errorf("listing endpoints of HNS network %s: %w", n.Name, err)
	}
	for _, ep := range eps {
		if ep.Name != name {
			continue
		}
		if ep.Flags&EndpointRemote == 0 && ep.IP() == hostEndpointIP(sn) {
			return &ep, false, nil
		}
		p.log.Warn("replacing host endpoint", "endpoint", name, "ip", ep.IP(), "want", hostEndpointIP(sn))
		if err := p.hns.DeleteEndpoint(ep.ID); err != nil && !errors.Is(err, ErrNotFound) {
			return nil, false, fmt.Errorf("deleting host endpoint %s: %w", name, err)
		}
	}
	ep, err := p.hns.CreateEndpoint(&want)
	if err != nil {
		return nil, false, fmt.Errorf("creating host endpoint %s: %w", name, err)
	}
	return ep, true, nil
}

// attachToHost attaches the endpoint to the host's default namespace (making that if HNS has
// none yet), which gives the host a vNIC on the pod network.
func (p *Plane) attachToHost(ep *HostComputeEndpoint) (bool, error) {
	if ep.HostComputeNamespace != "" {
		return false, nil
	}
	ns, err := p.hns.HostDefaultNamespace()
	if errors.Is(err, ErrNotFound) {
		ns, err = p.hns.CreateNamespace(&HostComputeNamespace{Type: NamespaceHostDefault, SchemaVersion: SchemaV2()})
	}
	if err != nil {
		return false, fmt.Errorf("host default namespace: %w", err)
	}
	err = p.hns.AttachEndpoint(ns.ID, ep.ID)
	if errors.Is(err, ErrExists) {
		return false, nil // attached, though HNS did not say so in the endpoint
	}
	if err != nil {
		return false, fmt.Errorf("attaching host endpoint %s to the host: %w", ep.Name, err)
	}
	return true, nil
}

// ensureForwarding turns forwarding on for the host's interfaces holding addrs (the
// management vNIC, which routes to peers, and the host endpoint's vNIC), waiting for them
// to appear. It returns how many it turned on.
func (p *Plane) ensureForwarding(ctx context.Context, addrs ...netip.Addr) (int, error) {
	turned := 0
	var waited time.Duration
	for _, a := range addrs {
		for {
			ifs, err := p.host.Interfaces()
			if err != nil {
				return turned, fmt.Errorf("listing interfaces: %w", err)
			}
			i := slices.IndexFunc(ifs, func(i Interface) bool {
				return slices.ContainsFunc(i.Prefixes, func(p netip.Prefix) bool { return p.Addr() == a })
			})
			if i >= 0 {
				if !ifs[i].Forwarding {
					if err := p.host.SetForwarding(ifs[i].Index); err != nil {
						return turned, fmt.Errorf("enabling forwarding on %s (%s): %w", ifs[i].Name, a, err)
					}
					turned++
				}
				break
			}
			if waited >= p.cfg.BlipTimeout {
				return turned, fmt.Errorf("no interface holds %s after %v", a, p.cfg.BlipTimeout)
			}
			if err := p.cfg.Sleep(ctx, p.cfg.PollInterval); err != nil {
				return turned, fmt.Errorf("waiting for the interface with %s: %w", a, err)
			}
			waited += p.cfg.PollInterval
		}
	}
	return turned, nil
}

// onLinkIndex is the interface whose network holds gw, the one a route via gw goes out of.
func onLinkIndex(ifs []Interface, gw netip.Addr) (uint32, bool) {
	for _, i := range ifs {
		for _, p := range i.Prefixes {
			if p.Masked().Contains(gw) {
				return i.Index, true
			}
		}
	}
	return 0, false
}

// peerRoute is the host-gw route to a peer: its subnet via its public IP, out of the
// interface on that network.
func peerRoute(ifs []Interface, key string, pr backend.Peer) (HostRoute, error) {
	if pr.Overlay() {
		return HostRoute{}, fmt.Errorf("peer %s (%s): an overlay peer in a host-gw State", key, pr.Subnet)
	}
	idx, ok := onLinkIndex(ifs, pr.PublicIP)
	if !ok {
		return HostRoute{}, fmt.Errorf("peer %s: route to %s: no interface is on the network of %s", key, pr.Subnet, pr.PublicIP)
	}
	return HostRoute{Dst: pr.Subnet, NextHop: pr.PublicIP, IfIndex: idx, Protocol: ProtoNetMgmt}, nil
}

// applyHostGW is a full Apply of a host-gw State: the bridge, then the routes.
func (p *Plane) applyHostGW(ctx context.Context, st *backend.State, ch backend.Changes) error {
	p.m = model{}
	id, err := p.ensureBridge(ctx, st, ch)
	if err != nil {
		return err
	}
	ifs, err := p.host.Interfaces()
	if err != nil {
		return fmt.Errorf("listing interfaces: %w", err)
	}
	m := model{own: st.Own, network: networkName(st), networkID: id, macPrefix: macPrefix(st), ifs: ifs, routes: map[netip.Prefix]HostRoute{}}
	var errs []error
	var want []HostRoute
	peers := maps.Collect(st.Peers.All())
	for _, key := range slices.Sorted(maps.Keys(peers)) {
		r, err := peerRoute(ifs, key, peers[key])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		want = append(want, r)
	}
	have, err := p.host.Routes()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("listing routes: %w", err))...)
	}
	plan := diffRoutes(want, have, scope{network: st.Network(), own: st.Own})
	for _, r := range want {
		m.routes[r.Dst] = r
	}
	for _, r := range plan.Add {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, fmt.Errorf("adding routes: %w", err))...)
		}
		if err := p.host.AddRoute(r); err != nil {
			delete(m.routes, r.Dst)
			errs = append(errs, fmt.Errorf("adding route %s: %w", r, err))
			continue
		}
		ch[changeRoute]++
	}
	for _, r := range plan.Delete {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, fmt.Errorf("deleting routes: %w", err))...)
		}
		if err := p.host.DeleteRoute(r); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, fmt.Errorf("deleting route %s: %w", r, err))
			continue
		}
		ch[changeRoute]++
	}
	m.valid = true
	p.m = m
	return errors.Join(errs...)
}

// changeRoute brings one peer's host-gw route to what c.New wants: the new route is added
// before the old one goes, so the peer is never without one.
func (p *Plane) changeRoute(c backend.PeerChange, ch backend.Changes) error {
	var errs []error
	var want HostRoute
	if c.New.IsValid() {
		r, err := peerRoute(p.m.ifs, c.Key, c.New)
		if err != nil {
			errs = append(errs, err)
		} else {
			want = r
		}
	}
	if want.Dst.IsValid() {
		if have, ok := p.m.routes[want.Dst]; ok && have.same(want) {
			return errors.Join(errs...)
		}
		if err := p.host.AddRoute(want); err != nil {
			return errors.Join(append(errs, fmt.Errorf("peer %s: adding route %s: %w", c.Key, want, err))...)
		}
		ch[changeRoute]++
	}
	for _, sn := range changed(c) {
		have, ok := p.m.routes[sn]
		if !ok || (want.Dst.IsValid() && have.same(want)) {
			continue
		}
		if err := p.host.DeleteRoute(have); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, fmt.Errorf("peer %s: deleting route %s: %w", c.Key, have, err))
			continue
		}
		delete(p.m.routes, sn)
		ch[changeRoute]++
	}
	if want.Dst.IsValid() {
		p.m.routes[want.Dst] = want
	}
	return errors.Join(errs...)
}
