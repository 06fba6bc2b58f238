package hnssim

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

// v1Sim is a server with a host, as the e2e node has them.
type v1Sim struct {
	t    *testing.T
	s    *Server
	hns  *hnstest.HNS
	host *hnstest.Host
}

func newV1Sim(t *testing.T) *v1Sim {
	host := hnstest.NewHost(windows.Interface{Index: 4, Name: "Ethernet", Prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}})
	hns := hnstest.New(hnstest.Options{ManagementIP: netip.MustParseAddr("192.0.2.10"), Host: host})
	return &v1Sim{t: t, s: New(hns, slog.New(slog.NewTextHandler(io.Discard, nil))), hns: hns, host: host}
}

// call makes an HNSCall as hcsshim's v1 wrappers do.
func (v *v1Sim) call(method, path, body string) answer {
	return v.s.Call(request{call: "HNSCall", id: path, a: method, b: body})
}

// ok makes an HNSCall that must succeed and decodes its Output into out (if not nil).
func (v *v1Sim) ok(method, path, body string, out any) {
	v.t.Helper()
	a := v.call(method, path, body)
	env := v.envelope(a)
	if !env.Success {
		v.t.Fatalf("%s %s: %s", method, path, env.Error)
	}
	if out != nil {
		if err := json.Unmarshal(env.Output, out); err != nil {
			v.t.Fatalf("%s %s: output %s: %v", method, path, env.Output, err)
		}
	}
}

// refused makes an HNSCall that v1's envelope must refuse with the text want.
func (v *v1Sim) refused(method, path, body, want string) {
	v.t.Helper()
	env := v.envelope(v.call(method, path, body))
	if env.Success || env.Error != want {
		v.t.Errorf("%s %s: success %v, error %q; want error %q", method, path, env.Success, env.Error, want)
	}
}

func (v *v1Sim) envelope(a answer) v1Envelope {
	v.t.Helper()
	if a.hr != 0 {
		v.t.Fatalf("HNSCall returned HRESULT 0x%08X (%s)", a.hr, a.record)
	}
	var env v1Envelope
	if err := json.Unmarshal([]byte(a.result), &env); err != nil {
		v.t.Fatalf("envelope %q: %v", a.result, err)
	}
	return env
}

// v2 makes a v2 call that must succeed.
func (v *v1Sim) v2(r request) answer {
	v.t.Helper()
	a := v.s.Call(r)
	if a.hr != 0 {
		v.t.Fatalf("%s: HRESULT 0x%08X %s", r.call, a.hr, a.record)
	}
	return a
}

// v2Query opens, queries and closes an object through the v2 calls.
func (v *v1Sim) v2Query(kind, id string, out any) {
	v.t.Helper()
	h := v.v2(request{call: "HcnOpen" + kind, id: strings.ToLower(id)}).handle
	q := v.v2(request{call: "HcnQuery" + kind + "Properties", handle: h})
	v.v2(request{call: "HcnClose" + kind, handle: h})
	if err := json.Unmarshal([]byte(q.result), out); err != nil {
		v.t.Fatalf("%s %s: %s: %v", kind, id, q.result, err)
	}
}

// The v1 answers as hcsshim's v1 types read them (internal/hns).
type hnsNetwork struct {
	ID                 string
	Name, Type         string
	NetworkAdapterName string
	ManagementIP       string
	DrMacAddress       string
	DNSServerList      string
	Policies           []json.RawMessage
	Subnets            []struct {
		AddressPrefix, GatewayAddress string
		Policies                      []json.RawMessage
	}
}

type hnsEndpoint struct {
	ID, Name                           string
	VirtualNetwork, VirtualNetworkName string
	Policies                           []json.RawMessage
	MacAddress                         string
	IPAddress                          net.IP
	PrefixLength                       uint8
	GatewayAddress                     string
	DNSServerList, DNSSuffix           string
	IsRemoteEndpoint                   bool
	SharedContainers                   []string
	State                              int
}

// TestV1FlannelHostGW: flannel's Windows host-gw (pkg/backend/hostgw/hostgw_windows.go) as
// it talks to HNS v1: no network yet, cbr0 made, its management IP, the bridge endpoint
// made and attached to the host's compartment, which v2 sees in the host's default
// namespace, and a second attach refused with the HRESULT flannel's text match expects;
// then the endpoint detached and both deleted. v2 sees every object v1 made.
func TestV1FlannelHostGW(t *testing.T) {
	v := newV1Sim(t)
	var nets []hnsNetwork
	v.ok("GET", "/networks/", "", &nets)
	if len(nets) != 0 {
		t.Fatalf("networks at start: %+v", nets)
	}
	var n hnsNetwork
	v.ok("POST", "/networks/", `{"Name":"cbr0","Type":"L2Bridge","Subnets":[{"AddressPrefix":"10.244.1.0/24","GatewayAddress":"10.244.1.1"}]}`, &n)
	if n.ID == "" || n.Name != "cbr0" || n.Type != "L2Bridge" || len(n.Subnets) != 1 ||
		n.Subnets[0].AddressPrefix != "10.244.1.0/24" || n.Subnets[0].GatewayAddress != "10.244.1.1" {
		t.Fatalf("created network: %+v", n)
	}
	var got hnsNetwork
	v.ok("GET", "/networks/"+n.ID, "", &got)
	if got.ManagementIP != "192.0.2.10" || got.ID != n.ID {
		t.Errorf("network by ID: %+v, want management IP 192.0.2.10", got)
	}
	v.ok("GET", "/networks/", "", &nets)
	if len(nets) != 1 || nets[0].Name != "cbr0" {
		t.Errorf("networks: %+v", nets)
	}

	// The same network through v2: a Static subnet whose default route is the gateway.
	var v2n windows.HostComputeNetwork
	v.v2Query("Network", n.ID, &v2n)
	sn := v2n.StaticSubnet()
	if v2n.Type != windows.NetworkL2Bridge || sn == nil || sn.IPAddressPrefix != "10.244.1.0/24" ||
		len(sn.Routes) != 1 || sn.Routes[0] != (windows.Route{NextHop: "10.244.1.1", DestinationPrefix: "0.0.0.0/0"}) {
		t.Errorf("v2 network: %+v", v2n)
	}

	var eps []hnsEndpoint
	v.ok("GET", "/endpoints/", "", &eps)
	if len(eps) != 0 {
		t.Fatalf("endpoints at start: %+v", eps)
	}
	var ep hnsEndpoint
	v.ok("POST", "/endpoints/", `{"Name":"cbr0_ep","VirtualNetwork":"`+n.ID+`","IPAddress":"10.244.1.2"}`, &ep)
	if ep.ID == "" || ep.Name != "cbr0_ep" || !strings.EqualFold(ep.VirtualNetwork, n.ID) || ep.VirtualNetworkName != "cbr0" ||
		!ep.IPAddress.Equal(net.ParseIP("10.244.1.2")) || ep.PrefixLength != 24 || ep.GatewayAddress != "10.244.1.1" ||
		ep.MacAddress == "" || ep.State != endpointCreated {
		t.Errorf("created endpoint: %+v", ep)
	}
	v.ok("GET", "/endpoints/", "", &eps)
	if len(eps) != 1 || eps[0].Name != "cbr0_ep" {
		t.Fatalf("endpoints: %+v", eps)
	}

	v.ok("POST", "/endpoints/"+ep.ID+"/attach", `{"SystemType":"Host","CompartmentId":1}`, nil)
	var v2ep windows.HostComputeEndpoint
	v.v2Query("Endpoint", ep.ID, &v2ep)
	ns, err := v.hns.HostDefaultNamespace()
	if err != nil {
		t.Fatalf("host default namespace after HostAttach(1): %v", err)
	}
	if v2ep.HostComputeNamespace != ns.ID || len(ns.Resources) != 1 {
		t.Errorf("v2 endpoint's namespace %q, host default namespace %+v", v2ep.HostComputeNamespace, ns)
	}
	if v2ep.IPConfigurations[0] != (windows.IPConfig{IPAddress: "10.244.1.2", PrefixLength: 24}) {
		t.Errorf("v2 endpoint's address: %+v", v2ep.IPConfigurations)
	}
	if !strings.Contains(v.host.Render(), "vEthernet (cbr0_ep)") || !strings.Contains(v.host.Render(), "10.244.1.2/24") {
		t.Errorf("host after HostAttach:\n%s", v.host.Render())
	}
	v.ok("GET", "/endpoints/"+ep.ID, "", &ep)
	if ep.State != endpointAttached {
		t.Errorf("attached endpoint's state %d", ep.State)
	}
	again := v.call("POST", "/endpoints/"+ep.ID+"/attach", `{"SystemType":"Host","CompartmentId":1}`)
	if windows.HResult(again.hr) != windows.HCNEndpointAlreadyAttached {
		t.Errorf("second HostAttach: HRESULT 0x%08X, result %s; want HCN_E_ENDPOINT_ALREADY_ATTACHED", again.hr, again.result)
	}
	if messageOf(again) != "This endpoint is already attached to the switch." {
		t.Errorf("its text: %q", messageOf(again))
	}

	v.ok("POST", "/endpoints/"+ep.ID+"/detach", `{"SystemType":"Host"}`, nil)
	v2ep = windows.HostComputeEndpoint{}
	v.v2Query("Endpoint", ep.ID, &v2ep)
	if v2ep.HostComputeNamespace != "" || strings.Contains(v.host.Render(), "cbr0_ep") {
		t.Errorf("after HostDetach: namespace %q, host:\n%s", v2ep.HostComputeNamespace, v.host.Render())
	}
	if a := v.call("POST", "/endpoints/"+ep.ID+"/detach", `{"SystemType":"Host"}`); windows.HResult(a.hr) != hcnEndpointNotAttached {
		t.Errorf("second HostDetach: HRESULT 0x%08X", a.hr)
	}

	v.ok("DELETE", "/endpoints/"+ep.ID, "", nil)
	v.refused("GET", "/endpoints/"+ep.ID, "", "The endpoint was not found.")
	v.ok("DELETE", "/networks/"+n.ID, "", nil)
	v.refused("GET", "/networks/"+n.ID, "", "The network was not found.")
	if all, _ := v.hns.Networks(); len(all) != 0 {
		t.Errorf("networks left: %+v", all)
	}
}

// TestV1SeesV2: a network and endpoints made through v2 (weftd's overlay network, a remote
// endpoint) as v1 lists them: the adapter, DR MAC and management IP as v1's own fields, the
// subnet's gateway and its VSID policy in v1's form, the endpoint's provider address as a
// PA policy; and a v1 lookup by the v2 endpoint's ID.
func TestV1SeesV2(t *testing.T) {
	v := newV1Sim(t)
	made := v.v2(request{call: "HcnCreateNetwork", a: overlay})
	v.v2(request{call: "HcnCreateEndpoint", handle: made.handle, a: `{"Name":"remote","Flags":1,"IpConfigurations":[{"IpAddress":"10.244.2.5"}],` +
		`"Policies":[{"Type":"ProviderAddress","Settings":{"ProviderAddress":"192.0.2.11"}}],"SchemaVersion":{"Major":2,"Minor":0}}`})
	var nets []hnsNetwork
	v.ok("GET", "/networks/", "", &nets)
	if len(nets) != 1 {
		t.Fatalf("networks: %+v", nets)
	}
	n := nets[0]
	if n.Name != "flannel.4096" || n.Type != "Overlay" || n.NetworkAdapterName != "Ethernet" || n.ManagementIP != "192.0.2.10" ||
		!strings.HasPrefix(n.DrMacAddress, "00-15-5D-") || len(n.Policies) != 0 {
		t.Errorf("network: %+v", n)
	}
	if len(n.Subnets) != 1 || n.Subnets[0].GatewayAddress != "10.244.1.1" || len(n.Subnets[0].Policies) != 1 ||
		hnstest.CanonicalJSON(n.Subnets[0].Policies[0]) != `{"Type":"VSID","VSID":4096}` {
		t.Errorf("subnets: %+v", n.Subnets)
	}
	var eps []hnsEndpoint
	v.ok("GET", "/endpoints/", "", &eps)
	if len(eps) != 1 || !eps[0].IsRemoteEndpoint || eps[0].VirtualNetworkName != "flannel.4096" || len(eps[0].Policies) != 1 ||
		hnstest.CanonicalJSON(eps[0].Policies[0]) != `{"PA":"192.0.2.11","Type":"PA"}` || eps[0].PrefixLength != 0 {
		t.Fatalf("endpoints: %+v", eps)
	}
	var one hnsEndpoint
	v.ok("GET", "/endpoints/"+strings.ToLower(eps[0].ID), "", &one)
	if one.ID != eps[0].ID || one.Name != "remote" {
		t.Errorf("endpoint by lower-case ID: %+v", one)
	}
}

// TestV1EndpointRequests: endpoints as containernetworking/plugins' v1 path (win-overlay,
// win-bridge with apiVersion 1) and HNS-assigned-network callers write them: v1 policies
// reach v2 in v2's form, DNS lists split, the gateway as the default route, a network named
// rather than given by ID (hcsshim issue 1746); and what HNS refuses.
func TestV1EndpointRequests(t *testing.T) {
	v := newV1Sim(t)
	made := v.v2(request{call: "HcnCreateNetwork", a: overlay})
	v.v2(request{call: "HcnCloseNetwork", handle: made.handle})
	nets, _ := v.hns.Networks()
	netID := nets[0].ID

	var ep hnsEndpoint
	v.ok("POST", "/endpoints/", `{"Name":"pod_flannel.4096","VirtualNetwork":"`+netID+`","DNSServerList":"10.96.0.10","DNSSuffix":"svc.cluster.local,cluster.local",`+
		`"GatewayAddress":"10.244.1.1","IPAddress":"10.244.1.7","MacAddress":"0E-2A-0a-f4-01-07","Policies":[`+
		`{"Type":"OutBoundNAT","ExceptionList":["10.244.0.0/16","10.96.0.0/12"]},`+
		`{"Type":"ROUTE","DestinationPrefix":"10.96.0.0/12","NeedEncap":true},`+
		`{"Type":"PA","PA":"192.0.2.10"},`+
		`{"Type":"NAT","InternalPort":80,"ExternalPort":8080,"Protocol":"TCP"}]}`, &ep)
	var v2ep struct {
		Policies []policy
		Dns      v2DNS //nolint:revive // HNS's spelling
	}
	v.v2Query("Endpoint", ep.ID, &v2ep)
	want := []string{
		`{"Settings":{"Exceptions":["10.244.0.0/16","10.96.0.0/12"]},"Type":"OutBoundNAT"}`,
		`{"Settings":{"DestinationPrefix":"10.96.0.0/12","NeedEncap":true},"Type":"SDNRoute"}`,
		`{"Settings":{"ProviderAddress":"192.0.2.10"},"Type":"ProviderAddress"}`,
		`{"Settings":{"ExternalPort":8080,"InternalPort":80,"Protocol":6},"Type":"PortMapping"}`,
	}
	if len(v2ep.Policies) != len(want) {
		t.Fatalf("v2 policies: %+v", v2ep.Policies)
	}
	for i, p := range v2ep.Policies {
		if got := hnstest.CanonicalJSON(mustJSON(p)); got != want[i] {
			t.Errorf("v2 policy %d: %s, want %s", i, got, want[i])
		}
	}
	if strings.Join(v2ep.Dns.Search, " ") != "svc.cluster.local cluster.local" || strings.Join(v2ep.Dns.ServerList, " ") != "10.96.0.10" {
		t.Errorf("v2 DNS: %+v", v2ep.Dns)
	}
	// And back in v1's form, as the create answered them.
	wantV1 := []string{
		`{"ExceptionList":["10.244.0.0/16","10.96.0.0/12"],"Type":"OutBoundNAT"}`,
		`{"DestinationPrefix":"10.96.0.0/12","NeedEncap":true,"Type":"ROUTE"}`,
		`{"PA":"192.0.2.10","Type":"PA"}`,
		`{"ExternalPort":8080,"InternalPort":80,"Protocol":"TCP","Type":"NAT"}`,
	}
	for i, p := range ep.Policies {
		if got := hnstest.CanonicalJSON(p); i >= len(wantV1) || got != wantV1[i] {
			t.Errorf("v1 policy %d: %s", i, got)
		}
	}
	if ep.DNSSuffix != "svc.cluster.local,cluster.local" || ep.DNSServerList != "10.96.0.10" || ep.GatewayAddress != "10.244.1.1" ||
		ep.MacAddress != "0E-2A-0a-f4-01-07" {
		t.Errorf("endpoint: %+v", ep)
	}

	// A network named, not given by ID.
	var named hnsEndpoint
	v.ok("POST", "/endpoints/", `{"Name":"named","VirtualNetworkName":"flannel.4096","IPAddress":"10.244.1.8"}`, &named)
	if !strings.EqualFold(named.VirtualNetwork, netID) || named.PrefixLength != 24 {
		t.Errorf("endpoint of a named network: %+v", named)
	}

	for _, c := range []struct{ name, body, want string }{
		{"no such network", `{"Name":"x","VirtualNetworkName":"cbr0","IPAddress":"10.244.1.9"}`, "The network was not found."},
		{"a field hcsshim's type lacks", `{"Name":"x","VirtualNetwork":"` + netID + `","IpAddress":"10.244.1.9","Vni":1}`, "Invalid JSON document string."},
		{"a policy that is not an object", `{"Name":"x","VirtualNetwork":"` + netID + `","IPAddress":"10.244.1.9","Policies":["PA"]}`, "Invalid JSON document string."},
		{"an address outside the subnet", `{"Name":"x","VirtualNetwork":"` + netID + `","IPAddress":"10.9.9.9"}`, "IP address is either invalid or not part of any configured subnet(s)."},
		{"an address taken", `{"Name":"x","VirtualNetwork":"` + netID + `","IPAddress":"10.244.1.7"}`, "An address provided is invalid or reserved."},
		{"the namespace, HNS's to report", `{"Name":"x","VirtualNetwork":"` + netID + `","IPAddress":"10.244.1.9","Namespace":{"ID":"a"}}`, "Invalid JSON document string."},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := *v
			w.t = t
			w.refused("POST", "/endpoints/", c.body, c.want)
		})
	}
}

// TestV1NetworkRequests: what v1's network create refuses, each with the text of HNS's code
// in the envelope (docker's "HNS failed with error : The parameter is incorrect."), and
// paths it does not simulate.
func TestV1NetworkRequests(t *testing.T) {
	v := newV1Sim(t)
	for _, c := range []struct{ name, method, path, body, want string }{
		{"a type HNS lacks", "POST", "/networks/", `{"Name":"x","Type":"Bogus","Subnets":[{"AddressPrefix":"10.1.0.0/24","GatewayAddress":"10.1.0.1"}]}`, "Invalid network type."},
		{"no name", "POST", "/networks/", `{"Type":"L2Bridge","Subnets":[{"AddressPrefix":"10.1.0.0/24","GatewayAddress":"10.1.0.1"}]}`, "The parameter is incorrect."},
		{"not JSON", "POST", "/networks/", `{"Name":`, "Invalid JSON document string."},
		{"a field hcsshim's type lacks", "POST", "/networks/", `{"Name":"x","Type":"L2Bridge","Ipams":[]}`, "Invalid JSON document string."},
		{"a management IP, HNS's to report", "POST", "/networks/", `{"Name":"x","Type":"L2Bridge","ManagementIP":"192.0.2.3","Subnets":[{"AddressPrefix":"10.1.0.0/24","GatewayAddress":"10.1.0.1"}]}`, "Invalid JSON document string."},
		{"a source MAC, not simulated", "POST", "/networks/", `{"Name":"x","Type":"L2Bridge","SourceMac":"00-15-5D-00-00-01","Subnets":[{"AddressPrefix":"10.1.0.0/24","GatewayAddress":"10.1.0.1"}]}`, "Invalid JSON document string."},
		{"an adapter the host lacks", "POST", "/networks/", `{"Name":"x","Type":"L2Bridge","NetworkAdapterName":"Ethernet 9","Subnets":[{"AddressPrefix":"10.1.0.0/24","GatewayAddress":"10.1.0.1"}]}`, "An adapter was not found."},
		{"an unknown network", "GET", "/networks/00000000-0000-4000-8000-0000000000ff", "", "The network was not found."},
		{"delete an unknown network", "DELETE", "/networks/00000000-0000-4000-8000-0000000000ff", "", "The network was not found."},
		{"an unknown path", "GET", "/loadbalancers/", "", "GET /loadbalancers/ is not simulated"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := *v
			w.t = t
			w.refused(c.method, c.path, c.body, c.want)
		})
	}
	var n hnsNetwork
	v.ok("POST", "/networks/", `{"Name":"x","Type":"L2Bridge","DNSServerList":"10.96.0.10,10.96.0.11","Subnets":[{"AddressPrefix":"10.1.0.0/24","GatewayAddress":"10.1.0.1"}]}`, &n)
	if n.DNSServerList != "10.96.0.10,10.96.0.11" {
		t.Errorf("DNS servers: %q", n.DNSServerList)
	}
	v.refused("POST", "/networks/", `{"Name":"x","Type":"L2Bridge","Subnets":[{"AddressPrefix":"10.2.0.0/24","GatewayAddress":"10.2.0.1"}]}`, "A network with this name already exists.")

	// A stopped HNS fails the call itself, as it does the version's.
	v.hns.Stop()
	if a := v.call("GET", "/networks/", ""); windows.HResult(a.hr) != windows.HCNManagerStopped {
		t.Errorf("list while stopped: HRESULT 0x%08X %s", a.hr, a.result)
	}
}

// TestV1Schema: documents of hcsshim's v1 types handed to HcnCreateNetwork and
// HcnCreateEndpoint (hcsshim hcn/hcnv1schema_test.go) are made; v2 reads them in its own
// schema; a v1 document the v1 schema refuses, or an endpoint naming another network than
// the handle's, answers HCN_E_INVALID_JSON.
func TestV1Schema(t *testing.T) {
	v := newV1Sim(t)
	made := v.v2(request{call: "HcnCreateNetwork", a: `{"Name":"v1net","Type":"L2Bridge","MacPools":[{"StartMacAddress":"00-15-5D-52-C0-00","EndMacAddress":"00-15-5D-52-CF-FF"}],` +
		`"Subnets":[{"AddressPrefix":"192.168.100.0/24","GatewayAddress":"192.168.100.1"}]}`})
	var n windows.HostComputeNetwork
	v.v2(request{call: "HcnQueryNetworkProperties", handle: made.handle})
	nets, _ := v.hns.Networks()
	if len(nets) != 1 {
		t.Fatalf("networks: %+v", nets)
	}
	v.v2Query("Network", nets[0].ID, &n)
	if sn := n.StaticSubnet(); sn == nil || sn.IPAddressPrefix != "192.168.100.0/24" || len(n.MacPool.Ranges) != 1 {
		t.Errorf("v2 view of a v1 network: %+v", n)
	}
	ep := v.v2(request{call: "HcnCreateEndpoint", handle: made.handle, a: `{"Name":"v1ep","VirtualNetwork":"` + n.ID + `","IPAddress":"192.168.100.5"}`})
	q := v.v2(request{call: "HcnQueryEndpointProperties", handle: ep.handle})
	var e windows.HostComputeEndpoint
	if err := json.Unmarshal([]byte(q.result), &e); err != nil || e.Name != "v1ep" || e.HostComputeNetwork != n.ID || e.IP() != netip.MustParseAddr("192.168.100.5") ||
		e.IPConfigurations[0].PrefixLength != 24 {
		t.Errorf("v2 view of a v1 endpoint: %s %v", q.result, err)
	}
	for _, bad := range []request{
		{call: "HcnCreateNetwork", a: `{"Name":"v1bad","Type":"L2Bridge","Vni":1}`},
		{call: "HcnCreateEndpoint", handle: made.handle, a: `{"Name":"v1other","VirtualNetwork":"00000000-0000-4000-8000-0000000000ff","IPAddress":"192.168.100.6"}`},
		{call: "HcnCreateEndpoint", handle: made.handle, a: `{"Name":"v1other","VirtualNetworkName":"cbr0","IPAddress":"192.168.100.6"}`},
		{call: "HcnCreateEndpoint", handle: made.handle, a: `{"Name":"v1dns","EnableInternalDNS":true}`},
	} {
		if a := v.s.Call(bad); windows.HResult(a.hr) != windows.HCNInvalidJSON {
			t.Errorf("%s %s: HRESULT 0x%08X, want HCN_E_INVALID_JSON", bad.call, bad.a, a.hr)
		}
	}
	// A v2 document is still read by v2's schema: without Ipams' Routes hcn's check refuses it.
	v2doc := v.s.Call(request{call: "HcnCreateNetwork", a: `{"Name":"v2","Type":"L2Bridge","Ipams":[{"Type":"Static","Subnets":[{"IpAddressPrefix":"10.3.0.0/24"}]}],"SchemaVersion":{"Major":2,"Minor":0}}`})
	if v2doc.hr == 0 {
		t.Error("a v2 subnet without a default route was made")
	}
}

// TestV1Attach: container attachments as HNS v1 keeps them (SharedContainers, which
// hcsshim's IsAttached reads), attach requests HNS refuses, and the compartments HostAttach
// takes: the host's (1, into the HostDefault namespace there is), a namespace's by its ID,
// none other.
func TestV1Attach(t *testing.T) {
	v := newV1Sim(t)
	var n hnsNetwork
	v.ok("POST", "/networks/", `{"Name":"cbr0","Type":"L2Bridge","Subnets":[{"AddressPrefix":"10.244.1.0/24","GatewayAddress":"10.244.1.1"}]}`, &n)
	var ep hnsEndpoint
	v.ok("POST", "/endpoints/", `{"Name":"a","VirtualNetwork":"`+n.ID+`","IPAddress":"10.244.1.5"}`, &ep)
	attach := func(sub, body string) answer { return v.call("POST", "/endpoints/"+ep.ID+"/"+sub, body) }

	v.ok("POST", "/endpoints/"+ep.ID+"/attach", `{"ContainerId":"c1","SystemType":"Container"}`, nil)
	v.ok("GET", "/endpoints/"+ep.ID, "", &ep)
	if len(ep.SharedContainers) != 1 || ep.SharedContainers[0] != "c1" || ep.State != endpointAttached {
		t.Errorf("after ContainerAttach: %+v", ep)
	}
	for _, c := range []struct {
		name, sub, body string
		want            windows.HResult
	}{
		{"the same container again", "attach", `{"ContainerId":"C1","SystemType":"Container"}`, windows.HCNEndpointAlreadyAttached},
		{"detach a container never attached", "detach", `{"ContainerId":"c2","SystemType":"Container"}`, hcnEndpointNotAttached},
		{"a container with no ID", "attach", `{"SystemType":"Container"}`, windows.InvalidArg},
		{"a system type HNS lacks", "attach", `{"SystemType":"Pod"}`, windows.InvalidArg},
		{"no system type", "attach", `{"CompartmentId":1}`, windows.InvalidArg},
		{"a field HNS's request lacks", "attach", `{"SystemType":"Host","Compartment":1}`, windows.HCNInvalidJSON},
		{"a virtual machine NIC", "attach", `{"SystemType":"VirtualMachine","VirtualNicName":"n"}`, windows.NotImpl},
		{"a compartment no namespace has", "attach", `{"SystemType":"Host","CompartmentId":7}`, gcnNetCompartmentNotFound},
	} {
		if a := attach(c.sub, c.body); windows.HResult(a.hr) != c.want {
			t.Errorf("%s: HRESULT 0x%08X, want %v", c.name, a.hr, c.want)
		}
	}
	if a := v.call("POST", "/endpoints/00000000-0000-4000-8000-0000000000ff/attach", `{"SystemType":"Host","CompartmentId":1}`); windows.HResult(a.hr) != windows.HCNEndpointNotFound {
		t.Errorf("attach an unknown endpoint: HRESULT 0x%08X", a.hr)
	}
	v.ok("POST", "/endpoints/"+ep.ID+"/detach", `{"ContainerId":"c1","SystemType":"Container"}`, nil)
	ep = hnsEndpoint{ID: ep.ID}
	v.ok("GET", "/endpoints/"+ep.ID, "", &ep)
	if len(ep.SharedContainers) != 0 || ep.State != endpointCreated {
		t.Errorf("after ContainerDetach: %+v", ep)
	}

	// The host default namespace weftd made is the one HostAttach(1) uses.
	hd := v.v2(request{call: "HcnCreateNamespace", a: `{"Type":"HostDefault","SchemaVersion":{"Major":2,"Minor":0}}`})
	v.v2(request{call: "HcnCloseNamespace", handle: hd.handle})
	v.ok("POST", "/endpoints/"+ep.ID+"/attach", `{"SystemType":"Host","CompartmentId":1}`, nil)
	nss, _ := v.hns.Namespaces()
	if len(nss) != 1 || len(nss[0].Resources) != 1 {
		t.Errorf("namespaces after HostAttach(1): %+v", nss)
	}
	v.ok("POST", "/endpoints/"+ep.ID+"/detach", `{"SystemType":"Host"}`, nil)
	// A namespace of its own compartment.
	c5 := v.v2(request{call: "HcnCreateNamespace", a: `{"Type":"Host","NamespaceId":5,"SchemaVersion":{"Major":2,"Minor":0}}`})
	v.v2(request{call: "HcnCloseNamespace", handle: c5.handle})
	v.ok("POST", "/endpoints/"+ep.ID+"/attach", `{"SystemType":"Host","CompartmentId":5}`, nil)
	var v2ep windows.HostComputeEndpoint
	v.v2Query("Endpoint", ep.ID, &v2ep)
	nss, _ = v.hns.Namespaces()
	if len(nss) != 2 || v2ep.HostComputeNamespace != nss[1].ID {
		t.Errorf("attached to compartment 5: namespace %q, namespaces %+v", v2ep.HostComputeNamespace, nss)
	}
	// Deleting the endpoint forgets its v1 state with it.
	v.ok("POST", "/endpoints/"+ep.ID+"/attach", `{"ContainerId":"c3","SystemType":"Container"}`, nil)
	v.ok("DELETE", "/endpoints/"+ep.ID, "", nil)
	if c := v.s.sharedContainers(ep.ID); len(c) != 0 {
		t.Errorf("containers of a deleted endpoint: %v", c)
	}
}

// TestV1StatsAndAccelNet: an endpoint's counters (hcsshim's GetHNSEndpointStats) and the
// accelerated networking management MAC list, set, read and deleted as hcsshim's
// hnsv1_test.go does.
func TestV1StatsAndAccelNet(t *testing.T) {
	v := newV1Sim(t)
	var n hnsNetwork
	v.ok("POST", "/networks/", `{"Name":"cbr0","Type":"L2Bridge","Subnets":[{"AddressPrefix":"10.244.1.0/24","GatewayAddress":"10.244.1.1"}]}`, &n)
	var ep hnsEndpoint
	v.ok("POST", "/endpoints/", `{"Name":"a","VirtualNetwork":"`+n.ID+`","IPAddress":"10.244.1.5"}`, &ep)
	var stats struct {
		EndpointId string //nolint:revive // HNS's spelling
		BytesSent  uint64
	}
	v.ok("GET", "/endpointstats/"+ep.ID, "", &stats)
	if stats.EndpointId != ep.ID {
		t.Errorf("stats: %+v", stats)
	}
	v.refused("GET", "/endpointstats/00000000-0000-4000-8000-0000000000ff", "", "The endpoint was not found.")

	var l v1MACList
	v.ok("POST", "/accelnet/", `{"MacAddressList":[{"MacAddress":"00-15-5D-0A-B7-C6"},{"MacAddress":"00-15-5D-38-01-00"}]}`, &l)
	if len(l.MacAddressList) != 2 {
		t.Errorf("set: %+v", l)
	}
	l = v1MACList{}
	v.ok("GET", "/accelnet/", "", &l)
	if len(l.MacAddressList) != 2 || l.MacAddressList[1].MacAddress != "00-15-5D-38-01-00" {
		t.Errorf("get: %+v", l)
	}
	v.ok("DELETE", "/accelnet/", "", &l)
	l = v1MACList{}
	v.ok("GET", "/accelnet/", "", &l)
	if len(l.MacAddressList) != 0 {
		t.Errorf("get after delete: %+v", l)
	}
	v.refused("POST", "/accelnet/", `{"MacAddresses":[]}`, "Invalid JSON document string.")
}

// TestV1Policies: the v1 and v2 forms of each policy, both ways.
func TestV1Policies(t *testing.T) {
	for _, c := range []struct{ v1, v2 string }{
		{`{"PA":"192.0.2.1","Type":"PA"}`, `{"Settings":{"ProviderAddress":"192.0.2.1"},"Type":"ProviderAddress"}`},
		{`{"Type":"VSID","VSID":4096}`, `{"Settings":{"IsolationId":4096},"Type":"VSID"}`},
		{`{"Type":"VLAN","VLAN":7}`, `{"Settings":{"IsolationId":7},"Type":"VLAN"}`},
		{`{"ExceptionList":["10.0.0.0/8"],"Type":"OutBoundNAT","VIP":"192.0.2.9"}`, `{"Settings":{"Exceptions":["10.0.0.0/8"],"VirtualIP":"192.0.2.9"},"Type":"OutBoundNAT"}`},
		{`{"Destinations":["10.244.1.7"],"Type":"OutBoundNAT"}`, `{"Settings":{"Destinations":["10.244.1.7"]},"Type":"OutBoundNAT"}`},
		{`{"DestinationPrefix":"10.96.0.0/12","NeedEncap":true,"Type":"ROUTE"}`, `{"Settings":{"DestinationPrefix":"10.96.0.0/12","NeedEncap":true},"Type":"SDNRoute"}`},
		{`{"ExternalPort":80,"InternalPort":8080,"Protocol":"UDP","Type":"NAT"}`, `{"Settings":{"ExternalPort":80,"InternalPort":8080,"Protocol":17},"Type":"PortMapping"}`},
		{`{"MaximumOutgoingBandwidthInBytes":1000,"Type":"QOS"}`, `{"Settings":{"MaximumOutgoingBandwidthInBytes":1000},"Type":"QOS"}`},
		{`{"Type":"HostRoute"}`, `{"Settings":{},"Type":"HostRoute"}`},
	} {
		got, err := v2PolicyOf(json.RawMessage(c.v1))
		if err != nil || hnstest.CanonicalJSON(got) != c.v2 {
			t.Errorf("v2 of %s: %s %v, want %s", c.v1, got, err, c.v2)
		}
		var p policy
		if err := json.Unmarshal([]byte(c.v2), &p); err != nil {
			t.Fatal(err)
		}
		if back := hnstest.CanonicalJSON(v1PolicyOf(p)); back != c.v1 {
			t.Errorf("v1 of %s: %s, want %s", c.v2, back, c.v1)
		}
	}
	for _, bad := range []string{`"PA"`, `{"PA":"x"}`, `{"Type":""}`, `{"Type":"NAT","Protocol":"SCTPX"}`} {
		if _, err := v2PolicyOf(json.RawMessage(bad)); err == nil {
			t.Errorf("v2 of %s: no error", bad)
		}
	}
}

// TestV1CallLog: HNSCall is logged with its method and request, and tells a change from a
// read.
func TestV1CallLog(t *testing.T) {
	hns := hnstest.New(hnstest.Options{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := New(hns, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go func() { _ = s.Serve(l) }()
	body := `{"Name":"cbr0","Type":"L2Bridge","Subnets":[{"AddressPrefix":"10.244.1.0/24","GatewayAddress":"10.244.1.1"}]}`
	dial(t, l.Addr().String(), request{call: "HNSCall", id: "/networks/", a: "GET"})
	dial(t, l.Addr().String(), request{call: "HNSCall", id: "/networks/", a: "POST", b: body})
	got := s.Calls()
	want := []Call{{Name: "HNSCall", Method: "GET", ID: "/networks/"}, {Name: "HNSCall", Method: "POST", ID: "/networks/", Body: body}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("calls: %+v, want %+v", got, want)
	}
	if got[0].Mutates() || !got[1].Mutates() {
		t.Errorf("mutates: GET %v, POST %v", got[0].Mutates(), got[1].Mutates())
	}
}
