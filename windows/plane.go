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
	"github.com/weftnet/weft/subnet"
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

// Config is how the plane programs HNS; the zero value is flanneld's behaviour.
type Config struct {
	// NetworkName is the HNS network: net-conf.json's Backend.Name, by default
	// flannel.<VNI> (vxlan) or cbr0 (host-gw). The CNI network name must equal it.
	NetworkName string
	// DNSServers are host-gw's DNSServerList.
	DNSServers []string
	// MacPrefix is the two bytes remote endpoints' MACs start with; default "0E-2A".
	MacPrefix string
	Peers     PeerMode
	// SourceVIPFile, if set, is where the overlay's kube-proxy source VIP is written
	// (see WriteSourceVIP), each time the network is made or adopted.
	SourceVIPFile string
	// BlipTimeout bounds the wait for the host network after HNS makes a network (30 s);
	// PollInterval is how often it looks (500 ms).
	BlipTimeout  time.Duration
	PollInterval time.Duration
	// Sleep waits d or until ctx ends; tests pass a fake clock's.
	Sleep func(ctx context.Context, d time.Duration) error
	// HostReady, if set, waits until the host has an interface with the management IP
	// again (HNS reports the address before the vNIC holding it is up).
	HostReady func(ctx context.Context, mgmt netip.Addr) error
}

// ConfigFrom fills a Config from the network config's backend keys.
func ConfigFrom(b subnet.BackendConfig) Config {
	c := Config{NetworkName: b.Name, MacPrefix: b.MacPrefix}
	for _, s := range strings.Split(b.DNSServerList, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.DNSServers = append(c.DNSServers, s)
		}
	}
	return c
}

func (c *Config) setDefaults() {
	if c.MacPrefix == "" {
		c.MacPrefix = "0E-2A"
	}
	if c.BlipTimeout == 0 {
		c.BlipTimeout = 30 * time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = 500 * time.Millisecond
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

// ErrNoSubnet is Apply's answer before the node's subnet is known: an HNS network cannot be
// made without it.
var ErrNoSubnet = errors.New("the HNS network needs the node's subnet: Prepare makes it in the lease acquisition")

var _ backend.Plane = (*Plane)(nil)

// Plane is the HNS data plane. Prepare makes the network for the subnet the lease acquisition
// chose, before the lease is published; Apply converges peers.
type Plane struct {
	hns  Client
	host Host
	log  *slog.Logger
	cfg  Config

	mu      sync.Mutex
	own     netip.Prefix // the node's subnet, once known
	adapter string       // the external interface
	mode    PeerMode     // resolved: never PeersAuto once the overlay is made
	// network is the overlay network's ID as the last full Apply found it, for incremental
	// Applies of RemoteSubnetRoute policies; "" forces a full one.
	network string
}

// New returns a plane on hns, with the OS options of cfg (peer mode, source VIP file, the
// host's readiness); the network config's keys (Backend.Name, DNSServerList, MacPrefix) come
// with each State. host may be nil when the backend is vxlan.
func New(hns Client, host Host, cfg Config, log *slog.Logger) *Plane {
	cfg.setDefaults()
	return &Plane{hns: hns, host: host, log: log, cfg: cfg}
}

// follow takes the network config's keys and the node's adapter from st. Callers hold p.mu.
func (p *Plane) follow(st *backend.State) {
	nc := ConfigFrom(st.Config.Backend)
	p.cfg.NetworkName, p.cfg.DNSServers = nc.NetworkName, nc.DNSServers
	if nc.MacPrefix != "" {
		p.cfg.MacPrefix = nc.MacPrefix
	}
	p.adapter = st.Underlay
}

// Prepare makes (or adopts) the network for st's subnet: for vxlan the Overlay network, whose
// DR MAC it returns as the node's VTEP MAC, waiting out the blip of the host network; for
// host-gw the L2Bridge network, its host endpoint and forwarding. The lease is thus published
// once, with the right MAC, and only once the node can carry traffic.
func (p *Plane) Prepare(ctx context.Context, st *backend.State) (backend.MAC, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.follow(st)
	p.network = ""
	if st.Device != nil {
		return p.ensureOverlay(ctx, *st.Device, st.Own)
	}
	if err := p.ensureBridge(ctx, st.Own, backend.Changes{}); err != nil {
		return backend.MAC{}, err
	}
	p.own = st.Own
	return backend.MAC{}, nil
}

func (p *Plane) overlayName(dev backend.VXLANDevice) string {
	if p.cfg.NetworkName != "" {
		return p.cfg.NetworkName
	}
	return backend.VXLANDeviceName(dev.VNI)
}

func (p *Plane) bridgeName() string {
	if p.cfg.NetworkName != "" {
		return p.cfg.NetworkName
	}
	return "cbr0"
}

func checkSubnet(sn netip.Prefix) error {
	if !sn.IsValid() || !sn.Addr().Is4() || sn.Bits() > 30 || sn.Masked() != sn {
		return fmt.Errorf("node subnet %q: HNS needs an IPv4 subnet of /30 or larger", sn)
	}
	return nil
}

// gateway is the subnet's .1, where pods' default route points.
func gateway(sn netip.Prefix) netip.Addr { return sn.Masked().Addr().Next() }

// overlayNetwork is the Overlay network flanneld makes for a subnet.
func overlayNetwork(name string, dev backend.VXLANDevice, sn netip.Prefix) *HostComputeNetwork {
	n := &HostComputeNetwork{
		Name:  name,
		Type:  NetworkOverlay,
		Flags: EnableNonPersistent,
		Ipams: []Ipam{{Type: "Static", Subnets: []Subnet{{
			IPAddressPrefix: sn.String(),
			Policies:        []Policy{VSIDPolicy(dev.VNI)},
			Routes:          []Route{{NextHop: gateway(sn).String(), DestinationPrefix: "0.0.0.0/0"}},
		}}}},
		SchemaVersion: schemaV2(),
	}
	if dev.Underlay != "" {
		n.Policies = []Policy{NetAdapterNamePolicy(physicalAdapter(dev.Underlay))}
	}
	return n
}

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
// does). The adapter is not compared: once HNS made a vSwitch the interface weftd finds is
// its vNIC, "vEthernet (<adapter>)", and a restart must still adopt the network.
func subnetMismatch(n *HostComputeNetwork, typ NetworkType, sn netip.Prefix) string {
	if n.Type != typ {
		return fmt.Sprintf("type %s, want %s", n.Type, typ)
	}
	s := n.staticSubnet()
	if s == nil {
		return "no static subnet"
	}
	if have, err := netip.ParsePrefix(s.IPAddressPrefix); err != nil || have != sn {
		return fmt.Sprintf("subnet %s, the node holds %s", s.IPAddressPrefix, sn)
	}
	for _, r := range s.Routes {
		if r.DestinationPrefix == "0.0.0.0/0" && r.NextHop == gateway(sn).String() {
			return ""
		}
	}
	return fmt.Sprintf("no default route via %s", gateway(sn))
}

func overlayMismatch(n *HostComputeNetwork, vni uint32, sn netip.Prefix) string {
	if why := subnetMismatch(n, NetworkOverlay, sn); why != "" {
		return why
	}
	for _, pol := range n.staticSubnet().Policies {
		var s VSIDSettings
		if pol.Type == PolicyVSID && pol.Decode(&s) == nil {
			if s.IsolationID != vni {
				return fmt.Sprintf("VSID %d, want %d", s.IsolationID, vni)
			}
			return ""
		}
	}
	return "no VSID"
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

// ensureOverlay makes or adopts the Overlay network for sn and returns its DR MAC.
func (p *Plane) ensureOverlay(ctx context.Context, dev backend.VXLANDevice, sn netip.Prefix) (backend.MAC, error) {
	if err := checkSubnet(sn); err != nil {
		return backend.MAC{}, err
	}
	// HNS takes VSIDs from 4096; hcn's RemoteSubnetRoute carries the VNI in 16 bits.
	if dev.VNI < subnet.DefaultVNIWindows || dev.VNI > 1<<16-1 {
		return backend.MAC{}, fmt.Errorf("VNI %d: HNS needs a VNI between %d and %d", dev.VNI, subnet.DefaultVNIWindows, 1<<16-1)
	}
	if dev.Port != 0 && dev.Port != subnet.WindowsVXLANPort {
		return backend.MAC{}, fmt.Errorf("VXLAN port %d: HNS only uses %d", dev.Port, subnet.WindowsVXLANPort)
	}
	v, err := p.hns.Version()
	if err != nil {
		return backend.MAC{}, fmt.Errorf("HNS version: %w", err)
	}
	mode, err := resolveMode(p.cfg.Peers, v)
	if err != nil {
		return backend.MAC{}, err
	}
	name := p.overlayName(dev)
	n, _, err := p.ensureNetwork(ctx, name, sn, func(n *HostComputeNetwork) string { return overlayMismatch(n, dev.VNI, sn) },
		func() *HostComputeNetwork { return overlayNetwork(name, dev, sn) })
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
	if p.cfg.SourceVIPFile != "" {
		if err := WriteSourceVIP(p.cfg.SourceVIPFile, sn); err != nil {
			return backend.MAC{}, err
		}
	}
	p.own, p.mode = sn, mode
	p.log.Info("HNS overlay network ready", "network", name, "id", n.ID, "subnet", sn, "vtep_mac", mac,
		"hns", v, "peers_as", mode, "source_vip", SourceVIP(sn))
	return mac, nil
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
	return n, err == nil, err
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

// Apply converges HNS (and for host-gw the host's routes) to st. For vxlan, a network that is
// gone or no longer fits the node's subnet is reported as a backend.MissingDeviceError: the
// daemon then Prepares again and publishes the new MAC. An incremental update of
// RemoteSubnetRoute peers is one policy request per changed peer, with no listing; everything
// else (a full update, remote endpoints, host-gw) lists HNS and diffs.
func (p *Plane) Apply(ctx context.Context, st *backend.State, u backend.Update) (backend.Changes, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.follow(st)
	if st.Own.IsValid() {
		p.own = st.Own
	}
	if !p.own.IsValid() {
		return nil, fmt.Errorf("apply: %w", ErrNoSubnet)
	}
	own := ownershipOf(st)
	if st.Device == nil {
		return p.reconcileHostGW(ctx, st, own)
	}
	if !u.Full && p.network != "" && p.mode == PeersRemoteSubnetRoute {
		return p.applyRemoteSubnetRoutes(st.Device.VNI, u.Peers)
	}
	return p.reconcileOverlay(st, own)
}

// applyRemoteSubnetRoutes writes the RemoteSubnetRoute policies of changed peers: the new one
// added, the old one removed (HNS takes one policy per destination, so a peer whose policy
// changes loses it for the moment between the two requests).
func (p *Plane) applyRemoteSubnetRoutes(vni uint32, changes []backend.PeerChange) (backend.Changes, error) {
	ch := backend.Changes{}
	var errs []error
	for _, c := range changes {
		old, oldErr := overlayPeer(c.Old)
		new, newErr := overlayPeer(c.New)
		if c.New.IsValid() && newErr != nil {
			errs = append(errs, newErr)
		}
		oldOK, newOK := c.Old.IsValid() && oldErr == nil, c.New.IsValid() && newErr == nil
		if oldOK && newOK && old == new {
			continue
		}
		if oldOK {
			pol := RemoteSubnetRoutePolicy(rsrSettings(old, vni))
			if err := p.hns.ModifyNetworkSettings(p.network, PolicyRequest(RequestRemove, pol)); err != nil && !errors.Is(err, ErrNotFound) {
				errs = append(errs, fmt.Errorf("removing %s policy %s: %w", pol.Type, pol.Settings, err))
			} else {
				ch[changePolicy]++
			}
		}
		if newOK {
			pol := RemoteSubnetRoutePolicy(rsrSettings(new, vni))
			if err := p.hns.ModifyNetworkSettings(p.network, PolicyRequest(RequestAdd, pol)); err != nil {
				errs = append(errs, fmt.Errorf("adding %s policy %s: %w", pol.Type, pol.Settings, err))
			} else {
				ch[changePolicy]++
			}
		}
	}
	if len(errs) > 0 {
		p.network = "" // the next Apply lists HNS again
	}
	return ch, errors.Join(errs...)
}

// Kinds of backend.Changes the plane counts, besides "route".
const (
	changeNetwork   = "hns_network"
	changePolicy    = "hns_policy"
	changeEndpoint  = "hns_endpoint"
	changeNamespace = "hns_namespace"
	changeForward   = "forwarding"
	changeRoute     = "route"
)

func (p *Plane) reconcileOverlay(st *backend.State, owned ownership) (backend.Changes, error) {
	p.network = ""
	dev := *st.Device
	name := p.overlayName(dev)
	n, err := p.hns.NetworkByName(name)
	if errors.Is(err, ErrNotFound) {
		return nil, &backend.MissingDeviceError{Name: name}
	}
	if err != nil {
		return nil, fmt.Errorf("looking up HNS network %s: %w", name, err)
	}
	if why := overlayMismatch(n, dev.VNI, p.own); why != "" {
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
	peers, peerErr := overlayPeers(st)
	ch := backend.Changes{}
	var errs []error
	if peerErr != nil {
		errs = append(errs, peerErr)
	}
	if added, err := p.ensureHostRoute(n); err != nil {
		errs = append(errs, err)
	} else if added {
		ch[changePolicy]++
	}

	rsrPeers, epPeers := peers, []Peer(nil)
	if p.mode == PeersRemoteEndpoints {
		rsrPeers, epPeers = nil, peers
	}
	// Both kinds are always diffed, so a change of mode leaves nothing of the other behind.
	plan := diffRemoteSubnetRoutes(rsrPeers, dev.VNI, n.Policies, owned)
	for _, pol := range plan.Remove {
		if err := p.hns.ModifyNetworkSettings(n.ID, PolicyRequest(RequestRemove, pol)); err != nil {
			errs = append(errs, fmt.Errorf("removing %s policy %s: %w", pol.Type, pol.Settings, err))
			continue
		}
		ch[changePolicy]++
	}
	for _, pol := range plan.Add {
		if err := p.hns.ModifyNetworkSettings(n.ID, PolicyRequest(RequestAdd, pol)); err != nil {
			errs = append(errs, fmt.Errorf("adding %s policy %s: %w", pol.Type, pol.Settings, err))
			continue
		}
		ch[changePolicy]++
	}
	eps, err := p.hns.NetworkEndpoints(n.ID)
	if err != nil {
		errs = append(errs, fmt.Errorf("listing endpoints of HNS network %s: %w", name, err))
		return ch, errors.Join(errs...)
	}
	epp := diffRemoteEndpoints(epPeers, n.ID, p.cfg.MacPrefix, eps, owned)
	for _, ep := range epp.Delete {
		if err := p.hns.DeleteEndpoint(ep.ID); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, fmt.Errorf("deleting remote endpoint %s: %w", ep.Name, err))
			continue
		}
		ch[changeEndpoint]++
	}
	for _, ep := range epp.Create {
		if _, err := p.hns.CreateEndpoint(&ep); err != nil {
			errs = append(errs, fmt.Errorf("creating remote endpoint %s: %w", ep.Name, err))
			continue
		}
		ch[changeEndpoint]++
	}
	if len(errs) == 0 && p.mode == PeersRemoteSubnetRoute {
		p.network = n.ID // the policies are as wanted: incremental updates may follow
	}
	return ch, errors.Join(errs...)
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

// Watch waits for ctx: HNS tells nobody of changes, so drift is found by the periodic
// resync.
func (p *Plane) Watch(ctx context.Context, drift func()) error {
	<-ctx.Done()
	return nil
}

// Close releases nothing: HNS and the host keep their state, so traffic flows on while weftd
// restarts.
func (p *Plane) Close() error { return nil }
