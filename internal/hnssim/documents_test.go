package hnssim

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"

	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

// serve starts a server of hns and returns a caller over the wire that fails the test on
// any refusal unless the caller wants one (want != 0).
func serve(t *testing.T, hns *hnstest.HNS) func(r request, want windows.HResult) answer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() { _ = New(hns, slog.New(slog.NewTextHandler(io.Discard, nil))).Serve(l) }()
	return func(r request, want windows.HResult) answer {
		t.Helper()
		a := dial(t, l.Addr().String(), r)
		if windows.HResult(a.hr) != want {
			t.Fatalf("%s %s: HRESULT 0x%08X, want %v (record %s)", r.call, r.a, a.hr, want, a.record)
		}
		return a
	}
}

const natDoc = `{"Name":"GoTestNat","Type":"NAT","MacPool":{"Ranges":[{"StartMacAddress":"00-15-5D-52-C0-00","EndMacAddress":"00-15-5D-52-CF-FF"}]},
 "Dns":{},"Ipams":[{"Type":"Static","Subnets":[{"IpAddressPrefix":"192.168.100.0/24","Routes":[{"NextHop":"192.168.100.1","DestinationPrefix":"0.0.0.0/0"}]}]}],
 "Flags":8,"Health":{},"SchemaVersion":{"Major":2,"Minor":0}}`

// TestEcho: a query answers what the create carried (an endpoint's Routes and Dns, as the
// win-overlay and win-bridge plugins read them back) with what HNS gave the object (its
// ID, network, address, MAC); listings filter by fields of any JSON type.
func TestEcho(t *testing.T) {
	call := serve(t, hnstest.New(hnstest.Options{Version: windows.Version{Major: 15, Minor: 4}}))
	n := call(request{call: "HcnCreateNetwork", a: natDoc}, 0)
	ep := call(request{call: "HcnCreateEndpoint", handle: n.handle, a: `{"Name":"pod","SchemaVersion":{"Major":2,"Minor":0},
		"Routes":[{"NextHop":"192.168.100.1","DestinationPrefix":"0.0.0.0/0"}],"Dns":{"ServerList":["10.96.0.10"]},
		"Policies":[{"Type":"OutBoundNAT","Settings":{"Exceptions":["10.244.0.0/16"]}}]}`}, 0)
	var got struct {
		ID, HostComputeNetwork, MacAddress string
		IpConfigurations                   []windows.IPConfig //nolint:revive // HNS's spelling
		Routes                             []windows.Route
		Dns                                windows.DNS //nolint:revive // HNS's spelling
		Policies                           []windows.Policy
	}
	q := `{"SchemaVersion":{"Major":2,"Minor":0}}`
	a := call(request{call: "HcnQueryEndpointProperties", handle: ep.handle, a: q}, 0)
	if err := json.Unmarshal([]byte(a.result), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Routes) != 1 || got.Routes[0].NextHop != "192.168.100.1" {
		t.Errorf("routes %+v, want the request's", got.Routes)
	}
	if !slices.Equal(got.Dns.ServerList, []string{"10.96.0.10"}) || len(got.Policies) != 1 {
		t.Errorf("Dns %+v, policies %+v: want the request's", got.Dns, got.Policies)
	}
	if got.ID == "" || got.HostComputeNetwork == "" || got.MacAddress == "" ||
		!slices.Equal(got.IpConfigurations, []windows.IPConfig{{IPAddress: "192.168.100.2", PrefixLength: 24}}) {
		t.Errorf("answer %s: want HNS's ID, network, MAC and address 192.168.100.2/24", a.result)
	}

	// Policies are the model's: removed ones do not come back from the document.
	mod := `{"ResourceType":"Policy","RequestType":"Remove","Settings":{"Policies":[{"Type":"OutBoundNAT","Settings":{"Exceptions":["10.244.0.0/16"]}}]}}`
	call(request{call: "HcnModifyEndpoint", handle: ep.handle, a: mod}, 0)
	a = call(request{call: "HcnQueryEndpointProperties", handle: ep.handle, a: q}, 0)
	got.Policies = nil
	if err := json.Unmarshal([]byte(a.result), &got); err != nil || len(got.Policies) != 0 {
		t.Errorf("after removing the policy: %s", a.result)
	}

	for _, tc := range []struct {
		call, filter string
		want         int
	}{
		{"HcnEnumerateNetworks", `{"Flags":8}`, 1},
		{"HcnEnumerateNetworks", `{"Flags":9}`, 0},
		{"HcnEnumerateNetworks", `{"name":"gotestnat","SchemaVersion":{"Minor":0,"Major":2}}`, 1},
		{"HcnEnumerateEndpoints", `{"VirtualNetwork":"` + got.HostComputeNetwork + `"}`, 1},
		{"HcnEnumerateEndpoints", `{"Routes":[{"DestinationPrefix":"0.0.0.0/0","NextHop":"192.168.100.1"}]}`, 1},
		{"HcnEnumerateEndpoints", `{"Routes":[]}`, 0},
	} {
		filter, _ := json.Marshal(tc.filter)
		a := call(request{call: tc.call, a: `{"SchemaVersion":{"Major":2,"Minor":0},"Filter":` + string(filter) + `}`}, 0)
		var ids []string
		if err := json.Unmarshal([]byte(a.result), &ids); err != nil || len(ids) != tc.want {
			t.Errorf("%s %s: %s, want %d", tc.call, tc.filter, a.result, tc.want)
		}
	}
}

// TestNamespaceOfContainerd: the namespace containerd makes (HostComputeNamespace{}) is a
// Host namespace; HcnDeleteNamespace removes it.
func TestNamespaceOfContainerd(t *testing.T) {
	call := serve(t, hnstest.New(hnstest.Options{}))
	ns := call(request{call: "HcnCreateNamespace", a: `{"SchemaVersion":{"Major":0,"Minor":0}}`}, 0)
	a := call(request{call: "HcnQueryNamespaceProperties", handle: ns.handle, a: `{"SchemaVersion":{"Major":2,"Minor":0}}`}, 0)
	var got struct{ ID, Type string }
	if err := json.Unmarshal([]byte(a.result), &got); err != nil || got.Type != "Host" {
		t.Fatalf("containerd's namespace: %s, want type Host", a.result)
	}
	call(request{call: "HcnDeleteNamespace", id: got.ID}, 0)
	call(request{call: "HcnOpenNamespace", id: got.ID}, windows.ElementNotFound)
	call(request{call: "HcnDeleteNamespace", id: got.ID}, windows.ElementNotFound)
}

// TestStandalone: SDN routes and load balancers as hcsshim makes and changes them.
func TestStandalone(t *testing.T) {
	hns := hnstest.New(hnstest.Options{Version: windows.Version{Major: 15, Minor: 3}})
	call := serve(t, hns)
	n := call(request{call: "HcnCreateNetwork", a: natDoc}, 0)
	ep := call(request{call: "HcnCreateEndpoint", handle: n.handle, a: `{"Name":"a","SchemaVersion":{"Major":2,"Minor":0}}`}, 0)
	var e struct{ ID string }
	if err := json.Unmarshal([]byte(call(request{call: "HcnQueryEndpointProperties", handle: ep.handle}, 0).result), &e); err != nil {
		t.Fatal(err)
	}
	route := `{"HostComputeEndpoints":["` + e.ID + `"],"Setting":[{"DestinationPrefix":"169.254.169.254/24","NextHop":"127.10.0.34"}],"SchemaVersion":{"Major":2,"Minor":0}}`
	r := call(request{call: "HcnCreateSdnRoute", a: route}, 0)
	var got struct {
		ID                   string
		HostComputeEndpoints []string
	}
	if err := json.Unmarshal([]byte(call(request{call: "HcnQuerySdnRouteProperties", handle: r.handle}, 0).result), &got); err != nil || got.ID == "" || len(got.HostComputeEndpoints) != 1 {
		t.Fatalf("route: %+v, %v", got, err)
	}
	// hcsshim's AddEndpoint: delete, and create again under the same ID.
	call(request{call: "HcnDeleteSdnRoute", id: got.ID}, 0)
	call(request{call: "HcnOpenSdnRoute", id: got.ID}, windows.ElementNotFound)
	again := call(request{call: "HcnCreateSdnRoute", a: `{"ID":"` + got.ID + `",` + route[1:]}, 0)
	var g2 struct{ ID string }
	if err := json.Unmarshal([]byte(call(request{call: "HcnQuerySdnRouteProperties", handle: again.handle}, 0).result), &g2); err != nil || g2.ID != got.ID {
		t.Errorf("re-created route %s, want ID %s", g2.ID, got.ID)
	}
	call(request{call: "HcnCreateSdnRoute", a: `{"ID":"` + got.ID + `",` + route[1:]}, windows.InvalidArg)
	call(request{call: "HcnCreateSdnRoute", a: `{"HostComputeEndpoints":["5f0b1190-63be-4e0c-b974-bd0f55675a42"],"SchemaVersion":{"Major":2,"Minor":0}}`}, windows.HCNEndpointNotFound)
	call(request{call: "HcnModifySdnRoute", handle: again.handle, a: route}, windows.NotImpl)

	lb := `{"HostComputeEndpoints":["` + e.ID + `"],"SourceVIP":"10.0.0.1","FrontendVIPs":["1.1.1.2"],"PortMappings":[{"Protocol":6,"InternalPort":8080,"ExternalPort":80}],"SchemaVersion":{"Major":2,"Minor":0}}`
	l := call(request{call: "HcnCreateLoadBalancer", a: lb}, 0)
	call(request{call: "HcnModifyLoadBalancer", handle: l.handle, a: lb}, windows.HCNRequestUnsupported) // 15.4's
	hns.SetVersion(windows.Version{Major: 10, Minor: 1})
	call(request{call: "HcnCreateLoadBalancer", a: `{"Flags":1,` + lb[1:]}, windows.HCNRequestUnsupported) // DSR: 10.2's
	hns.SetVersion(windows.Version{Major: 15, Minor: 4})
	call(request{call: "HcnModifyLoadBalancer", handle: l.handle, a: `{"HostComputeEndpoints":[],` + lb[len(`{"HostComputeEndpoints":["`+e.ID+`"],`):]}, 0)
	var lbGot struct {
		ID                   string
		HostComputeEndpoints []string
	}
	if err := json.Unmarshal([]byte(call(request{call: "HcnQueryLoadBalancerProperties", handle: l.handle}, 0).result), &lbGot); err != nil || lbGot.ID == "" || len(lbGot.HostComputeEndpoints) != 0 {
		t.Errorf("load balancer after its update: %+v, %v", lbGot, err)
	}
	var ids []string
	if err := json.Unmarshal([]byte(call(request{call: "HcnEnumerateLoadBalancers", a: `{"SchemaVersion":{"Major":2,"Minor":0},"Filter":"{\"SourceVIP\":\"10.0.0.1\"}"}`}, 0).result), &ids); err != nil || len(ids) != 1 {
		t.Errorf("load balancers of source VIP 10.0.0.1: %v, %v", ids, err)
	}
}
