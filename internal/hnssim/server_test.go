package hnssim

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

// dial makes one call over the wire, as a DLL does.
func dial(t *testing.T, addr string, r request) answer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := writeFrame(c, r.call, r.id, strconv.FormatUint(r.handle, 10), r.a, r.b); err != nil {
		t.Fatal(err)
	}
	b, err := readFrame(c)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.SplitN(string(b), "\x00", 4)
	if len(f) != 4 {
		t.Fatalf("answer of %d fields", len(f))
	}
	hr, _ := strconv.ParseUint(f[0], 10, 32)
	h, _ := strconv.ParseUint(f[1], 10, 64)
	return answer{hr: uint32(hr), handle: h, result: f[2], record: f[3]}
}

const overlay = `{"Name":"flannel.4096","Type":"Overlay","Flags":8,
 "Policies":[{"Type":"NetAdapterName","Settings":{"NetworkAdapterName":"Ethernet"}}],
 "MacPool":{},"Dns":{},"Health":{"Extra":{}},
 "Ipams":[{"Type":"Static","Subnets":[{"IpAddressPrefix":"10.244.1.0/24",
   "Policies":[{"Type":"VSID","Settings":{"IsolationId":4096}}],
   "Routes":[{"NextHop":"10.244.1.1","DestinationPrefix":"0.0.0.0/0"}]}]}],
 "SchemaVersion":{"Major":2,"Minor":0}}`

// TestServer: calls over the wire as the DLLs make them: the version in HNS's v1 envelope,
// a network made, found by name, queried and modified through handles; requests that HNS's
// schema refuses answered with HCN_E_INVALID_JSON (a namespace attach as {"ID": …} among
// them); unknown IDs with HNS's codes; and nothing in the error record on success.
func TestServer(t *testing.T) {
	hns := hnstest.New(hnstest.Options{ManagementIP: netip.MustParseAddr("192.0.2.10")})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { _ = New(hns, slog.New(slog.NewTextHandler(io.Discard, nil))).Serve(l) }()
	call := func(r request) answer { return dial(t, l.Addr().String(), r) }
	must := func(what string, a answer) answer {
		t.Helper()
		if a.hr != 0 || a.record != "" {
			t.Fatalf("%s: HRESULT 0x%08X, record %q", what, a.hr, a.record)
		}
		return a
	}
	refused := func(what string, a answer, want windows.HResult) {
		t.Helper()
		if a.hr != uint32(want) {
			t.Errorf("%s: HRESULT 0x%08X, want %v (record %s)", what, a.hr, want, a.record)
		}
		var rec windows.ErrorRecord
		if err := json.Unmarshal([]byte(a.record), &rec); err != nil || uint32(rec.Error) != uint32(want) {
			t.Errorf("%s: error record %q, want one with code %v", what, a.record, want)
		}
	}

	v := must("version", call(request{call: "HNSCall", id: "/globals/version", a: "GET"}))
	if v.result != `{"Success":true,"Output":{"Major":10,"Minor":0}}` {
		t.Errorf("version: %s", v.result)
	}
	made := must("create", call(request{call: "HcnCreateNetwork", id: "00000000-0000-0000-0000-000000000000", a: overlay}))
	if made.handle == 0 {
		t.Fatal("create gave no handle")
	}
	q := `{"SchemaVersion":{"Major":2,"Minor":0},"Filter":"{\"Name\":\"flannel.4096\"}"}`
	ids := must("enumerate by name", call(request{call: "HcnEnumerateNetworks", a: q}))
	var list []string
	if err := json.Unmarshal([]byte(ids.result), &list); err != nil || len(list) != 1 {
		t.Fatalf("enumerate: %s %v", ids.result, err)
	}
	none := must("enumerate another name", call(request{call: "HcnEnumerateNetworks", a: strings.Replace(q, "flannel.4096", "cbr0", 1)}))
	if none.result != "[]" {
		t.Errorf("enumerate of a name no network has: %s", none.result)
	}
	h := must("open", call(request{call: "HcnOpenNetwork", id: list[0]})).handle
	props := must("query", call(request{call: "HcnQueryNetworkProperties", handle: h, a: q}))
	var n windows.HostComputeNetwork
	if err := json.Unmarshal([]byte(props.result), &n); err != nil || n.Name != "flannel.4096" || n.ID != list[0] {
		t.Errorf("query: %s %v", props.result, err)
	}
	rsr := `{"ResourceType":"Policy","RequestType":"Add","Settings":{"Policies":[{"Type":"RemoteSubnetRoute","Settings":` +
		`{"DestinationPrefix":"10.244.2.0/24","IsolationId":4096,"ProviderAddress":"192.0.2.11","DistributedRouterMacAddress":"0e:00:00:00:00:02"}}]}}`
	must("add a route", call(request{call: "HcnModifyNetwork", handle: h, a: rsr}))
	refused("the same route again", call(request{call: "HcnModifyNetwork", handle: h, a: rsr}), windows.HCNPolicyAlreadyExists)
	must("close", call(request{call: "HcnCloseNetwork", handle: h}))
	refused("query through a closed handle", call(request{call: "HcnQueryNetworkProperties", handle: h, a: q}), windows.InvalidArg)

	// What HNS's schema refuses.
	refused("a network with a field HNS lacks", call(request{call: "HcnCreateNetwork", a: strings.Replace(overlay, `"Flags":8`, `"Flags":8,"Vni":4096`, 1)}), windows.HCNInvalidJSON)
	refused("a route policy with a misspelt key", call(request{call: "HcnModifyNetwork", handle: made.handle,
		a: strings.Replace(rsr, "IsolationId", "IsolationID2", 1)}), windows.HCNInvalidJSON)
	refused("a query that is not JSON", call(request{call: "HcnEnumerateNetworks", a: "{"}), windows.HCNInvalidJSON)

	// An endpoint attached to a namespace: {"EndpointId": …}, not {"ID": …}.
	ep := must("create an endpoint", call(request{call: "HcnCreateEndpoint", handle: made.handle,
		a: `{"Name":"a","IpConfigurations":[{"IpAddress":"10.244.1.5","PrefixLength":24}],"SchemaVersion":{"Major":2,"Minor":0}}`}))
	var epList []string
	if err := json.Unmarshal([]byte(must("endpoints", call(request{call: "HcnEnumerateEndpoints",
		a: `{"SchemaVersion":{"Major":2,"Minor":0},"Filter":"{\"VirtualNetwork\":\"` + list[0] + `\"}"}`})).result), &epList); err != nil || len(epList) != 1 {
		t.Fatalf("endpoints of the network: %v %v", epList, err)
	}
	ns := must("create a namespace", call(request{call: "HcnCreateNamespace", a: `{"Type":"HostDefault","SchemaVersion":{"Major":2,"Minor":0}}`}))
	refused("attach as {\"ID\"}", call(request{call: "HcnModifyNamespace", handle: ns.handle,
		a: `{"ResourceType":"Endpoint","RequestType":"Add","Settings":{"ID":"` + epList[0] + `"}}`}), windows.HCNInvalidJSON)
	must("attach as {\"EndpointId\"}", call(request{call: "HcnModifyNamespace", handle: ns.handle,
		a: `{"ResourceType":"Endpoint","RequestType":"Add","Settings":{"EndpointId":"` + epList[0] + `"}}`}))
	if ep.handle == 0 {
		t.Error("endpoint create gave no handle")
	}

	// Unknown IDs, and a stopped HNS.
	refused("open an unknown network", call(request{call: "HcnOpenNetwork", id: "00000000-0000-4000-8000-0000000000ff"}), windows.HCNNetworkNotFound)
	refused("delete an unknown endpoint", call(request{call: "HcnDeleteEndpoint", id: "00000000-0000-4000-8000-0000000000ff"}), windows.HCNEndpointNotFound)
	refused("a call HNS lacks: modifying an SDN route", call(request{call: "HcnModifySdnRoute", a: "{}"}), windows.NotImpl)
	hns.Stop()
	refused("enumerate while HNS is stopped", call(request{call: "HcnEnumerateNetworks", a: q}), windows.HCNManagerStopped)
}

// TestCallLog: the log holds every call as hcn wrote it, refused ones too, with the HRESULT
// it got and the object its handle stood for; Mutates tells the calls that ask for a change.
func TestCallLog(t *testing.T) {
	hns := hnstest.New(hnstest.Options{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := New(hns, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go func() { _ = s.Serve(l) }()
	call := func(r request) answer { return dial(t, l.Addr().String(), r) }

	made := call(request{call: "HcnCreateNetwork", a: overlay})
	if made.hr != 0 {
		t.Fatalf("create: 0x%08X %s", made.hr, made.record)
	}
	nets, err := hns.Networks()
	if err != nil || len(nets) != 1 {
		t.Fatalf("networks: %v %v", nets, err)
	}
	netID := nets[0].ID
	bad := `{"ResourceType":"Policy","RequestType":"Add","Settings":{"Policies":[{"Type":"RemoteSubnetRoute","Settings":{"Destination":"10.244.2.0/24"}}]}}`
	call(request{call: "HcnModifyNetwork", handle: made.handle, a: bad})
	call(request{call: "HcnCloseNetwork", handle: made.handle})
	q := `{"SchemaVersion":{"Major":2,"Minor":0},"Filter":"{\"Name\":\"flannel.4096\"}"}`
	call(request{call: "HcnEnumerateNetworks", a: q})

	got := s.Calls()
	want := []Call{
		{Name: "HcnCreateNetwork", Body: overlay},
		{Name: "HcnModifyNetwork", Object: netID, Body: bad, HResult: windows.HCNInvalidJSON},
		{Name: "HcnCloseNetwork", Object: netID},
		{Name: "HcnEnumerateNetworks", Body: q},
	}
	if len(got) != len(want) {
		t.Fatalf("logged %d calls, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("call %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	var mutating []string
	for _, c := range got {
		if c.Mutates() {
			mutating = append(mutating, c.Name)
		}
	}
	if strings.Join(mutating, " ") != "HcnCreateNetwork HcnModifyNetwork" {
		t.Errorf("mutating calls %v, want the create and the (refused) modify", mutating)
	}
	s.ResetCalls()
	if c := s.Calls(); len(c) != 0 {
		t.Errorf("after ResetCalls: %+v", c)
	}
}
