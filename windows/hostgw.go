package windows

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/weftnet/weft/backend"
)

// bridgeNetwork is host-gw's L2Bridge network: pods of sn behind the gateway .1.
func (p *Plane) bridgeNetwork(name string, sn netip.Prefix) *HostComputeNetwork {
	n := &HostComputeNetwork{
		Name:  name,
		Type:  NetworkL2Bridge,
		Flags: EnableNonPersistent,
		DNS:   DNS{ServerList: p.cfg.DNSServers},
		Ipams: []Ipam{{Type: "Static", Subnets: []Subnet{{
			IPAddressPrefix: sn.String(),
			Routes:          []Route{{NextHop: gateway(sn).String(), DestinationPrefix: "0.0.0.0/0"}},
		}}}},
		SchemaVersion: schemaV2(),
	}
	if p.adapter != "" {
		n.Policies = []Policy{NetAdapterNamePolicy(physicalAdapter(p.adapter))}
	}
	return n
}

// hostEndpointIP is the host's address on the pod network: .2, as flanneld has it.
func hostEndpointIP(sn netip.Prefix) netip.Addr { return gateway(sn).Next() }

// ensureBridge makes or adopts the L2Bridge network for sn, its host endpoint at .2
// attached to the host's default namespace, and forwarding on the host's vNICs. It counts
// what it changed into ch.
func (p *Plane) ensureBridge(ctx context.Context, sn netip.Prefix, ch backend.Changes) error {
	if err := checkSubnet(sn); err != nil {
		return err
	}
	if p.host == nil {
		return errors.New("host-gw needs the host's route table")
	}
	name := p.bridgeName()
	n, created, err := p.ensureNetwork(ctx, name, sn, func(n *HostComputeNetwork) string { return subnetMismatch(n, NetworkL2Bridge, sn) },
		func() *HostComputeNetwork { return p.bridgeNetwork(name, sn) })
	if err != nil {
		return err
	}
	if created {
		ch[changeNetwork]++
	}
	ep, made, err := p.ensureHostEndpoint(n, sn)
	if err != nil {
		return err
	}
	if made {
		ch[changeEndpoint]++
	}
	attached, err := p.attachToHost(ep)
	if err != nil {
		return err
	}
	if attached {
		ch[changeNamespace]++
	}
	turned, err := p.ensureForwarding(ctx, n.ManagementIP(), hostEndpointIP(sn))
	ch[changeForward] += turned
	return err
}

// ensureHostEndpoint returns the network's host endpoint, "<network>_ep" at .2, making it
// (again) if it is missing or wrong.
func (p *Plane) ensureHostEndpoint(n *HostComputeNetwork, sn netip.Prefix) (*HostComputeEndpoint, bool, error) {
	name := n.Name + "_ep"
	want := HostComputeEndpoint{
		Name:               name,
		HostComputeNetwork: n.ID,
		IPConfigurations:   []IPConfig{{IPAddress: hostEndpointIP(sn).String(), PrefixLength: uint8(sn.Bits())}},
		SchemaVersion:      schemaV2(),
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
		ns, err = p.hns.CreateNamespace(&HostComputeNamespace{Type: NamespaceHostDefault, SchemaVersion: schemaV2()})
	}
	if err != nil {
		return false, fmt.Errorf("host default namespace: %w", err)
	}
	err = p.hns.ModifyNamespaceSettings(ns.ID, AttachRequest(RequestAdd, ep.ID))
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

func (p *Plane) reconcileHostGW(ctx context.Context, st *backend.State, owned ownership) (backend.Changes, error) {
	ch := backend.Changes{}
	if err := p.ensureBridge(ctx, p.own, ch); err != nil {
		return ch, err
	}
	ifs, err := p.host.Interfaces()
	if err != nil {
		return ch, fmt.Errorf("listing interfaces: %w", err)
	}
	var errs []error
	var want []HostRoute
	for _, peer := range st.Peers.All() {
		idx, ok := onLinkIndex(ifs, peer.PublicIP)
		if !ok {
			errs = append(errs, fmt.Errorf("route to %s: no interface is on the network of %s", peer.Subnet, peer.PublicIP))
			continue
		}
		want = append(want, HostRoute{Dst: peer.Subnet, NextHop: peer.PublicIP, IfIndex: idx, Protocol: ProtoNetMgmt})
	}
	slices.SortFunc(want, func(a, b HostRoute) int { return a.Dst.Addr().Compare(b.Dst.Addr()) })
	have, err := p.host.Routes()
	if err != nil {
		return ch, errors.Join(append(errs, fmt.Errorf("listing routes: %w", err))...)
	}
	plan := diffRoutes(want, have, owned)
	for _, r := range plan.Add {
		if err := p.host.AddRoute(r); err != nil {
			errs = append(errs, fmt.Errorf("adding route %s: %w", r, err))
			continue
		}
		ch[changeRoute]++
	}
	for _, r := range plan.Delete {
		if err := p.host.DeleteRoute(r); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, fmt.Errorf("deleting route %s: %w", r, err))
			continue
		}
		ch[changeRoute]++
	}
	return ch, errors.Join(errs...)
}
