package windows

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/windows/hnsfile"
)

// Config is what the plane needs beyond the network config (which names the HNS network,
// its DNS servers and the remote endpoints' MAC prefix): weftd's Windows options. The zero
// value is flanneld's behaviour.
type Config struct {
	Peers PeerMode
	// SourceVIPFiles are where the overlay's kube-proxy source VIP is written (see
	// hnsfile.WriteSourceVIP), each time the network is made or adopted: next to subnet.env for the
	// weft CNI plugin, and where kube-proxy's start-up reads it.
	SourceVIPFiles []string
	// NetworkFile, if set, is where the HNS network's name and type are written for the
	// weft CNI plugin (see hnsfile.WriteNetwork), each time the network is made or adopted.
	NetworkFile string
	// NetworkPolicy: weftd enforces NetworkPolicy (NetworkPolicy), which NetworkFile tells the
	// CNI plugin, so that it makes each pod's endpoint closed until weftd opens it.
	NetworkPolicy bool
	// BlipTimeout bounds the wait for the host network after HNS makes a network (30 s);
	// PollInterval is how often it looks (500 ms).
	BlipTimeout  time.Duration
	PollInterval time.Duration
	// WatchInterval is how often Watch looks at the network (5 s).
	WatchInterval time.Duration
	// Sleep waits d or until ctx ends, and Now is the time; tests pass a fake clock's.
	Sleep func(ctx context.Context, d time.Duration) error
	Now   func() time.Time
	// HostReady, if set, waits until the host has an interface with the management IP
	// again (HNS reports the address before the vNIC holding it is up).
	HostReady func(ctx context.Context, mgmt netip.Addr) error
}

func (c *Config) setDefaults() {
	if c.BlipTimeout == 0 {
		c.BlipTimeout = 30 * time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = 500 * time.Millisecond
	}
	if c.WatchInterval == 0 {
		c.WatchInterval = 5 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		}
	}
}

// Plane is the HNS data plane, a backend.Plane. Prepare makes the network for the subnet the
// lease acquisition chose, before the lease is published; a full Apply lists HNS (and for
// host-gw the host's routes) and diffs; an incremental Apply writes only the changed peers,
// from the plane's model of what it programmed. A dual-stack node's IPv6 family is a view of
// the same plane (IPv6): one network, one model of it, one look at it for both families.
type Plane struct {
	hns  Client
	host Host
	log  *slog.Logger
	cfg  Config

	mu    sync.Mutex
	mode  PeerMode // resolved against HNS's version; PeersAuto until then
	net   netModel
	watch watchers
	// networkID is the ID of the network ensureNetwork last adopted or made, for
	// NetworkPolicy; clearACLs: weft's ACLs leave that network's endpoints when
	// ensureNetwork next has it (NetworkPolicy.Remove before the network was known).
	networkID      string
	networkOverlay bool
	clearACLs      bool
}

// New returns a plane on hns. host may be nil when the backend is vxlan.
func New(hns Client, host Host, cfg Config, log *slog.Logger) *Plane {
	cfg.setDefaults()
	return &Plane{hns: hns, host: host, log: log, cfg: cfg}
}

var _ backend.Plane = (*Plane)(nil)

// networkName is the HNS network of st: net-conf.json's Backend.Name, by default
// flannel.<VNI> (vxlan) or cbr0 (host-gw). The CNI network name must equal it.
func networkName(st *backend.State) string {
	switch {
	case st.Config != nil && st.Config.Backend.Name != "":
		return st.Config.Backend.Name
	case st.Device != nil:
		return backend.VXLANDeviceName(st.Device.VNI)
	}
	return "cbr0"
}

// Prepare implements backend.Plane: for st's subnet it makes (or adopts) the Overlay
// network, waits out the blip of the host network and returns the network's DR MAC, the
// VtepMAC to publish (vxlan); or the L2Bridge network, its host endpoint and forwarding
// (host-gw, zero MAC). The lease is thus published once, with the right MAC, and only once
// the node can carry traffic. The next Apply is a full one.
func (p *Plane) Prepare(ctx context.Context, st *backend.State) (backend.MAC, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.net.seal(p.cfg.Now)
	if p.net.borrow(st, true, p.cfg.Now()) != nil {
		return backend.MAC{}, nil // the other family's Prepare made the network for both, just now
	}
	p.net = netModel{} // the network may be made again: every family's next Apply is full
	if st.Device == nil {
		if _, err := p.ensureBridge(ctx, st, backend.Changes{}); err != nil {
			return backend.MAC{}, err
		}
		p.net.lend(st, &look{prepare: true})
		return backend.MAC{}, nil
	}
	return p.ensureOverlay(ctx, st)
}

// Held implements backend.SubnetKeeper: the static subnets, IPv4's and IPv6's, of the HNS
// network st names, if HNS has it.
func (p *Plane) Held(st *backend.State) (sn, sn6 netip.Prefix) {
	n, err := p.hns.NetworkByName(networkName(st))
	if err != nil {
		return sn, sn6
	}
	for _, s := range n.StaticSubnets() {
		switch pfx, err := netip.ParsePrefix(s.IPAddressPrefix); {
		case err != nil:
		case pfx.Addr().Is4():
			sn = pfx
		default:
			sn6 = pfx
		}
	}
	return sn, sn6
}

// checkSubnet: a node subnet HNS can serve, with room for the gateway, the host endpoint
// and a pod: an IPv4 /30 or larger, an IPv6 /126 or larger (an L2Bridge network's second
// subnet).
func checkSubnet(sn netip.Prefix) error {
	if sn.IsValid() && sn.Addr().Is6() && !sn.Addr().Is4In6() {
		if sn.Bits() > 126 || sn.Masked() != sn {
			return fmt.Errorf("node subnet %q: HNS needs an IPv6 subnet of /126 or larger", sn)
		}
		return nil
	}
	if !sn.IsValid() || !sn.Addr().Is4() || sn.Bits() > 30 || sn.Masked() != sn {
		return fmt.Errorf("node subnet %q: HNS needs an IPv4 subnet of /30 or larger", sn)
	}
	return nil
}

// gateway is the subnet's .1, where pods' default route points.
func gateway(sn netip.Prefix) netip.Addr { return sn.Masked().Addr().Next() }

// physicalAdapter is the adapter behind a vSwitch vNIC: once HNS made a network on
// "Ethernet", the host's address (and so the interface weftd picks) is on "vEthernet
// (Ethernet)", but a network is bound to the adapter, and the vNIC goes away with the last
// network.
func physicalAdapter(name string) string {
	if inner, ok := strings.CutPrefix(name, "vEthernet ("); ok && strings.HasSuffix(inner, ")") {
		return strings.TrimSuffix(inner, ")")
	}
	return name
}

// subnetMismatch says why a network does not serve subnet sn of the given type ("" if it
// does). As flanneld does, it compares the type and the subnet's prefix; what else it looks
// at (the default route) counts only where HNS reports it: a query need not echo what the
// network was made with, and replacing a network that serves the node costs a host NIC
// blink, a new DR MAC and the local endpoints. The adapter is not compared: once HNS made a
// vSwitch the interface weftd finds is its vNIC, "vEthernet (<adapter>)", and a restart
// must still adopt the network.
//
// sns are the node's subnets the network must carry, one per family (IPv4 first): the
// network must have exactly those (a dual-stack L2Bridge both, an Overlay one).
func subnetMismatch(n *HostComputeNetwork, typ NetworkType, sns ...netip.Prefix) string {
	if n.Type != typ {
		return fmt.Sprintf("type %s, want %s", n.Type, typ)
	}
	have := n.StaticSubnets()
	if len(have) == 0 {
		return "no static subnet"
	}
	if len(have) != len(sns) {
		return fmt.Sprintf("%d subnets, the node holds %d (%v)", len(have), len(sns), sns)
	}
	for i, sn := range sns {
		s := have[i]
		if p, err := netip.ParsePrefix(s.IPAddressPrefix); err != nil || p != sn {
			return fmt.Sprintf("subnet %s, the node holds %s", s.IPAddressPrefix, sn)
		}
		for _, r := range s.Routes {
			if r.DestinationPrefix == defaultRouteDst(sn) && r.NextHop != gateway(sn).String() {
				return fmt.Sprintf("default route via %s, want %s", r.NextHop, gateway(sn))
			}
		}
	}
	return ""
}

// ensureNetwork adopts the network called name if mismatch finds nothing wrong with it,
// else replaces it with want(); after a creation it waits until HNS reports the management
// IP and the host has it back (the host vNIC is re-created: the "blip"). It reports whether
// it created the network.
func (p *Plane) ensureNetwork(ctx context.Context, name string, sn netip.Prefix, mismatch func(*HostComputeNetwork) string, want func() *HostComputeNetwork) (*HostComputeNetwork, bool, error) {
	n, err := p.hns.NetworkByName(name)
	switch {
	case errors.Is(err, ErrNotFound):
		n = nil
	case err != nil:
		return nil, false, fmt.Errorf("looking up HNS network %s: %w", name, err)
	}
	if n != nil {
		why := mismatch(n)
		if why == "" {
			p.log.Debug("adopting HNS network", "network", name, "id", n.ID)
			n, err = p.waitManagementIP(ctx, n)
			if err == nil {
				p.adopted(n)
			}
			return n, false, err
		}
		p.log.Warn("replacing HNS network made for something else", "network", name, "id", n.ID, "reason", why)
		if err := p.hns.DeleteNetwork(n.ID); err != nil && !errors.Is(err, ErrNotFound) {
			return nil, false, fmt.Errorf("deleting HNS network %s (%s): %w", name, why, err)
		}
	}
	n, err = p.hns.CreateNetwork(want())
	if err != nil {
		return nil, false, fmt.Errorf("creating HNS network %s for %s: %w", name, sn, err)
	}
	p.log.Info("created HNS network; waiting for the host network to come back", "network", name, "id", n.ID, "subnet", sn)
	n, err = p.waitManagementIP(ctx, n)
	if err == nil {
		p.adopted(n)
	}
	return n, err == nil, err
}

// adopted records the network the plane has, and takes weft's NetworkPolicy ACLs off its
// endpoints if NetworkPolicy.Remove asked for it before (a failure is logged, and tried
// again the next time).
func (p *Plane) adopted(n *HostComputeNetwork) {
	p.networkID, p.networkOverlay = n.ID, n.Type == NetworkOverlay
	if !p.clearACLs {
		return
	}
	if err := p.removeACLs(n.ID); err != nil {
		p.log.Warn("removing the NetworkPolicy ACLs of an earlier run failed", "err", err)
		return
	}
	p.clearACLs = false
}

// waitManagementIP returns the network once HNS reports its management IP and HostReady
// (if set) sees the host holding it. Nothing else may talk to the datastore meanwhile: the
// host may have no network at all.
func (p *Plane) waitManagementIP(ctx context.Context, n *HostComputeNetwork) (*HostComputeNetwork, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.BlipTimeout)
	defer cancel()
	name := n.Name
	waited := time.Duration(0)
	for !n.ManagementIP().IsValid() {
		if waited >= p.cfg.BlipTimeout {
			return nil, fmt.Errorf("HNS network %s reported no management IP within %v", name, p.cfg.BlipTimeout)
		}
		if err := p.cfg.Sleep(ctx, p.cfg.PollInterval); err != nil {
			return nil, fmt.Errorf("waiting for the management IP of HNS network %s: %w", name, err)
		}
		waited += p.cfg.PollInterval
		var err error
		if n, err = p.hns.NetworkByName(name); err != nil {
			return nil, fmt.Errorf("waiting for the management IP of HNS network %s: %w", name, err)
		}
	}
	if p.cfg.HostReady != nil {
		if err := p.cfg.HostReady(ctx, n.ManagementIP()); err != nil {
			return nil, fmt.Errorf("waiting for the host interface with %s (HNS network %s): %w", n.ManagementIP(), n.Name, err)
		}
	}
	if waited > 0 {
		p.log.Info("host network back", "network", n.Name, "management_ip", n.ManagementIP(), "after", waited)
	}
	return n, nil
}

// writeNetworkFile writes the network's name and type to NetworkFile, if set.
func (p *Plane) writeNetworkFile(n *HostComputeNetwork) error {
	if p.cfg.NetworkFile == "" {
		return nil
	}
	return hnsfile.WriteNetwork(p.cfg.NetworkFile, hnsfile.Network{Name: n.Name, Type: string(n.Type), NetworkPolicy: p.cfg.NetworkPolicy})
}

// Kinds of backend.Changes the plane counts.
const (
	changeNetwork   = "hns_network"
	changePolicy    = "hns_policy"
	changeEndpoint  = "hns_endpoint"
	changeNamespace = "hns_namespace"
	changeForward   = "forwarding"
	changeRoute     = "route"
)

// Apply implements backend.Plane. A full update lists the network (and the host's routes
// for host-gw), diffs it against st and rebuilds the model; otherwise each changed peer
// costs its own writes and no listing: one policy request for a peer that joins or leaves
// (two, remove then add, for one that changes: HNS takes one policy per destination), one
// request per pod address with remote endpoints, one route for host-gw. An incremental
// update the model cannot serve (no full Apply yet, or st is for another subnet or
// network) is done in full. For vxlan, a network that is gone or no longer fits the
// node's subnet is a *backend.MissingDeviceError: the caller Prepares again. st.Masquerade
// is not the plane's: outbound NAT of pod traffic is an endpoint policy the CNI plugin
// (win-overlay, win-bridge) sets from its ipMasq.
func (p *Plane) Apply(ctx context.Context, st *backend.State, u backend.Update) (backend.Changes, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !st.Own.IsValid() {
		return nil, errors.New("applying a State with no own subnet: the lease is not known yet")
	}
	defer p.net.seal(p.cfg.Now)
	ch := backend.Changes{}
	var err error
	switch lent := p.net.borrow(st, false, p.cfg.Now()); {
	case !u.Full && p.net.fits(st):
		err = p.applyPeers(ctx, st, u.Peers, ch)
	case st.Device != nil:
		err = p.applyOverlay(ctx, st, ch)
	default:
		err = p.applyHostGW(ctx, st, lent, ch)
	}
	return ch, err
}

// applyPeers is an incremental Apply: the changes, compared with the family's model, make a
// plan that the mode's one writer executes, as it does a full Apply's. It stops early, with
// ctx's error, when ctx ends.
func (p *Plane) applyPeers(ctx context.Context, st *backend.State, changes []backend.PeerChange, ch backend.Changes) error {
	f := p.net.fam(stateFamily(st))
	if p.net.overlay {
		return p.writeOverlay(ctx, p.net.overlayChanges(f, changes, p.mode), f, ch)
	}
	pl, err := p.net.routeChanges(f, changes)
	return errors.Join(err, p.writeRoutes(ctx, pl, f, ch))
}

// writeErrors are a writer's errors, each naming the peer it is for when there is one.
type writeErrors struct {
	ctx  context.Context
	what string // what the writer does, for ctx's error
	errs []error
}

func (w *writeErrors) fail(peer string, err error) {
	if peer != "" {
		err = fmt.Errorf("peer %s: %w", peer, err)
	}
	w.errs = append(w.errs, err)
}

// stopped reports whether ctx ended, and keeps its error.
func (w *writeErrors) stopped() bool {
	if err := w.ctx.Err(); err != nil {
		w.errs = append(w.errs, fmt.Errorf("%s: %w", w.what, err))
		return true
	}
	return false
}

func (w *writeErrors) err() error { return errors.Join(w.errs...) }

// Close implements backend.Plane. It releases nothing: HNS and the host keep their state,
// so traffic flows on while weftd restarts.
func (p *Plane) Close() error { return nil }

// IPv6 is the plane of a dual-stack network's IPv6 family: host-gw only, since HNS Overlay
// networks carry no IPv6 between pods (Capabilities: the config is refused). It is a view of
// p, as one L2Bridge network carries both families' subnets: p's one model of the network
// holds each family's routes; the second family's Prepare or full Apply, right after the
// first's, starts from what the first found of HNS and the host; the two families' Watches
// share one look at the network.
func (p *Plane) IPv6() backend.Plane { return ipv6Plane{p} }

type ipv6Plane struct{ p *Plane }

func (v ipv6Plane) Prepare(ctx context.Context, st *backend.State) (backend.MAC, error) {
	return v.p.Prepare(ctx, st)
}

func (v ipv6Plane) Apply(ctx context.Context, st *backend.State, u backend.Update) (backend.Changes, error) {
	return v.p.Apply(ctx, st, u)
}

func (v ipv6Plane) Capabilities() backend.Capabilities { return v.p.Capabilities() }

func (v ipv6Plane) Watch(ctx context.Context, drift func()) error {
	return v.p.watchFamily(ctx, backend.IPv6, drift)
}

func (v ipv6Plane) Held(st *backend.State) (netip.Prefix, netip.Prefix) { return v.p.Held(st) }

func (v ipv6Plane) Close() error { return nil }
