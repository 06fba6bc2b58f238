package windows

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
)

// bridgeSubnets are the node subnets st's L2Bridge network carries, IPv4 first: st's own and,
// in a dual-stack network, its Sibling. L2Bridge is dual-stack on Windows (unlike Overlay).
func bridgeSubnets(st *backend.State) []netip.Prefix {
	sns := []netip.Prefix{st.Own}
	if st.Sibling.IsValid() {
		sns = append(sns, st.Sibling)
	}
	slices.SortFunc(sns, func(a, b netip.Prefix) int { return a.Addr().BitLen() - b.Addr().BitLen() })
	return sns
}

// defaultRouteDst is the default route of sn's family, as HNS writes it.
func defaultRouteDst(sn netip.Prefix) string {
	if sn.Addr().Is6() {
		return "::/0"
	}
	return "0.0.0.0/0"
}

// bridgeNetwork is host-gw's L2Bridge network on adapter: pods of each of sns behind its
// gateway (.1, ::1).
func bridgeNetwork(name, adapter string, dns []string, sns []netip.Prefix) *HostComputeNetwork {
	subnets := make([]Subnet, 0, len(sns))
	for _, sn := range sns {
		subnets = append(subnets, Subnet{IPAddressPrefix: sn.String(),
			Routes: []Route{{NextHop: gateway(sn).String(), DestinationPrefix: defaultRouteDst(sn)}}})
	}
	n := &HostComputeNetwork{
		Name:          name,
		Type:          NetworkL2Bridge,
		Flags:         EnableNonPersistent,
		DNS:           DNS{ServerList: dns},
		Ipams:         []Ipam{{Type: "Static", Subnets: subnets}},
		SchemaVersion: SchemaV2(),
	}
	if adapter != "" {
		n.Policies = []Policy{NetAdapterNamePolicy(physicalAdapter(adapter))}
	}
	return n
}

// hostEndpointIP is the host's address on the pod network: .2 (::2), as flanneld has it.
func hostEndpointIP(sn netip.Prefix) netip.Addr { return gateway(sn).Next() }

// ensureBridge makes or adopts the L2Bridge network for st's subnets (both families'
// when dual-stack), its host endpoint at .2 (and ::2) attached to the host's default
// namespace, and forwarding on the host's vNICs. It counts what it changed into ch. A
// dual-stack node's Prepares and full Applies call it once for both families (netModel.lent).
func (p *Plane) ensureBridge(ctx context.Context, st *backend.State, ch backend.Changes) (string, error) {
	sns := bridgeSubnets(st)
	for _, sn := range sns {
		if err := checkSubnet(sn); err != nil {
			return "", err
		}
	}
	if p.host == nil {
		return "", errors.New("host-gw needs the host's route table")
	}
	if slices.ContainsFunc(sns, func(sn netip.Prefix) bool { return sn.Addr().Is6() }) {
		v, err := p.hns.Version()
		if err != nil {
			return "", fmt.Errorf("HNS version: %w", err)
		}
		if !v.SupportsDualStack() {
			// A config this node cannot carry: start-up stops rather than retries.
			return "", &subnet.ConfigError{Key: "EnableIPv6", Value: "true",
				Reason: fmt.Sprintf("HNS %s on this node has no IPv6 dual stack (it needs 11.10: Windows Server 2022)", v)}
		}
	}
	name := networkName(st)
	n, created, err := p.ensureNetwork(ctx, name, sns[0], func(n *HostComputeNetwork) string { return subnetMismatch(n, NetworkL2Bridge, sns...) },
		func() *HostComputeNetwork { return bridgeNetwork(name, st.Underlay, dnsServers(st), sns) })
	if err != nil {
		return "", err
	}
	if created {
		ch[changeNetwork]++
	}
	ep, made, err := p.ensureHostEndpoint(n, sns)
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
	// The management vNIC routes to peers (of both families: it holds the node's addresses),
	// the host endpoint's vNIC to the pods.
	fwd := []forward{{n.ManagementIP(), false}}
	for _, sn := range sns {
		if sn.Addr().Is6() {
			fwd = append(fwd, forward{n.ManagementIP(), true})
		}
		fwd = append(fwd, forward{hostEndpointIP(sn), sn.Addr().Is6()})
	}
	turned, err := p.ensureForwarding(ctx, fwd...)
	ch[changeForward] += turned
	if err != nil {
		return "", err
	}
	return n.ID, p.writeNetworkFile(n)
}

// ensureHostEndpoint returns the network's host endpoint, "<network>_ep" at .2 of each of
// sns, making it (again) if it is missing or wrong.
func (p *Plane) ensureHostEndpoint(n *HostComputeNetwork, sns []netip.Prefix) (*HostComputeEndpoint, bool, error) {
	name := n.Name + "_ep"
	want := HostComputeEndpoint{
		Name:               name,
		HostComputeNetwork: n.ID,
		SchemaVersion:      SchemaV2(),
	}
	var ips []netip.Addr
	for _, sn := range sns {
		want.IPConfigurations = append(want.IPConfigurations, IPConfig{IPAddress: hostEndpointIP(sn).String(), PrefixLength: uint8(sn.Bits())})
		ips = append(ips, hostEndpointIP(sn))
	}
	eps, err := p.hns.NetworkEndpoints(n.ID)
	if err != nil {
		return nil, false, fmt.Errorf("listing endpoints of HNS network %s: %w", n.Name, err)
	}
	for _, ep := range eps {
		if ep.Name != name {
			continue
		}
		if ep.Flags&EndpointRemote == 0 && slices.Equal(ep.IPs(), ips) {
			return &ep, false, nil
		}
		p.log.Warn("replacing host endpoint", "endpoint", name, "ips", ep.IPs(), "want", ips)
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

// attachToHost attaches the host endpoint to the host's own compartment, which gives the
// host a vNIC on the pod network. It takes HNS v1's HostAttach(1), the form known to work on
// real HNS: flanneld's host-gw (pkg/backend/hostgw/hostgw_windows.go), Calico for Windows,
// Microsoft's SDN scripts (Attach-HnsHostEndpoint -CompartmentID 1 in start-kubelet.ps1, in
// hns.psm1 and hns.v2.psm1 alike) and Microsoft's windows-container-networking tests, which
// attach a v2-made gateway endpoint so, dual-stack too. No public client attaches a host
// endpoint through a HostDefault namespace of its own making in what it ships. An endpoint
// HNS reports in a namespace, or says is attached already (flanneld attached it: a
// migration), is left as it is.
func (p *Plane) attachToHost(ep *HostComputeEndpoint) (bool, error) {
	if ep.HostComputeNamespace != "" {
		return false, nil
	}
	err := p.hns.HostAttach(ep.ID)
	if errors.Is(err, ErrExists) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("attaching host endpoint %s to the host: %w", ep.Name, err)
	}
	return true, nil
}

// forward is forwarding of one family (IPv6 if v6) on the interface holding addr.
type forward struct {
	addr netip.Addr
	v6   bool
}

// ensureForwarding turns forwarding on, each of fwd's family, for the host's interfaces
// holding fwd's addresses (the management vNIC, which routes to peers, and the host
// endpoint's vNIC), waiting for them to appear. It returns how many it turned on.
func (p *Plane) ensureForwarding(ctx context.Context, fwd ...forward) (int, error) {
	turned := 0
	var waited time.Duration
	for _, f := range fwd {
		a := f.addr
		for {
			ifs, err := p.host.Interfaces()
			if err != nil {
				return turned, fmt.Errorf("listing interfaces: %w", err)
			}
			i := slices.IndexFunc(ifs, func(i Interface) bool {
				return slices.ContainsFunc(i.Prefixes, func(p netip.Prefix) bool { return p.Addr() == a })
			})
			if i >= 0 {
				if !ifs[i].forwards(f.v6) {
					if err := p.host.SetForwarding(ifs[i].Index, f.v6); err != nil {
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

// applyHostGW is a full Apply of a host-gw State: the bridge, then the routes of the
// State's family, into the family's model. It looks at HNS and the host, and lends the other
// family of a dual-stack network what it found of that family's routes; with a look lent to
// it (the other family's full Apply just looked) it starts from that instead.
func (p *Plane) applyHostGW(ctx context.Context, st *backend.State, lent *look, ch backend.Changes) error {
	fam := stateFamily(st)
	f := p.net.fam(fam)
	*f = famModel{}
	p.net.repair = slices.DeleteFunc(p.net.repair, func(r backend.Family) bool { return r == fam })
	var have []HostRoute
	if lent != nil {
		have = lent.routes
	} else {
		id, err := p.ensureBridge(ctx, st, ch)
		if err != nil {
			return err
		}
		ifs, err := p.host.Interfaces()
		if err != nil {
			return fmt.Errorf("listing interfaces: %w", err)
		}
		p.net.adopt(st, id, ifs)
		if have, err = p.host.Routes(); err != nil {
			return fmt.Errorf("listing routes: %w", err)
		}
		if st.Sibling.IsValid() {
			// The other family's routes as listed: this Apply writes none of them.
			other := fam.Other().Network(st.Config)
			var theirs []HostRoute
			for _, r := range have {
				if within(r.Dst, other) {
					theirs = append(theirs, r)
				}
			}
			p.net.lend(st, &look{routes: theirs})
		}
	}
	nf := newFamModel(st.Own)
	nf.learnPeers(st)
	var errs []error
	var want []HostRoute
	peers := maps.Collect(st.Peers.All())
	for _, key := range slices.Sorted(maps.Keys(peers)) {
		r, err := peerRoute(p.net.ifs, key, peers[key])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		want = append(want, r)
	}
	plan := diffRoutes(want, have, scope{network: st.Network(), own: st.Own})
	for _, r := range want {
		nf.routes[r.Dst] = r
	}
	var rp routeWrites
	for _, r := range plan.Add {
		rp.add = append(rp.add, routeEntry{route: r})
	}
	for _, r := range plan.Delete {
		rp.del = append(rp.del, routeEntry{route: r})
	}
	if err := p.writeRoutes(ctx, rp, &nf, ch); err != nil {
		errs = append(errs, err)
		if ctx.Err() != nil {
			return errors.Join(errs...)
		}
	}
	nf.valid = true
	*f = nf
	return errors.Join(errs...)
}

// routeWrites is what an Apply writes of host-gw's routes, full or incremental: routes to
// add, then routes to delete, so that a peer whose route changes is never without one; a
// route whose destination's new route could not be added stays.
type routeWrites struct {
	add, del []routeEntry
}

// routeEntry is a route with the key of the peer it is for, for errors ("" in a full Apply).
type routeEntry struct {
	peer  string
	route HostRoute
}

// routeChanges is the plan of an incremental host-gw Apply of family f: at each subnet the
// changes touch, the route f has becomes the one the changes want, taken all together.
// What was programmed, and for which peer, is the model's: a change's Old is not read.
func (m *netModel) routeChanges(f *famModel, changes []backend.PeerChange) (routeWrites, error) {
	sns, keys, want := f.touched(changes)
	var pl routeWrites
	var errs []error
	for _, sn := range sns {
		have, had := f.routes[sn]
		var w HostRoute
		if p, ok := want[sn]; ok {
			r, err := peerRoute(m.ifs, keys[sn], p)
			if err != nil {
				errs = append(errs, err)
			} else {
				w = r
			}
		}
		if had && w.Dst.IsValid() && have.same(w) {
			continue
		}
		if w.Dst.IsValid() {
			pl.add = append(pl.add, routeEntry{peer: keys[sn], route: w})
		}
		if had {
			pl.del = append(pl.del, routeEntry{peer: keys[sn], route: have})
		}
	}
	return pl, errors.Join(errs...)
}

// writeRoutes is host-gw's one writer: it executes pl on the host and keeps the family's
// model f as the host has it. It goes on past a failed write, so one bad peer cannot hold
// back the others, and stops, with ctx's error, when ctx ends.
func (p *Plane) writeRoutes(ctx context.Context, pl routeWrites, f *famModel, ch backend.Changes) error {
	w := writeErrors{ctx: ctx, what: "writing routes"}
	failed := map[netip.Prefix]bool{}
	for _, e := range pl.add {
		if w.stopped() {
			return w.err()
		}
		if err := p.host.AddRoute(e.route); err != nil {
			failed[e.route.Dst] = true
			if have, ok := f.routes[e.route.Dst]; ok && have.same(e.route) {
				delete(f.routes, e.route.Dst)
			}
			w.fail(e.peer, fmt.Errorf("adding route %s: %w", e.route, err))
			continue
		}
		f.routes[e.route.Dst] = e.route
		ch[changeRoute]++
	}
	for _, e := range pl.del {
		if failed[e.route.Dst] {
			continue // the destination's new route is not in: the old one stays
		}
		if w.stopped() {
			return w.err()
		}
		if err := p.host.DeleteRoute(e.route); err != nil && !errors.Is(err, ErrNotFound) {
			w.fail(e.peer, fmt.Errorf("deleting route %s: %w", e.route, err))
			continue
		}
		if have, ok := f.routes[e.route.Dst]; ok && have.same(e.route) {
			delete(f.routes, e.route.Dst)
		}
		ch[changeRoute]++
	}
	return w.err()
}

// dnsServers are host-gw's DNSServerList.
func dnsServers(st *backend.State) []string {
	var out []string
	if st.Config == nil {
		return nil
	}
	for _, s := range strings.Split(st.Config.Backend.DNSServerList, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
