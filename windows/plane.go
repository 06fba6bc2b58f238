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
	"github.com/weftnet/weft/backend/vxlan"
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

// ErrNoSubnet is EnsureVXLAN's answer before the node's subnet is known: an HNS Overlay
// network cannot be made without it. Use PrepareVXLAN with the lease acquisition.
var ErrNoSubnet = errors.New("the HNS overlay network needs the node's subnet: make it in the lease's Prepare")

// Plane is the HNS data plane. It serves the daemon's Plane interface, and adds
// PrepareVXLAN and PrepareHostGW, which make the network for the subnet the lease
// acquisition chose, before the lease is published.
type Plane struct {
	hns  Client
	host Host
	log  *slog.Logger
	cfg  Config

	mu      sync.Mutex
	own     netip.Prefix         // the node's subnet, once known
	dev     *backend.VXLANDevice // the overlay device, once made (vxlan)
	adapter string               // the external interface (host-gw)
	mode    PeerMode             // resolved: never PeersAuto once the overlay is made
}

// New returns a plane on hns. host may be nil when the backend is vxlan.
func New(hns Client, host Host, cfg Config, log *slog.Logger) *Plane {
	cfg.setDefaults()
	return &Plane{hns: hns, host: host, log: log, cfg: cfg}
}

// Configure replaces the plane's Config: weftd makes the plane before it has read the
// network config (Backend.Name, DNSServerList, MacPrefix). Call it before the Prepare
// functions.
func (p *Plane) Configure(cfg Config) {
	cfg.setDefaults()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg = cfg
}

// PrepareVXLAN returns the function for subnet.AcquireRequest.Prepare on a vxlan node: for
// the chosen subnet it makes (or adopts) the Overlay network, waits out the blip of the
// host network, and returns attrs with the network's DR MAC as VtepMAC. The lease is thus
// published once, with the right MAC, and only once the node can carry traffic.
func (p *Plane) PrepareVXLAN(dev backend.VXLANDevice, attrs subnet.LeaseAttrs) func(ctx context.Context, sn, sn6 netip.Prefix) (subnet.LeaseAttrs, error) {
	return func(ctx context.Context, sn, _ netip.Prefix) (subnet.LeaseAttrs, error) {
		mac, err := p.ensureOverlay(ctx, dev, sn)
		if err != nil {
			return subnet.LeaseAttrs{}, err
		}
		out := attrs
		out.BackendData = vxlan.Data{VNI: dev.VNI, VtepMAC: mac}.Encode()
		return out, nil
	}
}

// PrepareHostGW is PrepareVXLAN for host-gw: the L2Bridge network on adapter, its host
// endpoint and forwarding; attrs are published unchanged.
func (p *Plane) PrepareHostGW(adapter string, attrs subnet.LeaseAttrs) func(ctx context.Context, sn, sn6 netip.Prefix) (subnet.LeaseAttrs, error) {
	return func(ctx context.Context, sn, _ netip.Prefix) (subnet.LeaseAttrs, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.adapter = adapter
		if err := p.ensureBridge(ctx, sn, backend.Changes{}); err != nil {
			return subnet.LeaseAttrs{}, err
		}
		p.own = sn
		return attrs, nil
	}
}

// EnsureVXLAN makes the Overlay network again for the subnet the node holds and returns its
// new DR MAC; the daemon calls it after Reconcile reported the network missing. Before the
// subnet is known it returns ErrNoSubnet.
func (p *Plane) EnsureVXLAN(dev backend.VXLANDevice) (backend.MAC, error) {
	p.mu.Lock()
	own := p.own
	p.mu.Unlock()
	if !own.IsValid() {
		return backend.MAC{}, ErrNoSubnet
	}
	return p.ensureOverlay(context.Background(), dev, own)
}

func (p *Plane) overlayName(dev backend.VXLANDevice) string {
	if p.cfg.NetworkName != "" {
		return p.cfg.NetworkName
	}
	return vxlan.DeviceName(dev.VNI)
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
	p.mu.Lock()
	defer p.mu.Unlock()
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
	p.own, p.dev, p.mode = sn, &dev, mode
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

// Reconcile converges HNS (and for host-gw the host's routes) to st. For vxlan, a network
// that is gone or no longer fits the node's subnet is reported as a
// backend.MissingDeviceError: the daemon then calls EnsureVXLAN and publishes the new MAC.
func (p *Plane) Reconcile(st backend.State, owned backend.Ownership) (backend.Changes, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range owned.Own {
		if o.Addr().Is4() {
			p.own = o
		}
	}
	if !p.own.IsValid() {
		return nil, fmt.Errorf("reconcile: %w", ErrNoSubnet)
	}
	if st.VXLAN != nil {
		return p.reconcileOverlay(st, owned)
	}
	return p.reconcileHostGW(st, owned)
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

func (p *Plane) reconcileOverlay(st backend.State, owned backend.Ownership) (backend.Changes, error) {
	dev := *st.VXLAN
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

// Masquerade does nothing on Windows: outbound NAT of pod traffic is an endpoint policy
// the CNI plugin (win-overlay, win-bridge) sets from its ipMasq.
func (p *Plane) Masquerade(network, own netip.Prefix) (bool, error) { return false, nil }

// Watch waits for ctx: HNS tells nobody of changes, so drift is found by the periodic
// resync.
func (p *Plane) Watch(ctx context.Context, changed func()) error {
	<-ctx.Done()
	return nil
}

// Close releases nothing: HNS and the host keep their state, so traffic flows on while
// weftd restarts.
func (p *Plane) Close() {}
