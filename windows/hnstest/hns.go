package hnstest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weftnet/weft/windows"
)

// HNS is an in-memory HNS. It refuses what HNS (and hcn, which checks some things before
// calling HNS) refuses, with HNS's HRESULTs (the package doc lists each rule and its
// source). It behaves as HNS does where weft depends on it: it gives each Overlay network a
// DR MAC (00-15-5D-xx-xx-xx), reports a network's management IP only once the host vNIC is
// back (Blip after creation), forgets non-persistent networks on Reboot and on a restart of
// the service (Stop, Start). It records every request that changes something (Requests),
// counts every call (Calls) and renders its state as text (Render).
type HNS struct {
	opts Options

	mu         sync.Mutex
	networks   []*memNetwork // in creation order
	endpoints  []*windows.HostComputeEndpoint
	namespaces []*windows.HostComputeNamespace
	seq        int // IDs and DR MACs
	stopped    bool
	requests   []Request
	calls
}

// Options configure a HNS.
type Options struct {
	Version windows.Version // default 10.0
	// ManagementIP is the host address reported for every network after the blip.
	ManagementIP netip.Addr
	// Blip is how long after a network's creation its management IP stays unreported.
	Blip time.Duration
	Now  func() time.Time // default time.Now
	// MACByte is the fourth byte of the DR MACs this HNS gives (default 0xC0): HNS takes
	// them from the host's MAC pool, so two hosts' differ.
	MACByte byte
	// QueryOmitsSubnetPolicies makes queries answer without the policies of the networks'
	// subnets (the VSID an Overlay network was made with): a query need not echo them, and
	// whether HNS does, and which versions, is unverified.
	QueryOmitsSubnetPolicies bool
	// Host, if set, sees what HNS does to the host: the adapter a network binds moves to a
	// vSwitch vNIC ("vEthernet (<adapter>)"), an endpoint attached to the host namespace gets
	// a vNIC, and Reboot drops both.
	Host *Host
}

type memNetwork struct {
	n       windows.HostComputeNetwork // as created, with the policies HNS added at once
	added   []windows.Policy           // policies added later, in order
	mgmtAt  time.Time                  // when the management IP shows up
	adapter string
}

// Request is one recorded request: what was asked (Op), of which object (ID), with what
// JSON (Body, as hcn would send it).
type Request struct {
	Op   string
	ID   string          `json:",omitempty"`
	Body json.RawMessage `json:",omitempty"`
}

// New returns an empty HNS.
func New(o Options) *HNS {
	if o.Version == (windows.Version{}) {
		o.Version = windows.Version{Major: 10, Minor: 0}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MACByte == 0 {
		o.MACByte = 0xC0
	}
	return &HNS{opts: o}
}

var _ windows.Client = (*HNS)(nil)

func (h *HNS) record(op, id string, body any) {
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
func (h *HNS) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.requests)
}

// ResetRequests forgets the recorded requests, so a test can look at what one step did.
func (h *HNS) ResetRequests() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests = nil
}

// SetVersion changes the version HNS reports (an upgrade between two runs).
func (h *HNS) SetVersion(v windows.Version) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opts.Version = v
}

func (h *HNS) newID() string {
	h.seq++
	return fmt.Sprintf("00000000-0000-4000-8000-%012X", h.seq)
}

// Version implements windows.Client.
func (h *HNS) Version() (windows.Version, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("Version")
	if h.stopped {
		return windows.Version{}, stoppedError()
	}
	return h.opts.Version, nil
}

// view is the network as HNS reports it now.
func (h *HNS) view(m *memNetwork) *windows.HostComputeNetwork {
	n := m.n
	n.Policies = slices.Clone(m.n.Policies)
	if h.opts.ManagementIP.IsValid() && !h.opts.Now().Before(m.mgmtAt) {
		n.Policies = append(n.Policies, windows.ProviderAddressPolicy(h.opts.ManagementIP))
	}
	n.Policies = append(n.Policies, m.added...)
	out := deepCopy(&n)
	if h.opts.QueryOmitsSubnetPolicies {
		for i := range out.Ipams {
			for j := range out.Ipams[i].Subnets {
				out.Ipams[i].Subnets[j].Policies = nil
			}
		}
	}
	return out
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

// NetworkByName implements windows.Client.
func (h *HNS) NetworkByName(name string) (*windows.HostComputeNetwork, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("NetworkByName")
	if h.stopped {
		return nil, stoppedError()
	}
	for _, m := range h.networks {
		if m.n.Name == name {
			return h.view(m), nil
		}
	}
	// hcn's GetNetworkByName lists networks by name; an empty listing is its own error.
	return nil, fmt.Errorf("Network name %q not found: %w", name, windows.ErrNotFound)
}

func (h *HNS) network(id string) (*memNetwork, error) {
	for _, m := range h.networks {
		if strings.EqualFold(m.n.ID, id) {
			return m, nil
		}
	}
	return nil, hnsError("HcnOpenNetwork", windows.HCNNetworkNotFound, "network %s not found", id)
}

// CreateNetwork implements windows.Client.
func (h *HNS) CreateNetwork(req *windows.HostComputeNetwork) (*windows.HostComputeNetwork, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("CreateNetwork")
	if h.stopped {
		return nil, stoppedError()
	}
	if err := checkNewNetwork(req, h.opts.Version); err != nil {
		return nil, err
	}
	for _, m := range h.networks {
		if m.n.Name == req.Name {
			return nil, hnsError("HcnCreateNetwork", windows.HCNNetworkAlreadyExists, "a network named %q exists", req.Name)
		}
		if req.ID != "" && strings.EqualFold(m.n.ID, req.ID) {
			return nil, hnsError("HcnCreateNetwork", windows.HCNNetworkAlreadyExists, "a network of ID %s exists", req.ID)
		}
	}
	adapter := ""
	for _, p := range req.Policies {
		var s windows.NetAdapterNameSettings
		if p.Type == windows.PolicyNetAdapterName && p.Decode(&s) == nil {
			adapter = s.NetworkAdapterName
		}
	}
	if h.opts.Host != nil && adapter != "" && !h.opts.Host.hasAdapter(adapter) {
		return nil, hnsError("HcnCreateNetwork", windows.HCNAdapterNotFound, "network %q: no network adapter %q", req.Name, adapter)
	}
	h.record("CreateNetwork", "", req)
	m := &memNetwork{n: *deepCopy(req), mgmtAt: h.opts.Now().Add(h.opts.Blip), adapter: adapter}
	m.n.ID = h.idFor(req.ID)
	if req.ID != "" {
		h.seq++ // idFor took no number: the DR MAC needs one of its own
	}
	if m.n.Type == windows.NetworkOverlay {
		m.n.Policies = append(m.n.Policies, windows.DrMacAddressPolicy(fmt.Sprintf("00-15-5D-%02X-%02X-%02X", h.opts.MACByte, (h.seq>>8)&0xff, h.seq&0xff)))
	}
	if h.opts.Host != nil && adapter != "" {
		h.opts.Host.vSwitch(adapter)
	}
	h.networks = append(h.networks, m)
	return h.view(m), nil
}

// checkNewNetwork refuses what hcn's Create and HNS refuse.
func checkNewNetwork(n *windows.HostComputeNetwork, v windows.Version) error {
	if err := checkID("HcnCreateNetwork", n.ID); err != nil {
		return err
	}
	if n.Name == "" {
		return hnsError("HcnCreateNetwork", windows.InvalidArg, "no name")
	}
	if n.SchemaVersion.Major != 2 {
		return hnsError("HcnCreateNetwork", windows.HCNInvalidJSON, "network %q: schema version %s, want 2.x", n.Name, n.SchemaVersion)
	}
	if !slices.Contains(networkTypes, n.Type) {
		return hnsError("HcnCreateNetwork", windows.HCNInvalidNetworkType, "network %q: type %q", n.Name, n.Type)
	}
	if err := checkPolicies("HcnCreateNetwork", "network", n.Policies, v); err != nil {
		return err
	}
	subnets := 0
	for _, ipam := range n.Ipams {
		for _, sn := range ipam.Subnets {
			subnets++
			if err := checkPolicies("HcnCreateNetwork", "subnet", sn.Policies, v); err != nil {
				return err
			}
			if sn.IPAddressPrefix == "" {
				continue
			}
			p, err := netip.ParsePrefix(sn.IPAddressPrefix)
			if err != nil {
				return hnsError("HcnCreateNetwork", windows.HCNInvalidIP, "network %q: subnet %q: %v", n.Name, sn.IPAddressPrefix, err)
			}
			// IPv6 subnets from 11.10 (hcsshim's IPv6DualStackVersion); the code is unverified.
			if p.Addr().Is6() && !v.SupportsDualStack() {
				return hnsError("HcnCreateNetwork", windows.HCNInvalidIP, "network %q: IPv6 subnet %s: HNS %s has no IPv6 dual stack", n.Name, p, v)
			}
			// hcn's Create refuses these before calling HNS, with errors of its own: a
			// subnet with a prefix needs gateways, and a default route.
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
			if n.Type != windows.NetworkOverlay {
				continue
			}
			var vsid windows.VSIDSettings
			found := false
			for _, p := range sn.Policies {
				if p.Type == windows.PolicyVSID && p.Decode(&vsid) == nil {
					found = true
				}
			}
			if !found || vsid.IsolationID < 4096 || vsid.IsolationID > 1<<24-1 {
				return hnsError("HcnCreateNetwork", windows.HCNInvalidPolicy, "network %q: an Overlay subnet needs a VSID policy with an IsolationId of 4096 or more", n.Name)
			}
		}
	}
	// hcsshim's TestCreateDeleteNetworks makes a NAT network without Ipams.
	if subnets == 0 && (n.Type == windows.NetworkOverlay || n.Type == windows.NetworkL2Bridge) {
		return hnsError("HcnCreateNetwork", windows.InvalidArg, "network %q: no subnet", n.Name)
	}
	return nil
}

// networkTypes are the network types HNS has, as hcsshim names them (hcn/hcnnetwork.go,
// NetworkType).
var networkTypes = []windows.NetworkType{"NAT", "Transparent", windows.NetworkL2Bridge, "L2Tunnel", "ICS", "Private", windows.NetworkOverlay}

// checkID refuses an ID in a create request that is not a GUID. HNS takes a create that
// names its ID, and the object keeps it: hcsshim re-creates an SDN route and a load
// balancer with the ID they had (hcn/hcnroute.go, hcnloadbalancer.go, AddEndpoint), and
// its TestRouteAddRemoveEndpoint deletes the route by that ID afterwards. That networks,
// endpoints and namespaces keep a given ID too, and the code for a malformed one, are
// unverified.
func checkID(call, id string) error {
	if id == "" {
		return nil
	}
	if !isGUID(id) {
		return hnsError(call, windows.InvalidArg, "ID %q is not a GUID", id)
	}
	return nil
}

// isGUID reports whether s is a GUID as HNS's JSON writes one, braces allowed.
func isGUID(s string) bool {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}")
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		default:
			return false
		}
	}
	return true
}

// idFor is the ID of a new object: the one its request named, else a new one.
func (h *HNS) idFor(given string) string {
	if given != "" {
		return strings.TrimSuffix(strings.TrimPrefix(given, "{"), "}")
	}
	return h.newID()
}

// DeleteNetwork implements windows.Client. The network's endpoints go with it.
func (h *HNS) DeleteNetwork(id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("DeleteNetwork")
	if h.stopped {
		return stoppedError()
	}
	m, err := h.network(id)
	if err != nil {
		return err
	}
	h.record("DeleteNetwork", id, nil)
	h.dropNetwork(m)
	return nil
}

func (h *HNS) dropNetwork(m *memNetwork) {
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

// ModifyNetworkSettings implements windows.Client.
func (h *HNS) ModifyNetworkSettings(networkID string, req *windows.ModifyNetworkSettingRequest) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("ModifyNetworkSettings")
	if h.stopped {
		return stoppedError()
	}
	m, err := h.network(networkID)
	if err != nil {
		return err
	}
	if req.ResourceType != "Policy" {
		return hnsError("HcnModifyNetwork", windows.HCNRequestUnsupported, "network %s: modify %q", networkID, req.ResourceType)
	}
	var pr windows.PolicyNetworkRequest
	if err := json.Unmarshal(req.Settings, &pr); err != nil {
		return hnsError("HcnModifyNetwork", windows.HCNInvalidJSON, "network %s: policy request %s: %v", networkID, req.Settings, err)
	}
	switch req.RequestType {
	case windows.RequestAdd:
		added := slices.Clone(m.added)
		for _, p := range pr.Policies {
			if err := h.checkAdd(m, added, p); err != nil {
				return err
			}
			added = append(added, p)
		}
		h.record("ModifyNetworkSettings", networkID, req)
		m.added = added
	case windows.RequestRemove:
		added := slices.Clone(m.added)
		for _, p := range pr.Policies {
			i := slices.IndexFunc(added, func(x windows.Policy) bool { return samePolicy(x, p) })
			if i < 0 {
				return hnsError("HcnModifyNetwork", windows.HCNPolicyNotFound, "network %s: no %s policy %s", m.n.Name, p.Type, p.Settings)
			}
			added = slices.Delete(added, i, i+1)
		}
		h.record("ModifyNetworkSettings", networkID, req)
		m.added = added
	default:
		return hnsError("HcnModifyNetwork", windows.HCNRequestUnsupported, "network %s: request type %q", networkID, req.RequestType)
	}
	return nil
}

func (h *HNS) checkAdd(m *memNetwork, added []windows.Policy, p windows.Policy) error {
	fail := func(code windows.HResult, format string, args ...any) error {
		return hnsError("HcnModifyNetwork", code, "network %s: add %s policy: %s", m.n.Name, p.Type, fmt.Sprintf(format, args...))
	}
	if err := checkPolicy("HcnModifyNetwork", "network", p, h.opts.Version); err != nil {
		return err
	}
	if !slices.Contains(addableNetworkPolicies, p.Type) {
		return fail(windows.HCNInvalidPolicyType, "cannot be added to an existing network")
	}
	switch p.Type {
	case windows.PolicyRemoteSubnetRoute:
		if m.n.Type != windows.NetworkOverlay {
			return fail(windows.HCNInvalidPolicyType, "on a %s network", m.n.Type)
		}
		var s windows.RemoteSubnetRouteSettings
		if err := p.Decode(&s); err != nil {
			return fail(windows.HCNInvalidJSON, "%v", err)
		}
		if _, err := netip.ParsePrefix(s.DestinationPrefix); err != nil {
			return fail(windows.HCNInvalidIP, "DestinationPrefix: %v", err)
		}
		if _, err := netip.ParseAddr(s.ProviderAddress); err != nil {
			return fail(windows.HCNInvalidIP, "ProviderAddress: %v", err)
		}
		for _, x := range added {
			var xs windows.RemoteSubnetRouteSettings
			if x.Type == windows.PolicyRemoteSubnetRoute && x.Decode(&xs) == nil && xs.DestinationPrefix == s.DestinationPrefix {
				return fail(windows.HCNPolicyAlreadyExists, "a route to %s exists", s.DestinationPrefix)
			}
		}
	case windows.PolicyHostRoute:
		if slices.ContainsFunc(added, func(x windows.Policy) bool { return x.Type == windows.PolicyHostRoute }) {
			return fail(windows.HCNPolicyAlreadyExists, "the network has one")
		}
	}
	return nil
}

// samePolicy compares policies as JSON values, as HNS matches a policy to remove.
func samePolicy(a, b windows.Policy) bool {
	return a.Type == b.Type && CanonicalJSON(a.Settings) == CanonicalJSON(b.Settings)
}

// CanonicalJSON re-encodes a JSON value with sorted keys, as HNS compares policies; invalid
// JSON stays as it is.
func CanonicalJSON(raw []byte) string {
	var v any
	if len(bytes.TrimSpace(raw)) == 0 || json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v) // decoded JSON always encodes
	return string(b)
}

// NetworkEndpoints implements windows.Client.
func (h *HNS) NetworkEndpoints(networkID string) ([]windows.HostComputeEndpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("NetworkEndpoints")
	if h.stopped {
		return nil, stoppedError()
	}
	if _, err := h.network(networkID); err != nil {
		return nil, err
	}
	var out []windows.HostComputeEndpoint
	for _, ep := range h.endpoints {
		if strings.EqualFold(ep.HostComputeNetwork, networkID) {
			out = append(out, *deepCopy(ep))
		}
	}
	return out, nil
}

// CreateEndpoint implements windows.Client.
func (h *HNS) CreateEndpoint(req *windows.HostComputeEndpoint) (*windows.HostComputeEndpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("CreateEndpoint")
	if h.stopped {
		return nil, stoppedError()
	}
	if req.HostComputeNamespace != "" {
		// hcn refuses it before asking HNS.
		return nil, fmt.Errorf("endpoint create error, endpoint json windows.HostComputeNamespace is read only and should not be set")
	}
	if err := checkID("HcnCreateEndpoint", req.ID); err != nil {
		return nil, err
	}
	if req.ID != "" && slices.ContainsFunc(h.endpoints, func(ep *windows.HostComputeEndpoint) bool { return strings.EqualFold(ep.ID, req.ID) }) {
		return nil, hnsError("HcnCreateEndpoint", windows.InvalidArg, "an endpoint of ID %s exists", req.ID)
	}
	m, err := h.network(req.HostComputeNetwork)
	if err != nil {
		return nil, err
	}
	if err := checkPolicies("HcnCreateEndpoint", "endpoint", req.Policies, h.opts.Version); err != nil {
		return nil, err
	}
	remote := req.Flags&windows.EndpointRemote != 0
	ep := deepCopy(req)
	if len(ep.IPs()) == 0 && !remote {
		// HNS gives an endpoint without an address one of its network's subnets.
		if err := h.assignAddresses(m, ep); err != nil {
			return nil, err
		}
	}
	if len(ep.IPs()) == 0 {
		return nil, hnsError("HcnCreateEndpoint", windows.InvalidArg, "endpoint %q: no IP address", req.Name)
	}
	if sns := m.n.StaticSubnets(); !remote && len(sns) > 0 {
		// Each address must lie in the network's subnet of its family.
		for _, a := range ep.IPs() {
			in := false
			for _, sn := range sns {
				if p, err := netip.ParsePrefix(sn.IPAddressPrefix); err == nil && p.Contains(a) {
					in = true
				}
			}
			if !in {
				return nil, hnsError("HcnCreateEndpoint", windows.HCNInvalidIP, "endpoint %q: %s is outside the network's subnets", req.Name, a)
			}
		}
	}
	if remote && m.n.Type == windows.NetworkOverlay && !req.ProviderAddress().IsValid() {
		return nil, hnsError("HcnCreateEndpoint", windows.HCNInvalidPolicy, "endpoint %q: a remote endpoint needs a ProviderAddress policy", req.Name)
	}
	for _, other := range h.endpoints {
		if other.HostComputeNetwork != m.n.ID {
			continue
		}
		for _, a := range ep.IPs() {
			if slices.Contains(other.IPs(), a) {
				return nil, hnsError("HcnCreateEndpoint", windows.HCNAddrInvalidOrReserved, "endpoint %q: address %s is used by %s", req.Name, a, other.Name)
			}
		}
	}
	if err := h.checkPorts("HcnCreateEndpoint", req.Policies, nil); err != nil {
		return nil, err
	}
	h.record("CreateEndpoint", "", req)
	ep.ID = h.idFor(req.ID)
	ep.HostComputeNetwork = m.n.ID
	if ep.MacAddress == "" {
		if req.ID != "" {
			h.seq++ // idFor took no number: the MAC needs one of its own
		}
		ep.MacAddress = fmt.Sprintf("00-15-5D-%02X-%02X-%02X", 0x80|(h.seq>>16)&0x3f, (h.seq>>8)&0xff, h.seq&0xff)
	}
	h.endpoints = append(h.endpoints, ep)
	return deepCopy(ep), nil
}

// DeleteEndpoint implements windows.Client.
func (h *HNS) DeleteEndpoint(id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("DeleteEndpoint")
	if h.stopped {
		return stoppedError()
	}
	i := slices.IndexFunc(h.endpoints, func(ep *windows.HostComputeEndpoint) bool { return strings.EqualFold(ep.ID, id) })
	if i < 0 {
		return hnsError("HcnDeleteEndpoint", windows.HCNEndpointNotFound, "endpoint %s not found", id)
	}
	h.record("DeleteEndpoint", id, nil)
	h.dropEndpoint(h.endpoints[i])
	return nil
}

func (h *HNS) dropEndpoint(ep *windows.HostComputeEndpoint) {
	if ep.HostComputeNamespace != "" {
		h.detach(ep)
	}
	h.endpoints = slices.DeleteFunc(h.endpoints, func(x *windows.HostComputeEndpoint) bool { return x == ep })
}

func (h *HNS) detach(ep *windows.HostComputeEndpoint) {
	for _, ns := range h.namespaces {
		if ns.ID != ep.HostComputeNamespace {
			continue
		}
		ns.Resources = slices.DeleteFunc(ns.Resources, func(r windows.NamespaceResource) bool {
			var d windows.NamespaceResourceEndpoint
			return r.Type == "Endpoint" && json.Unmarshal(r.Data, &d) == nil && strings.EqualFold(d.ID, ep.ID)
		})
		if ns.Type == windows.NamespaceHostDefault && h.opts.Host != nil {
			h.opts.Host.dropVNIC(vnicName(ep.Name))
		}
	}
	ep.HostComputeNamespace = ""
}

func vnicName(endpoint string) string { return "vEthernet (" + endpoint + ")" }

// HostDefaultNamespace implements windows.Client.
func (h *HNS) HostDefaultNamespace() (*windows.HostComputeNamespace, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("HostDefaultNamespace")
	if h.stopped {
		return nil, stoppedError()
	}
	for _, ns := range h.namespaces {
		if ns.Type == windows.NamespaceHostDefault {
			return deepCopy(ns), nil
		}
	}
	return nil, fmt.Errorf("HNS host default namespace: %w", windows.ErrNotFound) // the adapter's, after a listing
}

// CreateNamespace implements windows.Client.
func (h *HNS) CreateNamespace(req *windows.HostComputeNamespace) (*windows.HostComputeNamespace, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("CreateNamespace")
	if h.stopped {
		return nil, stoppedError()
	}
	if err := checkID("HcnCreateNamespace", req.ID); err != nil {
		return nil, err
	}
	if req.ID != "" && slices.ContainsFunc(h.namespaces, func(ns *windows.HostComputeNamespace) bool { return strings.EqualFold(ns.ID, req.ID) }) {
		return nil, hnsError("HcnCreateNamespace", windows.InvalidArg, "a namespace of ID %s exists", req.ID)
	}
	if len(req.Resources) > 0 {
		return nil, hnsError("HcnCreateNamespace", windows.InvalidArg, "a new namespace has no resources")
	}
	// containerd makes its namespaces as HostComputeNamespace{}: schema 0.0 and no type.
	if v := req.SchemaVersion; v != (windows.SchemaVersion{}) && v.Major != 2 {
		return nil, hnsError("HcnCreateNamespace", windows.HCNInvalidJSON, "schema version %s, want 2.x", req.SchemaVersion)
	}
	ns := deepCopy(req)
	switch ns.Type {
	case "":
		ns.Type = NamespaceHost
	case NamespaceHost, windows.NamespaceHostDefault, "Guest", "GuestDefault":
	default:
		return nil, hnsError("HcnCreateNamespace", windows.HCNInvalidJSON, "namespace type %q", req.Type)
	}
	h.record("CreateNamespace", "", req)
	ns.ID = h.idFor(req.ID)
	h.namespaces = append(h.namespaces, ns)
	return deepCopy(ns), nil
}

// AttachEndpoint implements windows.Client: what hcsshim's AddNamespaceEndpoint asks of HNS,
// which it takes as a ModifyNamespaceSettings request with {"EndpointId": …} settings.
func (h *HNS) AttachEndpoint(namespaceID, endpointID string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("AttachEndpoint")
	if h.stopped {
		return stoppedError()
	}
	return h.modifyNamespace(namespaceID, windows.AttachRequest(windows.RequestAdd, endpointID))
}

// ModifyNamespace is HcnModifyNamespace: a request as HNS receives it, whose settings are
// decoded strictly, as HNS's schema has them.
func (h *HNS) ModifyNamespace(namespaceID string, req *windows.ModifyNamespaceSettingRequest) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("ModifyNamespace")
	if h.stopped {
		return stoppedError()
	}
	return h.modifyNamespace(namespaceID, req)
}

func (h *HNS) modifyNamespace(namespaceID string, req *windows.ModifyNamespaceSettingRequest) error {
	const call = "HcnModifyNamespace"
	i := slices.IndexFunc(h.namespaces, func(ns *windows.HostComputeNamespace) bool { return strings.EqualFold(ns.ID, namespaceID) })
	if i < 0 {
		return hnsError(call, windows.ElementNotFound, "namespace %s not found", namespaceID)
	}
	ns := h.namespaces[i]
	if req.ResourceType != "Endpoint" {
		return hnsError(call, windows.HCNRequestUnsupported, "namespace %s: modify %q", namespaceID, req.ResourceType)
	}
	var d windows.NamespaceEndpointRequest
	dec := json.NewDecoder(bytes.NewReader(req.Settings))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil || d.EndpointID == "" {
		return hnsError(call, windows.HCNInvalidJSON, "namespace %s: settings %s: want {\"EndpointId\": …} (%v)", namespaceID, req.Settings, err)
	}
	j := slices.IndexFunc(h.endpoints, func(ep *windows.HostComputeEndpoint) bool { return strings.EqualFold(ep.ID, d.EndpointID) })
	if j < 0 {
		return hnsError(call, windows.HCNEndpointNotFound, "namespace %s: endpoint %s not found", namespaceID, d.EndpointID)
	}
	ep := h.endpoints[j]
	switch req.RequestType {
	case windows.RequestAdd:
		if ep.HostComputeNamespace != "" {
			// The table's text of the code; that a second attachment answers it is unverified.
			return hnsError(call, windows.HCNEndpointNamespaceAlreadyExist, "This requested operation is invalid as endpoint is already part of a network namespace.")
		}
		h.record("ModifyNamespaceSettings", namespaceID, req)
		h.attach(ns, ep)
	case windows.RequestRemove:
		if !strings.EqualFold(ep.HostComputeNamespace, ns.ID) {
			return hnsError(call, windows.HCNEndpointNotFound, "namespace %s: endpoint %s is not attached", namespaceID, ep.ID)
		}
		h.record("ModifyNamespaceSettings", namespaceID, req)
		h.detach(ep)
	default:
		return hnsError(call, windows.HCNRequestUnsupported, "namespace %s: request type %q", namespaceID, req.RequestType)
	}
	return nil
}

// attach puts an endpoint in a namespace; in the host's, the host gets a vNIC with its
// addresses.
func (h *HNS) attach(ns *windows.HostComputeNamespace, ep *windows.HostComputeEndpoint) {
	data, _ := json.Marshal(windows.NamespaceResourceEndpoint{ID: ep.ID}) // a string always marshals
	ns.Resources = append(ns.Resources, windows.NamespaceResource{Type: "Endpoint", Data: data})
	ep.HostComputeNamespace = ns.ID
	if ns.Type == windows.NamespaceHostDefault && h.opts.Host != nil {
		if ps := endpointPrefixes(ep); len(ps) > 0 {
			h.opts.Host.addVNIC(vnicName(ep.Name), ps...)
		}
	}
}

// HostAttach implements windows.Client: HNS v1's attachment of an endpoint to the host's
// primary compartment (POST /endpoints/<id>/attach with windows.HostAttachRequest, as
// hcsshim's HNSEndpoint.HostAttach(1) sends it), played as an attachment to the host's
// HostDefault namespace, made if HNS has none (that v1's host compartment and v2's
// HostDefault namespace are one is unverified). An endpoint attached already answers
// HCN_E_ENDPOINT_ALREADY_ATTACHED, "This endpoint is already attached to the switch."
// (flannel's host-gw matches the text, flannel issue 1391; Calico's log shows the code,
// projectcalico/calico issue 4280).
func (h *HNS) HostAttach(endpointID string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("HostAttach")
	if h.stopped {
		return stoppedError()
	}
	const call = "HNSCall"
	i := slices.IndexFunc(h.endpoints, func(ep *windows.HostComputeEndpoint) bool { return strings.EqualFold(ep.ID, endpointID) })
	if i < 0 {
		return hnsError(call, windows.HCNEndpointNotFound, "endpoint %s not found", endpointID)
	}
	ep := h.endpoints[i]
	if ep.HostComputeNamespace != "" {
		return hnsError(call, windows.HCNEndpointAlreadyAttached, "This endpoint is already attached to the switch.")
	}
	j := slices.IndexFunc(h.namespaces, func(ns *windows.HostComputeNamespace) bool { return ns.Type == windows.NamespaceHostDefault })
	if j < 0 {
		h.namespaces = append(h.namespaces, &windows.HostComputeNamespace{ID: h.newID(), Type: windows.NamespaceHostDefault, SchemaVersion: windows.SchemaV2()})
		j = len(h.namespaces) - 1
	}
	h.record("HostAttach", ep.ID, windows.HostAttachRequest())
	h.attach(h.namespaces[j], ep)
	return nil
}

// hnsError is HNS's answer to a failed call.
func hnsError(call string, code windows.HResult, format string, args ...any) *windows.Error {
	return windows.NewError(call, code, fmt.Sprintf(format, args...))
}

// endpointPrefixes are the endpoint's addresses with their prefix lengths (a host vNIC gets
// them all: both families' on a dual-stack L2Bridge network).
func endpointPrefixes(ep *windows.HostComputeEndpoint) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range ep.IPConfigurations {
		if a, err := netip.ParseAddr(c.IPAddress); err == nil {
			bits := int(c.PrefixLength)
			if bits == 0 {
				bits = a.BitLen()
			}
			out = append(out, netip.PrefixFrom(a, bits))
		}
	}
	return out
}

// Stop stops the HNS service: until Start, every call fails with HCN_E_MANAGER_STOPPED
// (which code a stopped HNS answers with, and whether a call starts it again, is
// unverified).
func (h *HNS) Stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
}

// Start starts the HNS service again, as it comes back from a restart: non-persistent
// networks and their endpoints are gone, and so are namespaces (unverified: what a restart
// of the service keeps is taken to be what a reboot keeps).
func (h *HNS) Start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = false
	h.forget()
}

func stoppedError() error {
	return windows.NewError("HNS call", windows.HCNManagerStopped, "The Host Networking Service is stopped.")
}

// Reboot is a host restart: non-persistent networks and their endpoints are gone, and so
// are namespaces (the host default one comes back empty when asked for).
func (h *HNS) Reboot() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forget()
	if h.opts.Host != nil {
		h.opts.Host.reboot()
		for _, m := range h.networks {
			if m.adapter != "" {
				h.opts.Host.vSwitch(m.adapter)
			}
		}
	}
}

// forget drops what HNS does not keep across its own restart.
func (h *HNS) forget() {
	for _, m := range slices.Clone(h.networks) {
		if m.n.Flags&windows.EnableNonPersistent != 0 {
			h.dropNetwork(m)
		}
	}
	for _, ep := range h.endpoints {
		ep.HostComputeNamespace = ""
	}
	h.namespaces = nil
}

// Render describes the whole state, one line per object or policy, in an order that does
// not depend on the order of requests (except IDs, which count up).
func (h *HNS) Render() string {
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
					l += fmt.Sprintf(" %s %s", p.Type, CanonicalJSON(p.Settings))
				}
				lines = append(lines, l)
			}
		}
		if len(n.DNS.ServerList) > 0 {
			lines = append(lines, "  dns "+strings.Join(n.DNS.ServerList, ","))
		}
		for _, p := range n.Policies {
			lines = append(lines, fmt.Sprintf("  policy %s %s", p.Type, CanonicalJSON(p.Settings)))
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
			if ep.Flags&windows.EndpointRemote != 0 {
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

// Networks lists every network as a query shows it (HcnEnumerateNetworks and a query of
// each).
func (h *HNS) Networks() ([]windows.HostComputeNetwork, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("Networks")
	if h.stopped {
		return nil, stoppedError()
	}
	out := make([]windows.HostComputeNetwork, 0, len(h.networks))
	for _, m := range h.networks {
		out = append(out, *h.view(m))
	}
	return out, nil
}

// Endpoints lists every endpoint, of every network.
func (h *HNS) Endpoints() ([]windows.HostComputeEndpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("Endpoints")
	if h.stopped {
		return nil, stoppedError()
	}
	out := make([]windows.HostComputeEndpoint, 0, len(h.endpoints))
	for _, ep := range h.endpoints {
		out = append(out, *deepCopy(ep))
	}
	return out, nil
}

// Namespaces lists every namespace.
func (h *HNS) Namespaces() ([]windows.HostComputeNamespace, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("Namespaces")
	if h.stopped {
		return nil, stoppedError()
	}
	out := make([]windows.HostComputeNamespace, 0, len(h.namespaces))
	for _, ns := range h.namespaces {
		out = append(out, *deepCopy(ns))
	}
	return out, nil
}
