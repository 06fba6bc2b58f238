package windows

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemHNS is an in-memory HNS for tests. It refuses what HNS (and hcn, which checks some
// things before calling HNS) refuses: a subnet without a default route, a second network of
// a name, unknown IDs (ErrNotFound), policies this version lacks (ErrNotSupported), a
// second RemoteSubnetRoute for a destination (ErrExists). It behaves as HNS does where
// weft depends on it: it gives each Overlay network a DR MAC (00-15-5D-xx-xx-xx), reports a
// network's management IP only once the host vNIC is back (Blip after creation), and
// forgets non-persistent networks on Reboot. It records every request that changes
// something (Requests) and renders its state as text (Render).
type MemHNS struct {
	opts MemOptions

	mu         sync.Mutex
	networks   []*memNetwork // in creation order
	endpoints  []*HostComputeEndpoint
	namespaces []*HostComputeNamespace
	seq        int // IDs and DR MACs
	requests   []Request
	reads      int // lookups and listings, which requests do not record
}

// MemOptions configure a MemHNS.
type MemOptions struct {
	Version Version // default 10.0
	// ManagementIP is the host address reported for every network after the blip.
	ManagementIP netip.Addr
	// Blip is how long after a network's creation its management IP stays unreported.
	Blip time.Duration
	Now  func() time.Time // default time.Now
	// MACByte is the fourth byte of the DR MACs this HNS gives (default 0xC0): HNS takes
	// them from the host's MAC pool, so two hosts' differ.
	MACByte byte
	// Host, if set, sees what HNS does to the host: the adapter a network binds moves to a
	// vSwitch vNIC ("vEthernet (<adapter>)"), an endpoint attached to the host namespace gets
	// a vNIC, and Reboot drops both.
	Host *MemHost
}

type memNetwork struct {
	n       HostComputeNetwork // as created, with the policies HNS added at once
	added   []Policy           // policies added later, in order
	mgmtAt  time.Time          // when the management IP shows up
	adapter string
}

// Request is one recorded request: what was asked (Op), of which object (ID), with what
// JSON (Body, as hcn would send it).
type Request struct {
	Op   string
	ID   string          `json:",omitempty"`
	Body json.RawMessage `json:",omitempty"`
}

// NewMemHNS returns an empty HNS.
func NewMemHNS(o MemOptions) *MemHNS {
	if o.Version == (Version{}) {
		o.Version = Version{Major: 10, Minor: 0}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MACByte == 0 {
		o.MACByte = 0xC0
	}
	return &MemHNS{opts: o}
}

var _ Client = (*MemHNS)(nil)

func (h *MemHNS) record(op, id string, body any) {
	r := Request{Op: op, ID: id}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			panic(fmt.Sprintf("memhns: marshal %s request: %v", op, err)) // model types always marshal
		}
		r.Body = b
	}
	h.requests = append(h.requests, r)
}

// Requests returns the requests that changed something, oldest first.
func (h *MemHNS) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.requests)
}

// ResetRequests forgets the recorded requests and reads, so a test can look at what one step
// did.
func (h *MemHNS) ResetRequests() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests, h.reads = nil, 0
}

// Reads counts the lookups and listings (NetworkByName, NetworkEndpoints) since the last
// ResetRequests.
func (h *MemHNS) Reads() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reads
}

// SetVersion changes the version HNS reports (an upgrade between two runs).
func (h *MemHNS) SetVersion(v Version) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opts.Version = v
}

func (h *MemHNS) newID() string {
	h.seq++
	return fmt.Sprintf("00000000-0000-4000-8000-%012X", h.seq)
}

// Version implements Client.
func (h *MemHNS) Version() (Version, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.opts.Version, nil
}

// view is the network as HNS reports it now.
func (h *MemHNS) view(m *memNetwork) *HostComputeNetwork {
	n := m.n
	n.Policies = slices.Clone(m.n.Policies)
	if h.opts.ManagementIP.IsValid() && !h.opts.Now().Before(m.mgmtAt) {
		n.Policies = append(n.Policies, ProviderAddressPolicy(h.opts.ManagementIP))
	}
	n.Policies = append(n.Policies, m.added...)
	return deepCopy(&n)
}

// deepCopy hands out copies, so callers cannot change the stored state by mutating results.
func deepCopy[T any](v *T) *T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("memhns: copy: %v", err))
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		panic(fmt.Sprintf("memhns: copy: %v", err))
	}
	return out
}

// NetworkByName implements Client.
func (h *MemHNS) NetworkByName(name string) (*HostComputeNetwork, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reads++
	for _, m := range h.networks {
		if m.n.Name == name {
			return h.view(m), nil
		}
	}
	return nil, fmt.Errorf("HNS network %q: %w", name, ErrNotFound)
}

func (h *MemHNS) network(id string) (*memNetwork, error) {
	for _, m := range h.networks {
		if strings.EqualFold(m.n.ID, id) {
			return m, nil
		}
	}
	return nil, fmt.Errorf("HNS network %s: %w", id, ErrNotFound)
}

// CreateNetwork implements Client.
func (h *MemHNS) CreateNetwork(req *HostComputeNetwork) (*HostComputeNetwork, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := checkNewNetwork(req); err != nil {
		return nil, err
	}
	for _, m := range h.networks {
		if m.n.Name == req.Name {
			return nil, fmt.Errorf("HNS network %q: %w", req.Name, ErrExists)
		}
	}
	adapter := ""
	for _, p := range req.Policies {
		var s NetAdapterNameSettings
		if p.Type == PolicyNetAdapterName && p.Decode(&s) == nil {
			adapter = s.NetworkAdapterName
		}
	}
	if h.opts.Host != nil && adapter != "" && !h.opts.Host.hasAdapter(adapter) {
		return nil, fmt.Errorf("HNS network create %q: network adapter %q: %w", req.Name, adapter, ErrNotFound)
	}
	h.record("CreateNetwork", "", req)
	m := &memNetwork{n: *deepCopy(req), mgmtAt: h.opts.Now().Add(h.opts.Blip), adapter: adapter}
	m.n.ID = h.newID()
	if m.n.Type == NetworkOverlay {
		m.n.Policies = append(m.n.Policies, DrMacAddressPolicy(fmt.Sprintf("00-15-5D-%02X-%02X-%02X", h.opts.MACByte, (h.seq>>8)&0xff, h.seq&0xff)))
	}
	if h.opts.Host != nil && adapter != "" {
		h.opts.Host.vSwitch(adapter)
	}
	h.networks = append(h.networks, m)
	return h.view(m), nil
}

// checkNewNetwork refuses what hcn's Create and HNS refuse.
func checkNewNetwork(n *HostComputeNetwork) error {
	if n.ID != "" {
		return fmt.Errorf("HNS network create: ID %s given: HNS assigns IDs", n.ID)
	}
	if n.Name == "" {
		return fmt.Errorf("HNS network create: no name")
	}
	if n.SchemaVersion != schemaV2() {
		return fmt.Errorf("HNS network create %q: schema version %s, want 2.0", n.Name, n.SchemaVersion)
	}
	switch n.Type {
	case NetworkOverlay, NetworkL2Bridge:
	default:
		return fmt.Errorf("HNS network create %q: type %q: %w", n.Name, n.Type, ErrNotSupported)
	}
	subnets := 0
	for _, ipam := range n.Ipams {
		for _, sn := range ipam.Subnets {
			subnets++
			if sn.IPAddressPrefix == "" {
				continue
			}
			if _, err := netip.ParsePrefix(sn.IPAddressPrefix); err != nil {
				return fmt.Errorf("HNS network create %q: subnet %q: %w", n.Name, sn.IPAddressPrefix, err)
			}
			// hcn's Create: a subnet with a prefix needs gateways, and a default route.
			hasDefault := false
			for _, r := range sn.Routes {
				if r.NextHop == "" {
					return fmt.Errorf("network create error, subnet has address prefix but no gateway specified")
				}
				if r.DestinationPrefix == "0.0.0.0/0" || r.DestinationPrefix == "::/0" {
					hasDefault = true
				}
			}
			if !hasDefault {
				return fmt.Errorf("network create error, no default gateway")
			}
			if n.Type != NetworkOverlay {
				continue
			}
			var vsid VSIDSettings
			found := false
			for _, p := range sn.Policies {
				if p.Type == PolicyVSID && p.Decode(&vsid) == nil {
					found = true
				}
			}
			if !found || vsid.IsolationID < 4096 || vsid.IsolationID > 1<<24-1 {
				return fmt.Errorf("HNS network create %q: an Overlay subnet needs a VSID policy with an IsolationId of 4096 or more", n.Name)
			}
		}
	}
	if subnets == 0 {
		return fmt.Errorf("HNS network create %q: no subnet", n.Name)
	}
	return nil
}

// DeleteNetwork implements Client. The network's endpoints go with it.
func (h *MemHNS) DeleteNetwork(id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, err := h.network(id)
	if err != nil {
		return err
	}
	h.record("DeleteNetwork", id, nil)
	h.dropNetwork(m)
	return nil
}

func (h *MemHNS) dropNetwork(m *memNetwork) {
	h.networks = slices.DeleteFunc(h.networks, func(x *memNetwork) bool { return x == m })
	for _, ep := range slices.Clone(h.endpoints) {
		if ep.HostComputeNetwork == m.n.ID {
			h.dropEndpoint(ep)
		}
	}
	// The vSwitch, and the host's vNIC on it, go with the adapter's last network.
	if h.opts.Host != nil && m.adapter != "" && !slices.ContainsFunc(h.networks, func(x *memNetwork) bool { return x.adapter == m.adapter }) {
		h.opts.Host.unSwitch(m.adapter)
	}
}

// ModifyNetworkSettings implements Client.
func (h *MemHNS) ModifyNetworkSettings(networkID string, req *ModifyNetworkSettingRequest) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, err := h.network(networkID)
	if err != nil {
		return err
	}
	if req.ResourceType != "Policy" {
		return fmt.Errorf("HNS network %s: modify %q: %w", networkID, req.ResourceType, ErrNotSupported)
	}
	var pr PolicyNetworkRequest
	if err := json.Unmarshal(req.Settings, &pr); err != nil {
		return fmt.Errorf("HNS network %s: policy request %s: %w", networkID, req.Settings, err)
	}
	switch req.RequestType {
	case RequestAdd:
		added := slices.Clone(m.added)
		for _, p := range pr.Policies {
			if err := h.checkAdd(m, added, p); err != nil {
				return fmt.Errorf("HNS network %s: add %s policy: %w", m.n.Name, p.Type, err)
			}
			added = append(added, p)
		}
		h.record("ModifyNetworkSettings", networkID, req)
		m.added = added
	case RequestRemove:
		added := slices.Clone(m.added)
		for _, p := range pr.Policies {
			i := slices.IndexFunc(added, func(x Policy) bool { return samePolicy(x, p) })
			if i < 0 {
				return fmt.Errorf("HNS network %s: remove %s policy %s: %w", m.n.Name, p.Type, p.Settings, ErrNotFound)
			}
			added = slices.Delete(added, i, i+1)
		}
		h.record("ModifyNetworkSettings", networkID, req)
		m.added = added
	default:
		return fmt.Errorf("HNS network %s: request type %q: %w", networkID, req.RequestType, ErrNotSupported)
	}
	return nil
}

func (h *MemHNS) checkAdd(m *memNetwork, added []Policy, p Policy) error {
	switch p.Type {
	case PolicyRemoteSubnetRoute:
		if !h.opts.Version.SupportsRemoteSubnet() {
			return fmt.Errorf("HNS %s: %w", h.opts.Version, ErrNotSupported)
		}
		if m.n.Type != NetworkOverlay {
			return fmt.Errorf("on a %s network: %w", m.n.Type, ErrNotSupported)
		}
		var s RemoteSubnetRouteSettings
		if err := p.Decode(&s); err != nil {
			return err
		}
		if _, err := netip.ParsePrefix(s.DestinationPrefix); err != nil {
			return fmt.Errorf("DestinationPrefix: %w", err)
		}
		if _, err := netip.ParseAddr(s.ProviderAddress); err != nil {
			return fmt.Errorf("ProviderAddress: %w", err)
		}
		for _, x := range added {
			var xs RemoteSubnetRouteSettings
			if x.Type == PolicyRemoteSubnetRoute && x.Decode(&xs) == nil && xs.DestinationPrefix == s.DestinationPrefix {
				return fmt.Errorf("a route to %s: %w", s.DestinationPrefix, ErrExists)
			}
		}
	case PolicyHostRoute:
		if !h.opts.Version.SupportsRemoteSubnet() {
			return fmt.Errorf("HNS %s: %w", h.opts.Version, ErrNotSupported)
		}
		if slices.ContainsFunc(added, func(x Policy) bool { return x.Type == PolicyHostRoute }) {
			return ErrExists
		}
	default:
		return fmt.Errorf("cannot be added to an existing network: %w", ErrNotSupported)
	}
	return nil
}

// samePolicy compares policies as JSON values, as HNS matches a policy to remove.
func samePolicy(a, b Policy) bool {
	return a.Type == b.Type && canonicalJSON(a.Settings) == canonicalJSON(b.Settings)
}

// canonicalJSON re-encodes a JSON value with sorted keys; invalid JSON stays as it is.
func canonicalJSON(raw []byte) string {
	var v any
	if len(bytes.TrimSpace(raw)) == 0 || json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v) // decoded JSON always encodes
	return string(b)
}

// NetworkEndpoints implements Client.
func (h *MemHNS) NetworkEndpoints(networkID string) ([]HostComputeEndpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reads++
	if _, err := h.network(networkID); err != nil {
		return nil, err
	}
	var out []HostComputeEndpoint
	for _, ep := range h.endpoints {
		if strings.EqualFold(ep.HostComputeNetwork, networkID) {
			out = append(out, *deepCopy(ep))
		}
	}
	return out, nil
}

// CreateEndpoint implements Client.
func (h *MemHNS) CreateEndpoint(req *HostComputeEndpoint) (*HostComputeEndpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if req.HostComputeNamespace != "" {
		// hcn refuses it before asking HNS.
		return nil, fmt.Errorf("endpoint create error, endpoint json HostComputeNamespace is read only and should not be set")
	}
	if req.ID != "" {
		return nil, fmt.Errorf("HNS endpoint create: ID %s given: HNS assigns IDs", req.ID)
	}
	m, err := h.network(req.HostComputeNetwork)
	if err != nil {
		return nil, fmt.Errorf("HNS endpoint create %q: %w", req.Name, err)
	}
	ip := req.IP()
	if !ip.IsValid() {
		return nil, fmt.Errorf("HNS endpoint create %q: no IPv4 address", req.Name)
	}
	remote := req.Flags&EndpointRemote != 0
	if sn := m.n.staticSubnet(); !remote && sn != nil {
		if p, err := netip.ParsePrefix(sn.IPAddressPrefix); err == nil && !p.Contains(ip) {
			return nil, fmt.Errorf("HNS endpoint create %q: %s is outside the network's subnet %s", req.Name, ip, p)
		}
	}
	if remote && m.n.Type == NetworkOverlay && !req.ProviderAddress().IsValid() {
		return nil, fmt.Errorf("HNS endpoint create %q: a remote endpoint needs a ProviderAddress policy", req.Name)
	}
	for _, ep := range h.endpoints {
		if ep.HostComputeNetwork == m.n.ID && ep.IP() == ip {
			return nil, fmt.Errorf("HNS endpoint create %q: address %s is used by %s: %w", req.Name, ip, ep.Name, ErrExists)
		}
	}
	h.record("CreateEndpoint", "", req)
	ep := deepCopy(req)
	ep.ID = h.newID()
	ep.HostComputeNetwork = m.n.ID
	if ep.MacAddress == "" {
		ep.MacAddress = fmt.Sprintf("00-15-5D-%02X-%02X-%02X", 0x80|(h.seq>>16)&0x3f, (h.seq>>8)&0xff, h.seq&0xff)
	}
	h.endpoints = append(h.endpoints, ep)
	return deepCopy(ep), nil
}

// DeleteEndpoint implements Client.
func (h *MemHNS) DeleteEndpoint(id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := slices.IndexFunc(h.endpoints, func(ep *HostComputeEndpoint) bool { return strings.EqualFold(ep.ID, id) })
	if i < 0 {
		return fmt.Errorf("HNS endpoint %s: %w", id, ErrNotFound)
	}
	h.record("DeleteEndpoint", id, nil)
	h.dropEndpoint(h.endpoints[i])
	return nil
}

func (h *MemHNS) dropEndpoint(ep *HostComputeEndpoint) {
	if ep.HostComputeNamespace != "" {
		h.detach(ep)
	}
	h.endpoints = slices.DeleteFunc(h.endpoints, func(x *HostComputeEndpoint) bool { return x == ep })
}

func (h *MemHNS) detach(ep *HostComputeEndpoint) {
	for _, ns := range h.namespaces {
		if ns.ID != ep.HostComputeNamespace {
			continue
		}
		ns.Resources = slices.DeleteFunc(ns.Resources, func(r NamespaceResource) bool {
			var d NamespaceResourceEndpoint
			return r.Type == "Endpoint" && json.Unmarshal(r.Data, &d) == nil && strings.EqualFold(d.ID, ep.ID)
		})
		if ns.Type == NamespaceHostDefault && h.opts.Host != nil {
			h.opts.Host.dropVNIC(vnicName(ep.Name))
		}
	}
	ep.HostComputeNamespace = ""
}

func vnicName(endpoint string) string { return "vEthernet (" + endpoint + ")" }

// HostDefaultNamespace implements Client.
func (h *MemHNS) HostDefaultNamespace() (*HostComputeNamespace, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ns := range h.namespaces {
		if ns.Type == NamespaceHostDefault {
			return deepCopy(ns), nil
		}
	}
	return nil, fmt.Errorf("HNS host default namespace: %w", ErrNotFound)
}

// CreateNamespace implements Client.
func (h *MemHNS) CreateNamespace(req *HostComputeNamespace) (*HostComputeNamespace, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if req.Type == "" || req.ID != "" || len(req.Resources) > 0 {
		return nil, fmt.Errorf("HNS namespace create: needs a type, and neither an ID nor resources")
	}
	if req.SchemaVersion != schemaV2() {
		return nil, fmt.Errorf("HNS namespace create: schema version %s, want 2.0", req.SchemaVersion)
	}
	h.record("CreateNamespace", "", req)
	ns := deepCopy(req)
	ns.ID = h.newID()
	h.namespaces = append(h.namespaces, ns)
	return deepCopy(ns), nil
}

// ModifyNamespaceSettings implements Client.
func (h *MemHNS) ModifyNamespaceSettings(namespaceID string, req *ModifyNamespaceSettingRequest) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := slices.IndexFunc(h.namespaces, func(ns *HostComputeNamespace) bool { return strings.EqualFold(ns.ID, namespaceID) })
	if i < 0 {
		return fmt.Errorf("HNS namespace %s: %w", namespaceID, ErrNotFound)
	}
	ns := h.namespaces[i]
	if req.ResourceType != "Endpoint" {
		return fmt.Errorf("HNS namespace %s: modify %q: %w", namespaceID, req.ResourceType, ErrNotSupported)
	}
	var d NamespaceResourceEndpoint
	if err := json.Unmarshal(req.Settings, &d); err != nil {
		return fmt.Errorf("HNS namespace %s: settings %s: %w", namespaceID, req.Settings, err)
	}
	j := slices.IndexFunc(h.endpoints, func(ep *HostComputeEndpoint) bool { return strings.EqualFold(ep.ID, d.ID) })
	if j < 0 {
		return fmt.Errorf("HNS namespace %s: endpoint %s: %w", namespaceID, d.ID, ErrNotFound)
	}
	ep := h.endpoints[j]
	switch req.RequestType {
	case RequestAdd:
		if ep.HostComputeNamespace != "" {
			return fmt.Errorf("This requested operation is invalid as endpoint is already part of a network namespace: %w", ErrExists)
		}
		h.record("ModifyNamespaceSettings", namespaceID, req)
		data, _ := json.Marshal(NamespaceResourceEndpoint{ID: ep.ID}) // a string always marshals
		ns.Resources = append(ns.Resources, NamespaceResource{Type: "Endpoint", Data: data})
		ep.HostComputeNamespace = ns.ID
		if ns.Type == NamespaceHostDefault && h.opts.Host != nil {
			if p, ok := endpointPrefix(ep); ok {
				h.opts.Host.addVNIC(vnicName(ep.Name), p)
			}
		}
	case RequestRemove:
		if !strings.EqualFold(ep.HostComputeNamespace, ns.ID) {
			return fmt.Errorf("HNS namespace %s: endpoint %s is not attached: %w", namespaceID, ep.ID, ErrNotFound)
		}
		h.record("ModifyNamespaceSettings", namespaceID, req)
		h.detach(ep)
	default:
		return fmt.Errorf("HNS namespace %s: request type %q: %w", namespaceID, req.RequestType, ErrNotSupported)
	}
	return nil
}

func endpointPrefix(ep *HostComputeEndpoint) (netip.Prefix, bool) {
	for _, c := range ep.IPConfigurations {
		if a, err := netip.ParseAddr(c.IPAddress); err == nil && a.Is4() {
			bits := int(c.PrefixLength)
			if bits == 0 {
				bits = 32
			}
			return netip.PrefixFrom(a, bits), true
		}
	}
	return netip.Prefix{}, false
}

// Reboot is a host restart: non-persistent networks and their endpoints are gone, and so
// are namespaces (the host default one comes back empty when asked for).
func (h *MemHNS) Reboot() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range slices.Clone(h.networks) {
		if m.n.Flags&EnableNonPersistent != 0 {
			h.dropNetwork(m)
		}
	}
	for _, ep := range h.endpoints {
		ep.HostComputeNamespace = ""
	}
	h.namespaces = nil
	if h.opts.Host != nil {
		h.opts.Host.reboot()
		for _, m := range h.networks {
			if m.adapter != "" {
				h.opts.Host.vSwitch(m.adapter)
			}
		}
	}
}

// Render describes the whole state, one line per object or policy, in an order that does
// not depend on the order of requests (except IDs, which count up).
func (h *MemHNS) Render() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "HNS %s\n", h.opts.Version)
	nets := slices.Clone(h.networks)
	slices.SortFunc(nets, func(x, y *memNetwork) int { return strings.Compare(x.n.Name, y.n.Name) })
	for _, m := range nets {
		n := h.view(m)
		fmt.Fprintf(&b, "network %s %s id=%s flags=%d\n", n.Name, n.Type, n.ID, n.Flags)
		var lines []string
		for _, ipam := range n.Ipams {
			for _, sn := range ipam.Subnets {
				l := "  subnet " + sn.IPAddressPrefix
				for _, r := range sn.Routes {
					l += fmt.Sprintf(" route %s via %s", r.DestinationPrefix, r.NextHop)
				}
				for _, p := range sn.Policies {
					l += fmt.Sprintf(" %s %s", p.Type, canonicalJSON(p.Settings))
				}
				lines = append(lines, l)
			}
		}
		if len(n.DNS.ServerList) > 0 {
			lines = append(lines, "  dns "+strings.Join(n.DNS.ServerList, ","))
		}
		for _, p := range n.Policies {
			lines = append(lines, fmt.Sprintf("  policy %s %s", p.Type, canonicalJSON(p.Settings)))
		}
		for _, ep := range h.endpoints {
			if ep.HostComputeNetwork != n.ID {
				continue
			}
			l := fmt.Sprintf("  endpoint %s", ep.Name)
			for _, c := range ep.IPConfigurations {
				l += " " + c.IPAddress
				if c.PrefixLength != 0 {
					l += fmt.Sprintf("/%d", c.PrefixLength)
				}
			}
			l += " mac " + ep.MacAddress
			if ep.Flags&EndpointRemote != 0 {
				l += " remote"
			}
			if pa := ep.ProviderAddress(); pa.IsValid() {
				l += " pa " + pa.String()
			}
			if ep.HostComputeNamespace != "" {
				l += " namespace " + ep.HostComputeNamespace
			}
			lines = append(lines, l)
		}
		slices.Sort(lines)
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
	}
	for _, ns := range h.namespaces {
		fmt.Fprintf(&b, "namespace %s id=%s resources=%d\n", ns.Type, ns.ID, len(ns.Resources))
	}
	return b.String()
}
