package hnssim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/weftnet/weft/windows"
)

// HNS v1 (vmcompute's HNSCall) is a second view of the objects the v2 calls make: this file
// translates each v1 request into the v2 calls hcn would make for it (through Call, so both
// APIs obey the same rules) and each v2 answer back into v1's documents. The package doc
// lists what it simulates and where each behaviour comes from.

// HRESULTs only v1 answers with.
const (
	hcnEndpointNotAttached    windows.HResult = 0x803B0034 // HCN_E_ENDPOINT_NOT_ATTACHED
	gcnNetCompartmentNotFound windows.HResult = 0x803B0027 // GCN_E_NETCOMPARTMENT_NOT_FOUND
)

// primaryCompartment is the host's own network compartment (NET_IF_COMPARTMENT_ID_PRIMARY).
const primaryCompartment = 1

// systemMessages are the texts Windows gives the codes (FormatMessage), which v1 puts in its
// envelope's Error: the HCN codes' from Microsoft's HCN error code table (its descriptions,
// with the period FormatMessage's texts end in, as flannel's match of "This endpoint is
// already attached to the switch." shows), the Win32 ones from winerror.h.
var systemMessages = map[windows.HResult]string{
	windows.HCNNetworkNotFound:               "The network was not found.",
	windows.HCNEndpointNotFound:              "The endpoint was not found.",
	windows.HCNAdapterNotFound:               "An adapter was not found.",
	windows.HCNPolicyNotFound:                "An expected policy was not found.",
	windows.HCNInvalidNetworkType:            "Invalid network type.",
	windows.HCNInvalidPolicy:                 "The provided policy configuration is invalid or missing parameters.",
	windows.HCNInvalidPolicyType:             "Invalid policy type.",
	windows.HCNNetworkAlreadyExists:          "A network with this name already exists.",
	windows.HCNPolicyAlreadyExists:           "Policy information already exists on this object.",
	windows.HCNEndpointAlreadyAttached:       "This endpoint is already attached to the switch.",
	windows.HCNRequestUnsupported:            "The specified request is unsupported.",
	windows.HCNInvalidJSON:                   "Invalid JSON document string.",
	windows.HCNInvalidIP:                     "IP address is either invalid or not part of any configured subnet(s).",
	windows.HCNManagerStopped:                "Operation cannot be performed while service is stopping.",
	windows.HCNEndpointNamespaceAlreadyExist: "This requested operation is invalid as endpoint is already part of a network namespace.",
	windows.HCNAddrInvalidOrReserved:         "An address provided is invalid or reserved.",
	hcnEndpointNotAttached:                   "The endpoint must be attached to complete the operation.",
	gcnNetCompartmentNotFound:                "Network compartment not found for the given id.",
	windows.ElementNotFound:                  "Element not found.",
	windows.InvalidArg:                       "The parameter is incorrect.",
	windows.NotImpl:                          "Not implemented.",
}

// v1State is what only v1 knows of: the containers an endpoint was attached to through v1
// (HNS's SharedContainers) and the accelerated networking MAC list.
type v1State struct {
	mu     sync.Mutex
	shared map[string][]string // by endpoint ID, lower case
	macs   []v1MAC
}

// The v1 documents, with the fields of hcsshim's v1 types (internal/hns: HNSNetwork, Subnet,
// MacPool, HNSEndpoint, EndpointAttachDetachRequest, HNSNnvManagementMacList), and those of
// HNS's answers hcsshim's types lack (Flags, DrMacAddress, State).

type v1Envelope struct {
	Success bool
	Error   string          `json:",omitempty"`
	Output  json.RawMessage `json:",omitempty"`
}

type v1Subnet struct {
	AddressPrefix  string            `json:",omitempty"`
	GatewayAddress string            `json:",omitempty"`
	Policies       []json.RawMessage `json:",omitempty"`
}

type v1MacPool struct {
	StartMacAddress string `json:",omitempty"`
	EndMacAddress   string `json:",omitempty"`
}

type v1Network struct {
	ID                   string            `json:"ID,omitempty"`
	Name                 string            `json:",omitempty"`
	Type                 string            `json:",omitempty"`
	NetworkAdapterName   string            `json:",omitempty"`
	SourceMac            string            `json:",omitempty"`
	Policies             []json.RawMessage `json:",omitempty"`
	MacPools             []v1MacPool       `json:",omitempty"`
	Subnets              []v1Subnet        `json:",omitempty"`
	DNSSuffix            string            `json:",omitempty"`
	DNSServerList        string            `json:",omitempty"`
	DNSServerCompartment uint32            `json:",omitempty"`
	ManagementIP         string            `json:",omitempty"`
	AutomaticDNS         bool              `json:",omitempty"`
}

// v1NetworkAnswer is a network as v1 reports it.
type v1NetworkAnswer struct {
	v1Network
	DrMacAddress string `json:",omitempty"`
	Flags        uint32
}

type v1Namespace struct {
	ID            string
	IsDefault     bool              `json:",omitempty"`
	ResourceList  []json.RawMessage `json:",omitempty"`
	CompartmentId uint32            `json:",omitempty"` //nolint:revive // HNS's spelling
}

type v1Endpoint struct {
	ID                 string            `json:"ID,omitempty"`
	Name               string            `json:",omitempty"`
	VirtualNetwork     string            `json:",omitempty"`
	VirtualNetworkName string            `json:",omitempty"`
	Policies           []json.RawMessage `json:",omitempty"`
	MacAddress         string            `json:",omitempty"`
	IPAddress          string            `json:",omitempty"`
	IPv6Address        string            `json:",omitempty"`
	DNSSuffix          string            `json:",omitempty"`
	DNSServerList      string            `json:",omitempty"`
	DNSDomain          string            `json:",omitempty"`
	GatewayAddress     string            `json:",omitempty"`
	GatewayAddressV6   string            `json:",omitempty"`
	EnableInternalDNS  bool              `json:",omitempty"`
	DisableICC         bool              `json:",omitempty"`
	PrefixLength       uint8             `json:",omitempty"`
	IPv6PrefixLength   uint8             `json:",omitempty"`
	IsRemoteEndpoint   bool              `json:",omitempty"`
	EnableLowMetric    bool              `json:",omitempty"`
	Namespace          *v1Namespace      `json:",omitempty"`
	EncapOverhead      uint16            `json:",omitempty"`
	SharedContainers   []string          `json:",omitempty"`
	State              uint16            `json:",omitempty"`
}

// HNS's EndpointState values (hcsshim internal/hns/hnsendpoint.go).
const (
	endpointCreated  = 1
	endpointAttached = 2
)

type v1AttachRequest struct {
	ContainerId    string `json:",omitempty"` //nolint:revive // HNS's spelling
	SystemType     string
	CompartmentId  uint16 `json:",omitempty"` //nolint:revive // HNS's spelling
	VirtualNicName string `json:",omitempty"`
}

type v1EndpointStats struct {
	BytesReceived          uint64
	BytesSent              uint64
	DroppedPacketsIncoming uint64
	DroppedPacketsOutgoing uint64
	EndpointId             string //nolint:revive // HNS's spelling
	InstanceId             string //nolint:revive // HNS's spelling
	PacketsReceived        uint64
	PacketsSent            uint64
}

type v1MAC struct {
	MacAddress string `json:",omitempty"`
}

type v1MACList struct {
	MacAddressList []v1MAC `json:",omitempty"`
}

// The v2 documents as the v2 queries answer them, read leniently: they are this service's
// own answers.

type v2DNS struct {
	Domain     string   `json:",omitempty"`
	Search     []string `json:",omitempty"`
	ServerList []string `json:",omitempty"`
}

type v2Subnet struct {
	IpAddressPrefix string   //nolint:revive // HNS's spelling
	Policies        []policy `json:",omitempty"`
	Routes          []route  `json:",omitempty"`
}

type v2Network struct {
	ID       string
	Name     string
	Type     string
	Policies []policy
	MacPool  struct {
		Ranges []v1MacPool `json:",omitempty"`
	}
	Dns   v2DNS //nolint:revive // HNS's spelling
	Ipams []struct {
		Type    string
		Subnets []v2Subnet
	}
	Flags uint32
}

type v2Endpoint struct {
	ID                   string
	Name                 string
	HostComputeNetwork   string
	HostComputeNamespace string
	Policies             []policy
	IpConfigurations     []ipConfig //nolint:revive // HNS's spelling
	Dns                  v2DNS      //nolint:revive // HNS's spelling
	Routes               []route
	MacAddress           string
	Flags                uint32
}

type v2Namespace struct {
	ID          string
	NamespaceId uint32 //nolint:revive // HNS's spelling
	Type        string
}

// hnsCall answers vmcompute's HNSCall: method, path, and the request's JSON (r.b).
func (s *Server) hnsCall(r request) answer {
	method := strings.ToUpper(r.a)
	path := strings.Split(strings.Trim(r.id, "/"), "/")
	collection := strings.ToLower(path[0])
	id, sub := "", ""
	if len(path) > 1 {
		id = path[1]
	}
	if len(path) > 2 {
		sub = strings.ToLower(strings.Join(path[2:], "/"))
	}
	switch {
	case collection == "globals" && id == "version" && sub == "" && method == "GET":
		v, err := s.hns.Version()
		if err != nil {
			return fail(err)
		}
		return v1OK(v)
	case collection == "networks" && sub == "":
		switch {
		case method == "GET" && id == "":
			return s.v1ListNetworks()
		case method == "GET":
			return s.v1GetNetwork(id)
		case method == "POST" && id == "":
			return s.v1CreateNetwork(r.b)
		case method == "DELETE" && id != "":
			return v1Result(s.v2("HcnDeleteNetwork", id, 0, ""), nil)
		}
	case collection == "endpoints":
		switch {
		case method == "GET" && id == "":
			return s.v1ListEndpoints()
		case method == "GET" && sub == "":
			return s.v1GetEndpoint(id)
		case method == "POST" && id == "":
			return s.v1CreateEndpoint(r.b)
		case method == "DELETE" && id != "" && sub == "":
			return s.v1DeleteEndpoint(id)
		case method == "POST" && (sub == "attach" || sub == "detach"):
			return s.v1Attach(id, sub == "attach", r.b)
		}
	case collection == "endpointstats" && id != "" && sub == "" && method == "GET":
		return s.v1EndpointStats(id)
	case collection == "accelnet" && id == "":
		return s.v1AccelNet(method, r.b)
	case collection == "policylists":
		return s.policyListCall(method, id, sub)
	}
	return v1OK(nil).withError(fmt.Sprintf("%s %s is not simulated", r.a, r.id))
}

// withError turns a success into v1's failure with msg.
func (a answer) withError(msg string) answer {
	b, _ := json.Marshal(v1Envelope{Error: msg}) // a string always marshals
	return answer{result: string(b)}
}

// v1OK is v1's success with out as its Output (none if nil).
func v1OK(out any) answer {
	env := v1Envelope{Success: true}
	if out != nil {
		b, err := json.Marshal(out)
		if err != nil {
			return fail(err)
		}
		env.Output = b
	}
	return ok(env)
}

// v1Refused is v1's failure of a request with code: the envelope's Error is the code's text.
func v1Refused(code windows.HResult, detail string) answer {
	return v1Failed(fail(windows.NewError("HNSCall", code, detail)))
}

// v1Failed is v1's answer to a failed v2 call: the envelope with the text of its code, or
// the code itself while HNS is not running (the call cannot reach it).
func v1Failed(a answer) answer {
	code := windows.HResult(a.hr)
	if code == windows.HCNManagerStopped || code == windows.RPCServerUnavailable {
		return answer{hr: a.hr}
	}
	return answer{}.withError(messageOf(a))
}

// messageOf is the text v1 gives a failed call's code: Windows' own where known, else the
// error record's message.
func messageOf(a answer) string {
	if m, found := systemMessages[windows.HResult(a.hr)]; found {
		return m
	}
	var rec windows.ErrorRecord
	if json.Unmarshal([]byte(a.record), &rec) == nil && rec.ErrorMessage != "" {
		return rec.ErrorMessage
	}
	return fmt.Sprintf("HRESULT 0x%08X", a.hr)
}

// v1Result is v1's answer to a v2 call: out on success.
func v1Result(a answer, out any) answer {
	if a.hr != 0 {
		return v1Failed(a)
	}
	return v1OK(out)
}

// v2 makes a v2 call on a v1 caller's behalf, as hcn would make it.
func (s *Server) v2(call, id string, handle uint64, a string) answer {
	return s.Call(request{call: call, id: strings.ToLower(id), handle: handle, a: a})
}

// v2Object queries one object (kind Network, Endpoint or Namespace) into out.
func (s *Server) v2Object(kind, id string, out any) answer {
	o := s.v2("HcnOpen"+kind, id, 0, "")
	if o.hr != 0 {
		return o
	}
	defer s.v2("HcnClose"+kind, "", o.handle, "")
	q := s.v2("HcnQuery"+kind+"Properties", "", o.handle, "")
	if q.hr != 0 {
		return q
	}
	if err := json.Unmarshal([]byte(q.result), out); err != nil {
		return fail(fmt.Errorf("hnssim: reading the %s %s: %w", kind, id, err))
	}
	return q
}

// v2All lists every object of a kind, each queried into a new T.
func v2All[T any](s *Server, kind string) ([]T, answer) {
	l := s.v2("HcnEnumerate"+kind+"s", "", 0, "")
	if l.hr != 0 {
		return nil, l
	}
	var ids []string
	if err := json.Unmarshal([]byte(l.result), &ids); err != nil {
		return nil, fail(fmt.Errorf("hnssim: reading the %s listing: %w", kind, err))
	}
	out := make([]T, 0, len(ids))
	for _, id := range ids {
		var v T
		// An object deleted between the listing and its query is left out, as it is gone.
		if a := s.v2Object(kind, id, &v); a.hr == 0 {
			out = append(out, v)
		}
	}
	return out, answer{}
}

func (s *Server) v1ListNetworks() answer {
	nets, a := v2All[v2Network](s, "Network")
	if a.hr != 0 {
		return v1Failed(a)
	}
	out := make([]v1NetworkAnswer, 0, len(nets))
	for i := range nets {
		out = append(out, v1NetworkOf(&nets[i]))
	}
	return v1OK(out)
}

func (s *Server) v1GetNetwork(id string) answer {
	var n v2Network
	if a := s.v2Object("Network", id, &n); a.hr != 0 {
		return v1Failed(a)
	}
	return v1OK(v1NetworkOf(&n))
}

func (s *Server) v1CreateNetwork(body string) answer {
	doc, err := v2NetworkDocument(body)
	if err != nil {
		return v1Refused(windows.HCNInvalidJSON, err.Error())
	}
	a := s.v2("HcnCreateNetwork", "", 0, doc)
	if a.hr != 0 {
		return v1Failed(a)
	}
	defer s.v2("HcnCloseNetwork", "", a.handle, "")
	var n v2Network
	q := s.v2("HcnQueryNetworkProperties", "", a.handle, "")
	if q.hr != 0 {
		return v1Failed(q)
	}
	if err := json.Unmarshal([]byte(q.result), &n); err != nil {
		return fail(fmt.Errorf("hnssim: reading the new network: %w", err))
	}
	return v1OK(v1NetworkOf(&n))
}

// v2NetworkDocument translates a v1 network request into the v2 document hcn would send.
func v2NetworkDocument(body string) (string, error) {
	var n v1Network
	if err := strict(body, &n); err != nil {
		return "", err
	}
	if n.ManagementIP != "" {
		return "", errors.New("ManagementIP is HNS's to report")
	}
	if n.SourceMac != "" || n.DNSServerCompartment != 0 || n.AutomaticDNS {
		return "", errors.New("v1 SourceMac, DNSServerCompartment and AutomaticDNS are not simulated")
	}
	doc := map[string]any{
		"Name":          n.Name,
		"Type":          n.Type,
		"SchemaVersion": schemaVersion{Major: 2},
	}
	if n.ID != "" {
		doc["ID"] = n.ID
	}
	var ps []json.RawMessage
	if n.NetworkAdapterName != "" {
		b, _ := json.Marshal(policy{Type: "NetAdapterName", Settings: mustJSON(map[string]string{"NetworkAdapterName": n.NetworkAdapterName})})
		ps = append(ps, b)
	}
	for _, p := range n.Policies {
		v2p, err := v2PolicyOf(p)
		if err != nil {
			return "", err
		}
		ps = append(ps, v2p)
	}
	if len(ps) > 0 {
		doc["Policies"] = ps
	}
	if len(n.MacPools) > 0 {
		doc["MacPool"] = map[string]any{"Ranges": n.MacPools}
	}
	if dns := dnsOf("", n.DNSSuffix, n.DNSServerList); dns != nil {
		doc["Dns"] = dns
	}
	var subnets []map[string]any
	for _, sn := range n.Subnets {
		v2sn := map[string]any{}
		if sn.AddressPrefix != "" {
			v2sn["IpAddressPrefix"] = sn.AddressPrefix
		}
		if sn.GatewayAddress != "" {
			v2sn["Routes"] = []route{{NextHop: sn.GatewayAddress, DestinationPrefix: defaultRoute(sn.GatewayAddress)}}
		}
		var sps []json.RawMessage
		for _, p := range sn.Policies {
			v2p, err := v2PolicyOf(p)
			if err != nil {
				return "", fmt.Errorf("subnet %s: %w", sn.AddressPrefix, err)
			}
			sps = append(sps, v2p)
		}
		if len(sps) > 0 {
			v2sn["Policies"] = sps
		}
		subnets = append(subnets, v2sn)
	}
	if len(subnets) > 0 {
		doc["Ipams"] = []map[string]any{{"Type": "Static", "Subnets": subnets}}
	}
	return string(mustJSON(doc)), nil
}

// v1NetworkOf is a v2 network as v1 reports it.
func v1NetworkOf(n *v2Network) v1NetworkAnswer {
	out := v1NetworkAnswer{v1Network: v1Network{
		ID:            n.ID,
		Name:          n.Name,
		Type:          n.Type,
		MacPools:      n.MacPool.Ranges,
		DNSSuffix:     strings.Join(n.Dns.Search, ","),
		DNSServerList: strings.Join(n.Dns.ServerList, ","),
	}, Flags: n.Flags}
	for _, p := range n.Policies {
		switch p.Type {
		case "NetAdapterName":
			var s struct{ NetworkAdapterName string }
			if json.Unmarshal(p.Settings, &s) == nil {
				out.NetworkAdapterName = s.NetworkAdapterName
				continue
			}
		case "ProviderAddress":
			var s struct{ ProviderAddress string }
			if json.Unmarshal(p.Settings, &s) == nil {
				out.ManagementIP = s.ProviderAddress
				continue
			}
		case "DrMacAddress":
			var s struct{ Address string }
			if json.Unmarshal(p.Settings, &s) == nil {
				out.DrMacAddress = s.Address
				continue
			}
		}
		out.Policies = append(out.Policies, v1PolicyOf(p))
	}
	for _, ipam := range n.Ipams {
		for _, sn := range ipam.Subnets {
			v1sn := v1Subnet{AddressPrefix: sn.IpAddressPrefix, GatewayAddress: gatewayOf(sn.Routes, sn.IpAddressPrefix)}
			for _, p := range sn.Policies {
				v1sn.Policies = append(v1sn.Policies, v1PolicyOf(p))
			}
			out.Subnets = append(out.Subnets, v1sn)
		}
	}
	return out
}

// gatewayOf is the next hop of the default route of prefix's family among routes.
func gatewayOf(routes []route, prefix string) string {
	want := "0.0.0.0/0"
	if p, err := netip.ParsePrefix(prefix); err == nil && p.Addr().Is6() {
		want = "::/0"
	}
	for _, r := range routes {
		if r.DestinationPrefix == want {
			return r.NextHop
		}
	}
	return ""
}

// defaultRoute is the default route of addr's family.
func defaultRoute(addr string) string {
	if a, err := netip.ParseAddr(addr); err == nil && a.Is6() {
		return "::/0"
	}
	return "0.0.0.0/0"
}

// dnsOf is v2's Dns of v1's comma-separated lists; nil if all are empty.
func dnsOf(domain, suffixes, servers string) map[string]any {
	dns := map[string]any{}
	if domain != "" {
		dns["Domain"] = domain
	}
	if l := commaList(suffixes); len(l) > 0 {
		dns["Search"] = l
	}
	if l := commaList(servers); len(l) > 0 {
		dns["ServerList"] = l
	}
	if len(dns) == 0 {
		return nil
	}
	return dns
}

func commaList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("hnssim: marshal %T: %v", v, err)) // maps of strings and numbers
	}
	return b
}

// policyForm is how a v1 policy type reads in v2: the v2 type, and the settings renamed (v1
// name, v2 name).
type policyForm struct {
	v1, v2 string
	fields [][2]string
}

// policyForms are the v1 policies whose v2 form differs by more than v2's Settings object:
// the pairs containernetworking/plugins writes in each API (pkg/hns/netconf_windows.go: PA
// and ProviderAddress, OutBoundNAT's ExceptionList and Exceptions, NAT and PortMapping) and
// hcsshim's v1 and v2 types of a policy (internal/hns/hnspolicy.go, hnspolicylist.go;
// hcn/hcnpolicy.go: VLAN, VSID, OutBoundNAT's VIP, ROUTE and SDNRoute). Every other type
// keeps its name and fields.
var policyForms = []policyForm{
	{v1: "PA", v2: "ProviderAddress", fields: [][2]string{{"PA", "ProviderAddress"}}},
	{v1: "VSID", v2: "VSID", fields: [][2]string{{"VSID", "IsolationId"}}},
	{v1: "VLAN", v2: "VLAN", fields: [][2]string{{"VLAN", "IsolationId"}}},
	{v1: "OutBoundNAT", v2: "OutBoundNAT", fields: [][2]string{{"VIP", "VirtualIP"}, {"ExceptionList", "Exceptions"}}},
	{v1: "ROUTE", v2: "SDNRoute"},
	{v1: "NAT", v2: "PortMapping"},
}

// protocols are the protocol numbers v2's PortMapping takes for v1 NAT's names
// (containernetworking/plugins pkg/hns/netconf_windows.go, protocolEnums).
var protocols = map[string]int{"icmpv4": 1, "igmp": 2, "tcp": 6, "udp": 17, "icmpv6": 58}

// v2PolicyOf translates a v1 policy ({"Type": …, settings…}) into v2's {"Type", "Settings"}.
func v2PolicyOf(raw json.RawMessage) (json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := strict(string(raw), &fields); err != nil {
		return nil, fmt.Errorf("policy %s: %w", raw, err)
	}
	var typ string
	if err := json.Unmarshal(fields["Type"], &typ); err != nil || typ == "" {
		return nil, fmt.Errorf("policy %s: no Type", raw)
	}
	delete(fields, "Type")
	v2type := typ
	for _, f := range policyForms {
		if !strings.EqualFold(f.v1, typ) {
			continue
		}
		v2type = f.v2
		for _, rename := range f.fields {
			renameField(fields, rename[0], rename[1])
		}
		if f.v1 == "NAT" {
			if p, found := fields["Protocol"]; found {
				var name string
				if json.Unmarshal(p, &name) == nil {
					n, known := protocols[strings.ToLower(name)]
					if !known {
						var err error
						if n, err = strconv.Atoi(name); err != nil {
							return nil, fmt.Errorf("NAT policy: protocol %q", name)
						}
					}
					fields["Protocol"] = mustJSON(n)
				}
			}
		}
	}
	return mustJSON(policy{Type: v2type, Settings: mustJSON(fields)}), nil
}

// renameField moves fields[from], if there is one, to fields[to].
func renameField(fields map[string]json.RawMessage, from, to string) {
	if v, found := fields[from]; found {
		delete(fields, from)
		fields[to] = v
	}
}

// v1PolicyOf translates a v2 policy into v1's form.
func v1PolicyOf(p policy) json.RawMessage {
	fields := map[string]json.RawMessage{}
	if len(p.Settings) > 0 && json.Unmarshal(p.Settings, &fields) != nil {
		fields = map[string]json.RawMessage{"Settings": p.Settings} // not an object: kept as it came
	}
	typ := p.Type
	for _, f := range policyForms {
		if f.v2 != p.Type {
			continue
		}
		typ = f.v1
		for _, rename := range f.fields {
			renameField(fields, rename[1], rename[0])
		}
		if f.v1 == "NAT" {
			var n int
			if json.Unmarshal(fields["Protocol"], &n) == nil {
				for name, num := range protocols {
					if num == n {
						fields["Protocol"] = mustJSON(strings.ToUpper(name))
					}
				}
			}
		}
		break
	}
	fields["Type"] = mustJSON(typ)
	return mustJSON(fields)
}

func (s *Server) v1ListEndpoints() answer {
	eps, a := v2All[v2Endpoint](s, "Endpoint")
	if a.hr != 0 {
		return v1Failed(a)
	}
	nets, a := v2All[v2Network](s, "Network")
	if a.hr != 0 {
		return v1Failed(a)
	}
	out := make([]v1Endpoint, 0, len(eps))
	for i := range eps {
		out = append(out, s.v1EndpointOf(&eps[i], nets))
	}
	return v1OK(out)
}

func (s *Server) v1GetEndpoint(id string) answer {
	var ep v2Endpoint
	if a := s.v2Object("Endpoint", id, &ep); a.hr != 0 {
		return v1Failed(a)
	}
	var n v2Network
	var nets []v2Network
	if s.v2Object("Network", ep.HostComputeNetwork, &n).hr == 0 {
		nets = append(nets, n)
	}
	return v1OK(s.v1EndpointOf(&ep, nets))
}

// v1EndpointOf is a v2 endpoint as v1 reports it; nets are the networks to find its own in.
func (s *Server) v1EndpointOf(ep *v2Endpoint, nets []v2Network) v1Endpoint {
	out := v1Endpoint{
		ID:               ep.ID,
		Name:             ep.Name,
		VirtualNetwork:   ep.HostComputeNetwork,
		MacAddress:       ep.MacAddress,
		DNSSuffix:        strings.Join(ep.Dns.Search, ","),
		DNSServerList:    strings.Join(ep.Dns.ServerList, ","),
		DNSDomain:        ep.Dns.Domain,
		IsRemoteEndpoint: ep.Flags&uint32(windows.EndpointRemote) != 0,
		State:            endpointCreated,
	}
	var subnets []v2Subnet
	for i := range nets {
		if strings.EqualFold(nets[i].ID, ep.HostComputeNetwork) {
			out.VirtualNetworkName = nets[i].Name
			for _, ipam := range nets[i].Ipams {
				subnets = append(subnets, ipam.Subnets...)
			}
		}
	}
	for _, p := range ep.Policies {
		out.Policies = append(out.Policies, v1PolicyOf(p))
	}
	// An address given without a prefix length, or assigned by HNS, reports its subnet's,
	// and an endpoint with no default route its subnet's gateway (hcsshim issue 1746).
	for _, c := range ep.IpConfigurations {
		a, err := netip.ParseAddr(c.IpAddress)
		if err != nil {
			continue
		}
		bits, gw := c.PrefixLength, gatewayOf(ep.Routes, netip.PrefixFrom(a, 0).String())
		for _, sn := range subnets {
			if p, err := netip.ParsePrefix(sn.IpAddressPrefix); err == nil && p.Contains(a) {
				if bits == 0 {
					bits = uint8(p.Bits())
				}
				if gw == "" {
					gw = gatewayOf(sn.Routes, sn.IpAddressPrefix)
				}
			}
		}
		if a.Is4() && out.IPAddress == "" {
			out.IPAddress, out.PrefixLength, out.GatewayAddress = a.String(), bits, gw
		} else if a.Is6() && out.IPv6Address == "" {
			out.IPv6Address, out.IPv6PrefixLength, out.GatewayAddressV6 = a.String(), bits, gw
		}
	}
	out.SharedContainers = s.sharedContainers(ep.ID)
	if ep.HostComputeNamespace != "" || len(out.SharedContainers) > 0 {
		out.State = endpointAttached
	}
	return out
}

func (s *Server) sharedContainers(endpointID string) []string {
	s.v1.mu.Lock()
	defer s.v1.mu.Unlock()
	return slices.Clone(s.v1.shared[strings.ToLower(endpointID)])
}

func (s *Server) v1CreateEndpoint(body string) answer {
	var req v1Endpoint
	if err := strict(body, &req); err != nil {
		return v1Refused(windows.HCNInvalidJSON, err.Error())
	}
	netID := req.VirtualNetwork
	if netID == "" && req.VirtualNetworkName != "" {
		nets, a := v2All[v2Network](s, "Network")
		if a.hr != 0 {
			return v1Failed(a)
		}
		for _, n := range nets {
			if n.Name == req.VirtualNetworkName {
				netID = n.ID
			}
		}
	}
	if netID == "" {
		return v1Refused(windows.HCNNetworkNotFound, "endpoint "+req.Name+": no network "+req.VirtualNetworkName)
	}
	var n v2Network
	if a := s.v2Object("Network", netID, &n); a.hr != 0 {
		return v1Failed(a)
	}
	doc, err := v2EndpointDocument(&req, &n)
	if err != nil {
		return v1Refused(windows.HCNInvalidJSON, err.Error())
	}
	o := s.v2("HcnOpenNetwork", netID, 0, "")
	if o.hr != 0 {
		return v1Failed(o)
	}
	defer s.v2("HcnCloseNetwork", "", o.handle, "")
	c := s.v2("HcnCreateEndpoint", "", o.handle, doc)
	if c.hr != 0 {
		return v1Failed(c)
	}
	defer s.v2("HcnCloseEndpoint", "", c.handle, "")
	q := s.v2("HcnQueryEndpointProperties", "", c.handle, "")
	if q.hr != 0 {
		return v1Failed(q)
	}
	var ep v2Endpoint
	if err := json.Unmarshal([]byte(q.result), &ep); err != nil {
		return fail(fmt.Errorf("hnssim: reading the new endpoint: %w", err))
	}
	return v1OK(s.v1EndpointOf(&ep, []v2Network{n}))
}

// v2EndpointDocument translates a v1 endpoint request into the v2 document hcn would send
// for an endpoint of network n. An address given without a prefix length takes its
// subnet's: v1 reports one for every endpoint (hcsshim issue 1746), and the host's vNIC of
// an attached endpoint holds the subnet.
func v2EndpointDocument(ep *v1Endpoint, n *v2Network) (string, error) {
	if ep.Namespace != nil || len(ep.SharedContainers) > 0 || ep.State != 0 {
		return "", errors.New("Namespace, SharedContainers and State are HNS's to report")
	}
	if ep.VirtualNetwork != "" && !strings.EqualFold(ep.VirtualNetwork, n.ID) || ep.VirtualNetworkName != "" && n.Name != "" && ep.VirtualNetworkName != n.Name {
		return "", fmt.Errorf("VirtualNetwork %s (%s) is not the network %s (%s) it is made on", ep.VirtualNetwork, ep.VirtualNetworkName, n.ID, n.Name)
	}
	if ep.EnableInternalDNS || ep.DisableICC || ep.EnableLowMetric || ep.EncapOverhead != 0 {
		return "", errors.New("v1 EnableInternalDNS, DisableICC, EnableLowMetric and EncapOverhead are not simulated")
	}
	doc := map[string]any{"SchemaVersion": schemaVersion{Major: 2}}
	if n.ID != "" {
		doc["HostComputeNetwork"] = n.ID
	}
	if ep.ID != "" {
		doc["ID"] = ep.ID
	}
	if ep.Name != "" {
		doc["Name"] = ep.Name
	}
	if ep.MacAddress != "" {
		doc["MacAddress"] = ep.MacAddress
	}
	if ep.IsRemoteEndpoint {
		doc["Flags"] = windows.EndpointRemote
	}
	var ps []json.RawMessage
	for _, p := range ep.Policies {
		v2p, err := v2PolicyOf(p)
		if err != nil {
			return "", err
		}
		ps = append(ps, v2p)
	}
	if len(ps) > 0 {
		doc["Policies"] = ps
	}
	var ips []ipConfig
	var routes []route
	for _, a := range []struct {
		ip, gw string
		bits   uint8
	}{{ep.IPAddress, ep.GatewayAddress, ep.PrefixLength}, {ep.IPv6Address, ep.GatewayAddressV6, ep.IPv6PrefixLength}} {
		if a.ip != "" {
			if a.bits == 0 {
				a.bits = subnetBits(n, a.ip)
			}
			ips = append(ips, ipConfig{IpAddress: a.ip, PrefixLength: a.bits})
		}
		if a.gw != "" {
			routes = append(routes, route{NextHop: a.gw, DestinationPrefix: defaultRoute(a.gw)})
		}
	}
	if len(ips) > 0 {
		doc["IpConfigurations"] = ips
	}
	if len(routes) > 0 {
		doc["Routes"] = routes
	}
	if dns := dnsOf(ep.DNSDomain, ep.DNSSuffix, ep.DNSServerList); dns != nil {
		doc["Dns"] = dns
	}
	return string(mustJSON(doc)), nil
}

// subnetBits is the prefix length of n's subnet holding addr, 0 if none does.
func subnetBits(n *v2Network, addr string) uint8 {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return 0
	}
	for _, ipam := range n.Ipams {
		for _, sn := range ipam.Subnets {
			if p, err := netip.ParsePrefix(sn.IpAddressPrefix); err == nil && p.Contains(a) {
				return uint8(p.Bits())
			}
		}
	}
	return 0
}

func (s *Server) v1DeleteEndpoint(id string) answer {
	a := s.v2("HcnDeleteEndpoint", id, 0, "")
	if a.hr == 0 {
		s.v1.mu.Lock()
		delete(s.v1.shared, strings.ToLower(id))
		s.v1.mu.Unlock()
	}
	return v1Result(a, nil)
}

// v1Attach answers an endpoint's attach or detach. A refusal is HNSCall's HRESULT, not the
// envelope's Error: Calico's log of HostAttach on an attached endpoint reads "hnsCall failed
// in Win32: This endpoint is already attached to the switch. (0x803b0014)" (projectcalico
// calico issue 4280).
func (s *Server) v1Attach(id string, attach bool, body string) answer {
	var req v1AttachRequest
	if err := strict(body, &req); err != nil {
		return attachFailed(windows.HCNInvalidJSON, err.Error())
	}
	var ep v2Endpoint
	if a := s.v2Object("Endpoint", id, &ep); a.hr != 0 {
		return a
	}
	switch req.SystemType {
	case "Host":
		if attach {
			return s.hostAttach(&ep, req.CompartmentId)
		}
		return s.hostDetach(&ep)
	case "Container":
		if req.ContainerId == "" {
			return attachFailed(windows.InvalidArg, "no ContainerId")
		}
		return s.containerAttach(&ep, req.ContainerId, attach)
	case "VirtualMachine":
		return attachFailed(windows.NotImpl, "virtual machine NICs are not simulated")
	}
	return attachFailed(windows.InvalidArg, "SystemType "+req.SystemType)
}

func attachFailed(code windows.HResult, detail string) answer {
	return fail(windows.NewError("HNSCall", code, detail))
}

// hostAttach attaches an endpoint to the host's compartment: the v2 namespace of that
// compartment, the HostDefault one for the primary compartment (made if none is).
func (s *Server) hostAttach(ep *v2Endpoint, compartment uint16) answer {
	if compartment == 0 {
		compartment = primaryCompartment
	}
	if ep.HostComputeNamespace != "" {
		return attachFailed(windows.HCNEndpointAlreadyAttached, "endpoint "+ep.ID+" is attached to namespace "+ep.HostComputeNamespace)
	}
	nss, a := v2All[v2Namespace](s, "Namespace")
	if a.hr != 0 {
		return a
	}
	nsID := ""
	for _, ns := range nss {
		if compartment == primaryCompartment && ns.Type == string(windows.NamespaceHostDefault) ||
			compartment != primaryCompartment && ns.NamespaceId == uint32(compartment) {
			nsID = ns.ID
			break
		}
	}
	if nsID == "" && compartment != primaryCompartment {
		return attachFailed(gcnNetCompartmentNotFound, fmt.Sprintf("compartment %d", compartment))
	}
	if nsID == "" {
		c := s.v2("HcnCreateNamespace", "", 0, string(mustJSON(map[string]any{
			"Type": windows.NamespaceHostDefault, "NamespaceId": primaryCompartment, "SchemaVersion": schemaVersion{Major: 2},
		})))
		if c.hr != 0 {
			return c
		}
		q := s.v2("HcnQueryNamespaceProperties", "", c.handle, "")
		s.v2("HcnCloseNamespace", "", c.handle, "")
		if q.hr != 0 {
			return q
		}
		var ns v2Namespace
		if err := json.Unmarshal([]byte(q.result), &ns); err != nil {
			return fail(fmt.Errorf("hnssim: reading the new host namespace: %w", err))
		}
		nsID = ns.ID
	}
	return s.modifyNamespaceEndpoint(nsID, ep.ID, "Add")
}

func (s *Server) hostDetach(ep *v2Endpoint) answer {
	if ep.HostComputeNamespace == "" {
		return attachFailed(hcnEndpointNotAttached, "endpoint "+ep.ID+" is not attached")
	}
	return s.modifyNamespaceEndpoint(ep.HostComputeNamespace, ep.ID, "Remove")
}

// modifyNamespaceEndpoint adds an endpoint to a namespace or removes it, as hcn's
// AddNamespaceEndpoint and RemoveNamespaceEndpoint ask.
func (s *Server) modifyNamespaceEndpoint(nsID, epID, requestType string) answer {
	o := s.v2("HcnOpenNamespace", nsID, 0, "")
	if o.hr != 0 {
		return o
	}
	defer s.v2("HcnCloseNamespace", "", o.handle, "")
	m := s.v2("HcnModifyNamespace", "", o.handle, string(mustJSON(map[string]any{
		"ResourceType": "Endpoint", "RequestType": requestType, "Settings": map[string]string{"EndpointId": epID},
	})))
	if m.hr != 0 {
		return m
	}
	return v1OK(nil)
}

func (s *Server) containerAttach(ep *v2Endpoint, container string, attach bool) answer {
	s.v1.mu.Lock()
	defer s.v1.mu.Unlock()
	key := strings.ToLower(ep.ID)
	cs := s.v1.shared[key]
	i := slices.IndexFunc(cs, func(c string) bool { return strings.EqualFold(c, container) })
	switch {
	case attach && i >= 0:
		return attachFailed(windows.HCNEndpointAlreadyAttached, "endpoint "+ep.ID+" is attached to container "+container)
	case attach:
		if s.v1.shared == nil {
			s.v1.shared = map[string][]string{}
		}
		s.v1.shared[key] = append(cs, container)
	case i < 0:
		return attachFailed(hcnEndpointNotAttached, "endpoint "+ep.ID+" is not attached to container "+container)
	default:
		s.v1.shared[key] = slices.Delete(cs, i, i+1)
	}
	return v1OK(nil)
}

// v1EndpointStats answers an endpoint's counters: nothing moves packets here, so all zero.
func (s *Server) v1EndpointStats(id string) answer {
	var ep v2Endpoint
	if a := s.v2Object("Endpoint", id, &ep); a.hr != 0 {
		return v1Failed(a)
	}
	return v1OK(v1EndpointStats{EndpointId: ep.ID})
}

// v1AccelNet keeps the management MAC list that accelerated networking leaves alone.
func (s *Server) v1AccelNet(method, body string) answer {
	s.v1.mu.Lock()
	defer s.v1.mu.Unlock()
	switch method {
	case "GET":
	case "POST":
		var l v1MACList
		if err := strict(body, &l); err != nil {
			return v1Refused(windows.HCNInvalidJSON, err.Error())
		}
		s.v1.macs = l.MacAddressList
	case "DELETE":
		s.v1.macs = nil
	default:
		return answer{}.withError(method + " /accelnet/ is not simulated")
	}
	return v1OK(v1MACList{MacAddressList: slices.Clone(s.v1.macs)})
}

// isV1 reports whether a create document handed to HcnCreateNetwork or HcnCreateEndpoint
// is HNS v1's: a JSON object without SchemaVersion (every v2 type hcn writes has that field,
// no v1 type has). hcsshim's hcn/hcnv1schema_test.go hands those calls documents of its v1
// types and expects the objects made.
func isV1(doc string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(doc), &m) != nil {
		return false // the v2 decoding refuses it
	}
	_, found := field(m, "SchemaVersion")
	return !found
}

// networkFromV1 is a v1 network document as the v2 document of the same network.
func networkFromV1(doc string) (string, error) {
	return v2NetworkDocument(doc)
}

// endpointFromV1 is a v1 endpoint document, made on network netID, as the v2 document of
// the same endpoint.
func (s *Server) endpointFromV1(doc, netID string) (string, error) {
	var ep v1Endpoint
	if err := strict(doc, &ep); err != nil {
		return "", err
	}
	n := v2Network{ID: netID}
	if a := s.v2Object("Network", netID, &n); a.hr != 0 {
		return "", fmt.Errorf("network %s: %s", netID, messageOf(a))
	}
	return v2EndpointDocument(&ep, &n)
}
