package hnssim

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/weftnet/weft/windows"
)

// HNS v1's network and endpoint documents, as hcsshim's v1 types write them
// (internal/hns/hnsnetwork.go HNSNetwork, hnsendpoint.go HNSEndpoint). HcnCreateNetwork and
// HcnCreateEndpoint take them too: hcsshim's TestV1Network and TestV1Endpoint
// (hcn/hcnv1schema_test.go) send them so and expect HNS to make the objects. A document
// without a SchemaVersion is one: every v2 type hcn writes has that field, no v1 type has.

type v1Subnet struct {
	AddressPrefix  string
	GatewayAddress string
	Policies       []json.RawMessage
}

type v1MacPool struct {
	StartMacAddress string
	EndMacAddress   string
}

type v1Network struct {
	ID                   string
	Name                 string
	Type                 string
	NetworkAdapterName   string
	SourceMac            string
	Policies             []json.RawMessage
	MacPools             []v1MacPool
	Subnets              []v1Subnet
	DNSSuffix            string
	DNSServerList        string
	DNSServerCompartment uint32
	ManagementIP         string
	AutomaticDNS         bool
}

type v1Endpoint struct {
	ID                 string
	Name               string
	VirtualNetwork     string
	VirtualNetworkName string
	Policies           []json.RawMessage
	MacAddress         string
	IPAddress          string
	IPv6Address        string
	DNSSuffix          string
	DNSServerList      string
	DNSDomain          string
	GatewayAddress     string
	GatewayAddressV6   string
	EnableInternalDNS  bool
	DisableICC         bool
	PrefixLength       uint8
	IPv6PrefixLength   uint8
	IsRemoteEndpoint   bool
	EnableLowMetric    bool
	Namespace          json.RawMessage
	EncapOverhead      uint16
	SharedContainers   []string
	State              int
}

// isV1 reports whether a create document is HNS v1's: a JSON object without SchemaVersion.
func isV1(doc string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(doc), &m) != nil {
		return false // the v2 decoding refuses it
	}
	_, found := field(m, "SchemaVersion")
	return !found
}

// noV1Policies refuses v1 policies in a v2 call: their v1 shape ({"Type": …} with the
// settings beside it, under v1 names) has no known mapping onto v2's.
func noV1Policies(ps []json.RawMessage) error {
	if len(ps) > 0 {
		return fmt.Errorf("v1 policies in a v2 call are not simulated")
	}
	return nil
}

// defaultRoute is the route through a v1 gateway: the v2 subnet's and endpoint's default
// route (hcn's v2 networks need one, hcsshim hcn/hcnnetwork.go).
func defaultRoute(gateway string) windows.Route {
	dst := "0.0.0.0/0"
	if a, err := netip.ParseAddr(gateway); err == nil && a.Is6() {
		dst = "::/0"
	}
	return windows.Route{NextHop: gateway, DestinationPrefix: dst}
}

// networkFromV1 is a v1 network document as the v2 document of the same network.
func networkFromV1(doc string) (string, error) {
	var v1 v1Network
	if err := strict(doc, &v1); err != nil {
		return "", err
	}
	if err := noV1Policies(v1.Policies); err != nil {
		return "", err
	}
	if v1.ManagementIP != "" {
		return "", fmt.Errorf("ManagementIP is HNS's to report")
	}
	n := windows.HostComputeNetwork{ID: v1.ID, Name: v1.Name, Type: windows.NetworkType(v1.Type), SchemaVersion: windows.SchemaV2()}
	if v1.NetworkAdapterName != "" {
		n.Policies = append(n.Policies, windows.NetAdapterNamePolicy(v1.NetworkAdapterName))
	}
	for _, p := range v1.MacPools {
		n.MacPool.Ranges = append(n.MacPool.Ranges, windows.MacRange{StartMacAddress: p.StartMacAddress, EndMacAddress: p.EndMacAddress})
	}
	if len(v1.Subnets) > 0 {
		ipam := windows.Ipam{Type: "Static"}
		for _, sn := range v1.Subnets {
			if err := noV1Policies(sn.Policies); err != nil {
				return "", err
			}
			s := windows.Subnet{IPAddressPrefix: sn.AddressPrefix}
			if sn.GatewayAddress != "" {
				s.Routes = []windows.Route{defaultRoute(sn.GatewayAddress)}
			}
			ipam.Subnets = append(ipam.Subnets, s)
		}
		n.Ipams = []windows.Ipam{ipam}
	}
	n.DNS = v1DNS(v1.DNSSuffix, v1.DNSServerList)
	if v1.SourceMac != "" || v1.DNSServerCompartment != 0 || v1.AutomaticDNS {
		return "", fmt.Errorf("v1 SourceMac, DNSServerCompartment and AutomaticDNS are not simulated")
	}
	b, err := json.Marshal(n)
	return string(b), err
}

// endpointFromV1 is a v1 endpoint document, made on network netID, as the v2 document of
// the same endpoint.
func endpointFromV1(doc, netID string) (string, error) {
	var v1 v1Endpoint
	if err := strict(doc, &v1); err != nil {
		return "", err
	}
	if err := noV1Policies(v1.Policies); err != nil {
		return "", err
	}
	if v1.VirtualNetwork != "" && !strings.EqualFold(v1.VirtualNetwork, netID) {
		return "", fmt.Errorf("VirtualNetwork %s is not the network %s it is made on", v1.VirtualNetwork, netID)
	}
	if len(v1.Namespace) > 0 || len(v1.SharedContainers) > 0 || v1.State != 0 {
		return "", fmt.Errorf("Namespace, SharedContainers and State are HNS's to report")
	}
	type v2Endpoint struct {
		windows.HostComputeEndpoint
		Routes []windows.Route `json:",omitempty"`
	}
	ep := v2Endpoint{HostComputeEndpoint: windows.HostComputeEndpoint{ID: v1.ID, Name: v1.Name, MacAddress: v1.MacAddress, SchemaVersion: windows.SchemaV2()}}
	if v1.IPAddress != "" {
		ep.IPConfigurations = append(ep.IPConfigurations, windows.IPConfig{IPAddress: v1.IPAddress, PrefixLength: v1.PrefixLength})
	}
	if v1.IPv6Address != "" {
		ep.IPConfigurations = append(ep.IPConfigurations, windows.IPConfig{IPAddress: v1.IPv6Address, PrefixLength: v1.IPv6PrefixLength})
	}
	for _, gw := range []string{v1.GatewayAddress, v1.GatewayAddressV6} {
		if gw != "" {
			ep.Routes = append(ep.Routes, defaultRoute(gw))
		}
	}
	ep.DNS = v1DNS(v1.DNSSuffix, v1.DNSServerList)
	if v1.DNSDomain != "" {
		ep.DNS.Domain = v1.DNSDomain
	}
	if v1.IsRemoteEndpoint {
		ep.Flags |= windows.EndpointRemote
	}
	if v1.VirtualNetworkName != "" || v1.EnableInternalDNS || v1.DisableICC || v1.EnableLowMetric || v1.EncapOverhead != 0 {
		return "", fmt.Errorf("v1 VirtualNetworkName, EnableInternalDNS, DisableICC, EnableLowMetric and EncapOverhead are not simulated")
	}
	b, err := json.Marshal(ep)
	return string(b), err
}

// v1DNS is v1's DNS suffix and comma-separated server list as v2's Dns.
func v1DNS(suffix, servers string) windows.DNS {
	d := windows.DNS{Domain: suffix}
	for _, s := range strings.Split(servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			d.ServerList = append(d.ServerList, s)
		}
	}
	return d
}
