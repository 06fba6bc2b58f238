package windows

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/weftnet/weft/backend"
)

// The types below are HNS v2 schema objects, limited to the fields weft uses. Field names
// and JSON tags follow hcsshim's hcn package, so both marshal to the same JSON (checked by
// the windows-tagged tests); HNS reads an absent and an empty object alike.

// Version is the version of HNS, or of an object's schema.
type Version struct {
	Major int `json:"Major"`
	Minor int `json:"Minor"`
}

// SchemaVersion is the schema an object is written in; weft writes 2.0.
type SchemaVersion = Version

// SchemaV2 is the schema version weft writes its objects in.
func SchemaV2() SchemaVersion { return SchemaVersion{Major: 2, Minor: 0} }

// AtLeast reports whether v is major.minor or newer.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// SupportsRemoteSubnet reports whether HNS takes RemoteSubnetRoute policies (and HostRoute):
// from 9.2, Windows Server 2019.
func (v Version) SupportsRemoteSubnet() bool { return v.AtLeast(9, 2) }

// SupportsDualStack reports whether HNS takes a network with subnets of both families: from
// 11.10 (hcsshim's IPv6DualStackVersion, hcn/hcnglobals.go).
func (v Version) SupportsDualStack() bool { return v.AtLeast(11, 10) }

// PolicyType names a network, endpoint or subnet policy.
type PolicyType string

// The policies weft writes or reads.
const (
	PolicyNetAdapterName    PolicyType = "NetAdapterName"    // network: the adapter it is bound to
	PolicyDrMacAddress      PolicyType = "DrMacAddress"      // network, set by HNS: the distributed router MAC
	PolicyProviderAddress   PolicyType = "ProviderAddress"   // network (set by HNS: management IP) and endpoint
	PolicyRemoteSubnetRoute PolicyType = "RemoteSubnetRoute" // network: a peer's subnet behind its PA and DR MAC
	PolicyHostRoute         PolicyType = "HostRoute"         // network: host to local pod traffic on Overlay
	PolicyVSID              PolicyType = "VSID"              // subnet: the VXLAN network identifier
	PolicyACL               PolicyType = "ACL"               // endpoint: a rule that allows or blocks traffic
)

// ACLSettings is an endpoint's ACL rule, as hcsshim's AclPolicySetting (hcn/hcnpolicy.go)
// writes it: lists are comma-separated; Protocols are IP protocol numbers ("6" TCP, "17"
// UDP), none for every protocol; addresses are addresses or prefixes; ports numbers or
// ranges "from-to". Local is the endpoint's end, Remote the other. Lower Priority numbers
// are evaluated first.
type ACLSettings struct {
	Protocols       string `json:",omitempty"`
	Action          string // "Allow" or "Block"
	Direction       string // "In" or "Out"
	LocalAddresses  string `json:",omitempty"`
	RemoteAddresses string `json:",omitempty"`
	LocalPorts      string `json:",omitempty"`
	RemotePorts     string `json:",omitempty"`
	RuleType        string `json:",omitempty"` // "Switch" (VFP) or "Host" (WFP)
	Priority        uint16 `json:",omitempty"`
}

// The values of ACLSettings' Action and Direction.
const (
	ACLAllow = "Allow"
	ACLBlock = "Block"
	ACLIn    = "In"
	ACLOut   = "Out"
)

// ACLPolicy is the endpoint policy of one ACL rule.
func ACLPolicy(s ACLSettings) Policy { return newPolicy(PolicyACL, s) }

// Policy is a typed policy with its settings; the same shape serves networks, endpoints and
// subnets (hcn's NetworkPolicy, EndpointPolicy, SubnetPolicy).
type Policy struct {
	Type     PolicyType      `json:"Type"`
	Settings json.RawMessage `json:",omitempty"`
}

// NetAdapterNameSettings binds a network to an adapter.
type NetAdapterNameSettings struct {
	NetworkAdapterName string `json:",omitempty"`
}

// DrMacAddressSettings is the distributed router MAC HNS gives an Overlay network.
type DrMacAddressSettings struct {
	Address string `json:",omitempty"`
}

// ProviderAddressSettings is a provider (underlay) address.
type ProviderAddressSettings struct {
	ProviderAddress string `json:",omitempty"`
}

// RemoteSubnetRouteSettings sends a remote subnet to a peer: encapsulated with the
// IsolationId, to the peer's ProviderAddress, with its distributed router MAC as destination.
type RemoteSubnetRouteSettings struct {
	DestinationPrefix           string
	IsolationID                 uint16 `json:"IsolationId"`
	ProviderAddress             string
	DistributedRouterMacAddress string
}

// VSIDSettings is a subnet's VXLAN network identifier.
type VSIDSettings struct {
	IsolationID uint32 `json:"IsolationId"`
}

func newPolicy(t PolicyType, settings any) Policy {
	b, err := json.Marshal(settings)
	if err != nil {
		// Only the settings structs above reach here; they hold strings and integers.
		panic(fmt.Sprintf("windows: marshal %s settings: %v", t, err))
	}
	return Policy{Type: t, Settings: b}
}

// NetAdapterNamePolicy binds a network to the adapter named name.
func NetAdapterNamePolicy(name string) Policy {
	return newPolicy(PolicyNetAdapterName, NetAdapterNameSettings{NetworkAdapterName: name})
}

// ProviderAddressPolicy is a provider address policy (a remote endpoint's peer, or a network's management IP).
func ProviderAddressPolicy(pa netip.Addr) Policy {
	return newPolicy(PolicyProviderAddress, ProviderAddressSettings{ProviderAddress: pa.String()})
}

// DrMacAddressPolicy is the policy HNS adds to an Overlay network it creates.
func DrMacAddressPolicy(mac string) Policy {
	return newPolicy(PolicyDrMacAddress, DrMacAddressSettings{Address: mac})
}

// RemoteSubnetRoutePolicy is the policy for one overlay peer.
func RemoteSubnetRoutePolicy(s RemoteSubnetRouteSettings) Policy {
	return newPolicy(PolicyRemoteSubnetRoute, s)
}

// HostRoutePolicy lets the host reach local pods on an Overlay network; it has no settings
// but HNS wants the empty object.
func HostRoutePolicy() Policy { return Policy{Type: PolicyHostRoute, Settings: json.RawMessage("{}")} }

// VSIDPolicy sets a subnet's VXLAN network identifier.
func VSIDPolicy(vni uint32) Policy { return newPolicy(PolicyVSID, VSIDSettings{IsolationID: vni}) }

// Decode reads the policy's settings into v.
func (p Policy) Decode(v any) error {
	if len(p.Settings) == 0 {
		return fmt.Errorf("%s policy has no settings", p.Type)
	}
	if err := json.Unmarshal(p.Settings, v); err != nil {
		return fmt.Errorf("%s policy settings %s: %w", p.Type, p.Settings, err)
	}
	return nil
}

// NetworkType is the kind of an HNS network.
type NetworkType string

// The network types weft creates.
const (
	NetworkOverlay  NetworkType = "Overlay"
	NetworkL2Bridge NetworkType = "L2Bridge"
)

// NetworkFlags are a network's flags.
type NetworkFlags uint32

// EnableNonPersistent makes HNS forget the network on reboot: weft makes it again, for the
// subnet it then holds, rather than find a stale one.
const EnableNonPersistent NetworkFlags = 8

// Route is a route of a subnet.
type Route struct {
	NextHop           string `json:",omitempty"`
	DestinationPrefix string `json:",omitempty"`
	Metric            uint16 `json:",omitempty"`
}

// Subnet is an address range of a network.
type Subnet struct {
	IPAddressPrefix string   `json:"IpAddressPrefix,omitempty"`
	Policies        []Policy `json:",omitempty"`
	Routes          []Route  `json:",omitempty"`
	Flags           uint32   `json:",omitempty"`
}

// Ipam is a network's address management: weft uses Type "Static".
type Ipam struct {
	Type    string   `json:",omitempty"`
	Subnets []Subnet `json:",omitempty"`
}

// MacRange is a range of MACs HNS may give endpoints.
type MacRange struct {
	StartMacAddress string `json:",omitempty"`
	EndMacAddress   string `json:",omitempty"`
}

// MacPool is the MAC ranges of a network.
type MacPool struct {
	Ranges []MacRange `json:",omitempty"`
}

// DNS is the DNS settings of a network or endpoint.
type DNS struct {
	Domain     string   `json:",omitempty"`
	Search     []string `json:",omitempty"`
	ServerList []string `json:",omitempty"`
	Options    []string `json:",omitempty"`
}

// HostComputeNetwork is an HNS network.
type HostComputeNetwork struct {
	ID            string        `json:"ID,omitempty"`
	Name          string        `json:",omitempty"`
	Type          NetworkType   `json:",omitempty"`
	Policies      []Policy      `json:",omitempty"`
	MacPool       MacPool       `json:",omitempty"`
	DNS           DNS           `json:"Dns,omitempty"`
	Ipams         []Ipam        `json:",omitempty"`
	Flags         NetworkFlags  `json:",omitempty"`
	SchemaVersion SchemaVersion `json:",omitempty"`
}

// PoliciesOf returns the network's policies of type t.
func (n *HostComputeNetwork) PoliciesOf(t PolicyType) []Policy {
	var out []Policy
	for _, p := range n.Policies {
		if p.Type == t {
			out = append(out, p)
		}
	}
	return out
}

// DRMAC is the distributed router MAC HNS gave the network, the node's VtepMAC.
func (n *HostComputeNetwork) DRMAC() (backend.MAC, error) {
	ps := n.PoliciesOf(PolicyDrMacAddress)
	if len(ps) == 0 {
		return backend.MAC{}, fmt.Errorf("network %s has no %s policy", n.Name, PolicyDrMacAddress)
	}
	var s DrMacAddressSettings
	if err := ps[0].Decode(&s); err != nil {
		return backend.MAC{}, fmt.Errorf("network %s: %w", n.Name, err)
	}
	mac, err := backend.ParseMAC(s.Address)
	if err != nil {
		return backend.MAC{}, fmt.Errorf("network %s: DR MAC: %w", n.Name, err)
	}
	return mac, nil
}

// ManagementIP is the host address HNS reports for the network (as a ProviderAddress
// policy) once the host vNIC is back after the network's creation; invalid until then.
func (n *HostComputeNetwork) ManagementIP() netip.Addr {
	for _, p := range n.PoliciesOf(PolicyProviderAddress) {
		var s ProviderAddressSettings
		if p.Decode(&s) != nil {
			continue
		}
		if a, err := netip.ParseAddr(s.ProviderAddress); err == nil {
			return a
		}
	}
	return netip.Addr{}
}

// StaticSubnets are the subnets of the network's Static Ipams, in order.
func (n *HostComputeNetwork) StaticSubnets() []Subnet {
	var out []Subnet
	for _, ipam := range n.Ipams {
		if strings.EqualFold(ipam.Type, "Static") || ipam.Type == "" {
			out = append(out, ipam.Subnets...)
		}
	}
	return out
}

// StaticSubnet is the network's first subnet of a Static Ipam; nil if it has none.
func (n *HostComputeNetwork) StaticSubnet() *Subnet {
	for i := range n.Ipams {
		if !strings.EqualFold(n.Ipams[i].Type, "Static") && n.Ipams[i].Type != "" {
			continue
		}
		if len(n.Ipams[i].Subnets) > 0 {
			return &n.Ipams[i].Subnets[0]
		}
	}
	return nil
}

// EndpointFlags are an endpoint's flags.
type EndpointFlags uint32

// EndpointRemote marks an endpoint that stands for an address on another host.
const EndpointRemote EndpointFlags = 1

// IPConfig is an endpoint address.
type IPConfig struct {
	IPAddress    string `json:"IpAddress,omitempty"`
	PrefixLength uint8  `json:",omitempty"`
}

// HostComputeEndpoint is an HNS endpoint. HostComputeNamespace is read-only: HNS reports
// the namespace an endpoint is attached to.
type HostComputeEndpoint struct {
	ID                   string        `json:"ID,omitempty"`
	Name                 string        `json:",omitempty"`
	HostComputeNetwork   string        `json:",omitempty"`
	HostComputeNamespace string        `json:",omitempty"`
	Policies             []Policy      `json:",omitempty"`
	IPConfigurations     []IPConfig    `json:"IpConfigurations,omitempty"`
	DNS                  DNS           `json:"Dns,omitempty"`
	MacAddress           string        `json:",omitempty"`
	Flags                EndpointFlags `json:",omitempty"`
	SchemaVersion        SchemaVersion `json:",omitempty"`
}

// IPs are the endpoint's addresses, in order: a dual-stack host endpoint has one of each
// family.
func (e *HostComputeEndpoint) IPs() []netip.Addr {
	var out []netip.Addr
	for _, c := range e.IPConfigurations {
		if a, err := netip.ParseAddr(c.IPAddress); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// IP is the endpoint's first IPv4 address.
func (e *HostComputeEndpoint) IP() netip.Addr {
	for _, c := range e.IPConfigurations {
		if a, err := netip.ParseAddr(c.IPAddress); err == nil && a.Is4() {
			return a
		}
	}
	return netip.Addr{}
}

// ProviderAddress is the endpoint's ProviderAddress policy's address, invalid if none.
func (e *HostComputeEndpoint) ProviderAddress() netip.Addr {
	for _, p := range e.Policies {
		var s ProviderAddressSettings
		if p.Type != PolicyProviderAddress || p.Decode(&s) != nil {
			continue
		}
		if a, err := netip.ParseAddr(s.ProviderAddress); err == nil {
			return a
		}
	}
	return netip.Addr{}
}

// NamespaceType is the kind of a namespace (a network compartment).
type NamespaceType string

// NamespaceHostDefault is the namespace of the host's default compartment.
const NamespaceHostDefault NamespaceType = "HostDefault"

// NamespaceResource is something attached to a namespace.
type NamespaceResource struct {
	Type string          `json:"Type"` // "Endpoint" or "Container"
	Data json.RawMessage `json:"Data"`
}

// NamespaceResourceEndpoint is the Data of an endpoint resource, and the settings of a
// request attaching one.
type NamespaceResourceEndpoint struct {
	ID string `json:"ID"`
}

// HostComputeNamespace is an HNS namespace.
type HostComputeNamespace struct {
	ID            string              `json:"ID,omitempty"`
	NamespaceID   uint32              `json:"NamespaceId,omitempty"`
	Type          NamespaceType       `json:",omitempty"`
	Resources     []NamespaceResource `json:",omitempty"`
	SchemaVersion SchemaVersion       `json:",omitempty"`
}

// RequestType says what a modify request does with its settings.
type RequestType string

// The request types weft sends. Update puts a request's policies in place of the object's
// policies of the same types (hcsshim's TestApplyPolicyOnEndpoint updates an endpoint's ACLs
// so and reads them back).
const (
	RequestAdd    RequestType = "Add"
	RequestRemove RequestType = "Remove"
	RequestUpdate RequestType = "Update"
)

// ModifyNetworkSettingRequest changes a network; weft adds and removes policies with it
// (ResourceType "Policy", Settings a PolicyNetworkRequest).
type ModifyNetworkSettingRequest struct {
	ResourceType string          `json:",omitempty"`
	RequestType  RequestType     `json:",omitempty"`
	Settings     json.RawMessage `json:",omitempty"`
}

// PolicyNetworkRequest is the Settings of a policy request.
type PolicyNetworkRequest struct {
	Policies []Policy `json:",omitempty"`
}

// ModifyNamespaceSettingRequest attaches (Add) or detaches (Remove) an endpoint
// (ResourceType "Endpoint", Settings a NamespaceEndpointRequest).
type ModifyNamespaceSettingRequest struct {
	ResourceType string          `json:",omitempty"`
	RequestType  RequestType     `json:",omitempty"`
	Settings     json.RawMessage `json:",omitempty"`
}

// ModifyEndpointSettingRequest changes an endpoint (HcnModifyEndpoint); weft updates its ACL
// policies with it (ResourceType "Policy", Settings a PolicyNetworkRequest, which has the
// shape of hcsshim's PolicyEndpointRequest).
type ModifyEndpointSettingRequest struct {
	ResourceType string          `json:",omitempty"`
	RequestType  RequestType     `json:",omitempty"`
	Settings     json.RawMessage `json:",omitempty"`
}

// EndpointPolicyRequest is the request that adds, removes or updates policies on an
// endpoint.
func EndpointPolicyRequest(rt RequestType, policies ...Policy) *ModifyEndpointSettingRequest {
	b, _ := json.Marshal(PolicyNetworkRequest{Policies: policies}) // Policy always marshals
	return &ModifyEndpointSettingRequest{ResourceType: "Policy", RequestType: rt, Settings: b}
}

// PolicyRequest is the request that adds (or removes) policies on a network.
func PolicyRequest(rt RequestType, policies ...Policy) *ModifyNetworkSettingRequest {
	b, _ := json.Marshal(PolicyNetworkRequest{Policies: policies}) // Policy always marshals
	return &ModifyNetworkSettingRequest{ResourceType: "Policy", RequestType: rt, Settings: b}
}

// NamespaceEndpointRequest is the Settings of a request that attaches or detaches an
// endpoint: {"EndpointId": …}, as hcsshim's AddNamespaceEndpoint sends it. (A namespace's
// resources list the endpoint as {"ID": …}, NamespaceResourceEndpoint; HNS does not take
// that in a request.)
type NamespaceEndpointRequest struct {
	EndpointID string `json:"EndpointId"`
}

// AttachRequest is the request that attaches (or detaches) an endpoint to a namespace, as
// HNS receives it.
func AttachRequest(rt RequestType, endpointID string) *ModifyNamespaceSettingRequest {
	b, _ := json.Marshal(NamespaceEndpointRequest{EndpointID: endpointID}) // a string always marshals
	return &ModifyNamespaceSettingRequest{ResourceType: "Endpoint", RequestType: rt, Settings: b}
}

// EndpointAttachRequest is HNS v1's request attaching an endpoint (POST
// /endpoints/<id>/attach), as hcsshim writes it (internal/hns/hnsendpoint.go,
// EndpointAttachDetachRequest): SystemType "Host" and a compartment put the endpoint in
// that network compartment of the host.
type EndpointAttachRequest struct {
	SystemType    string `json:"SystemType"`
	CompartmentID uint16 `json:"CompartmentId,omitempty"`
}

// HostCompartment is the host's own network compartment (NET_IF_COMPARTMENT_ID_PRIMARY).
const HostCompartment = 1

// HostAttachRequest attaches an endpoint to the host's own compartment, as flanneld's
// host-gw does (hcsshim's HNSEndpoint.HostAttach(1)).
func HostAttachRequest() EndpointAttachRequest {
	return EndpointAttachRequest{SystemType: "Host", CompartmentID: HostCompartment}
}

// hnsMAC writes a MAC as HNS does: upper-case hex with dashes.
func hnsMAC(m backend.MAC) string {
	return strings.ToUpper(strings.ReplaceAll(m.String(), ":", "-"))
}
