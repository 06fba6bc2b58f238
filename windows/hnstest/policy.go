package hnstest

import (
	"encoding/json"
	"math"
	"slices"
	"strings"

	"github.com/weftnet/weft/windows"
)

// versions is a set of HNS version ranges, each from a minimum to a maximum, both
// included, as hcsshim's VersionRanges are (hcn/hcnglobals.go).
type versions [][2]windows.Version

// from is every version from min on.
func from(major, minor int) versions {
	return versions{{{Major: major, Minor: minor}, {Major: math.MaxInt32, Minor: math.MaxInt32}}}
}

func (vs versions) has(v windows.Version) bool {
	for _, r := range vs {
		if v.AtLeast(r[0].Major, r[0].Minor) && (r[1].AtLeast(v.Major, v.Minor)) {
			return true
		}
	}
	return false
}

// The policy types HNS takes, by the object they apply to, as hcsshim names them
// (hcn/hcnpolicy.go: EndpointPolicyType, NetworkPolicyType, SubnetPolicyType); each maps to
// the versions that have it, nil for every version. The versions are hcsshim's feature
// ranges (hcn/hcnglobals.go), which its hcnsupport.go checks before using a feature.
var (
	networkPolicies = map[windows.PolicyType]versions{
		"SourceMacAddress": nil, "NetAdapterName": nil, "VSwitchExtension": nil, "DrMacAddress": nil,
		"AutomaticDNS": nil, "InterfaceConstraint": nil, "ProviderAddress": nil, "LayerConstraint": nil,
		"RemoteSubnetRoute": from(9, 2),  // RemoteSubnetVersion
		"HostRoute":         from(9, 2),  // HostRouteVersion
		"VxlanPort":         from(10, 3), // VxlanPortVersion
		"SetPolicy":         from(13, 0), // SetPolicyVersion (a NESTEDIPSET set: NestedIpSetVersion)
		"NetworkACL":        from(15, 0), // NetworkACLPolicyVersion
		"L4Proxy": { // L4ProxyPolicyVersion
			{{Major: 9, Minor: 5}, {Major: 9, Minor: math.MaxInt32}},
			{{Major: 10, Minor: 5}, {Major: 10, Minor: math.MaxInt32}},
			{{Major: 11, Minor: 11}, {Major: 11, Minor: math.MaxInt32}},
			{{Major: 12, Minor: 1}, {Major: 12, Minor: math.MaxInt32}},
			{{Major: 13, Minor: 1}, {Major: math.MaxInt32, Minor: math.MaxInt32}},
		},
	}
	endpointPolicies = map[windows.PolicyType]versions{
		"PortMapping": nil, "ACL": nil, "QOS": nil, "L2Driver": nil, "OutBoundNAT": nil, "SDNRoute": nil,
		"L4Proxy": nil, "PortName": nil, "EncapOverhead": nil, "Iov": nil, "ProviderAddress": nil,
		"InterfaceConstraint": nil,
		"L4WFPPROXY":          from(13, 2), // L4WfpProxyPolicyVersion
		"TierAcl":             from(14, 0), // TierAclPolicyVersion
	}
	subnetPolicies = map[windows.PolicyType]versions{"VLAN": nil, "VSID": nil}

	// addableNetworkPolicies are the types a network takes after its creation (HcnModifyNetwork
	// with a Policy request): flannel adds RemoteSubnetRoute and HostRoute, hcsshim's tests
	// NetworkACL (hcn/hcnnetwork_test.go); SetPolicy and L4Proxy are what hcn's
	// SetPolicy and L4Proxy features are for (unverified).
	addableNetworkPolicies = []windows.PolicyType{"RemoteSubnetRoute", "HostRoute", "NetworkACL", "SetPolicy", "L4Proxy"}
)

// checkPolicy refuses a policy of a type HNS does not have for the object (of), or does
// not have in version v: HCN_E_INVALID_POLICY_TYPE (the code is unverified).
func checkPolicy(call, of string, p windows.Policy, v windows.Version) error {
	table := networkPolicies
	switch of {
	case "endpoint":
		table = endpointPolicies
	case "subnet":
		table = subnetPolicies
	}
	vs, known := table[p.Type]
	if !known {
		return hnsError(call, windows.HCNInvalidPolicyType, "%s policy type %q", of, p.Type)
	}
	if vs != nil && !vs.has(v) {
		return hnsError(call, windows.HCNInvalidPolicyType, "%s policy %s: not in HNS %s", of, p.Type, v)
	}
	switch p.Type {
	case "SetPolicy":
		var s struct{ Type string }
		if json.Unmarshal(p.Settings, &s) == nil && strings.EqualFold(s.Type, "NESTEDIPSET") && !from(15, 0).has(v) {
			return hnsError(call, windows.HCNInvalidPolicyType, "a NESTEDIPSET set: not in HNS %s", v)
		}
	case "ACL":
		if of == "endpoint" {
			if err := checkACL(call, p); err != nil {
				return err
			}
		}
		// Protocol 252 in ACLs: AclSupportForProtocol252Version.
		var s struct{ Protocols string }
		if json.Unmarshal(p.Settings, &s) == nil && slices.Contains(strings.Split(s.Protocols, ","), "252") && !from(11, 0).has(v) {
			return hnsError(call, windows.HCNInvalidPolicy, "an ACL of protocol 252: not in HNS %s", v)
		}
	}
	return nil
}

func checkPolicies(call, of string, ps []windows.Policy, v windows.Version) error {
	for _, p := range ps {
		if err := checkPolicy(call, of, p, v); err != nil {
			return err
		}
	}
	return nil
}

// portMapping is what makes two PortMapping policies clash: HNS maps a host port once.
type portMapping struct {
	Protocol     uint32
	ExternalPort uint16
	VIP          string
}

func portMappings(ps []windows.Policy) []portMapping {
	var out []portMapping
	for _, p := range ps {
		var m portMapping
		if p.Type == "PortMapping" && json.Unmarshal(p.Settings, &m) == nil && m.ExternalPort != 0 {
			out = append(out, m)
		}
	}
	return out
}

// checkPorts refuses PortMapping policies that map a host port some endpoint maps already,
// with HCN_E_PORT_ALREADY_EXISTS: hcsshim's TestEndpointAlreadyExistsError
// (hcn/hcnerrors_test.go) makes two endpoints of one mapping and wants that code.
func (h *HNS) checkPorts(call string, ps []windows.Policy, skip *windows.HostComputeEndpoint) error {
	for _, m := range portMappings(ps) {
		for _, ep := range h.endpoints {
			if ep == skip {
				continue
			}
			if slices.Contains(portMappings(ep.Policies), m) {
				return hnsError(call, windows.HCNPortAlreadyExists, "port %d/%d is mapped by endpoint %s", m.ExternalPort, m.Protocol, ep.Name)
			}
		}
	}
	return nil
}
