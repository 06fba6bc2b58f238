package windows

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/Microsoft/hcsshim"
	"github.com/Microsoft/hcsshim/hcn"

	"github.com/weftnet/weft/backend"
)

// sameJSON compares two encodings as HNS reads them: as JSON values, with absent and empty
// objects alike (hcn cannot leave an empty struct out: encoding/json's omitempty ignores
// structs, so hcn writes "Dns":{} and "Health":{"Extra":{}} where weft writes nothing).
func sameJSON(t *testing.T, what string, a, b []byte) {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if pa, pb := prune(va), prune(vb); !reflect.DeepEqual(pa, pb) {
		ja, _ := json.Marshal(pa)
		jb, _ := json.Marshal(pb)
		t.Errorf("%s: JSON differs\nweft: %s\nhcn:  %s", what, ja, jb)
	}
}

// prune drops empty objects and nulls, recursively.
func prune(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			e = prune(e)
			if m, ok := e.(map[string]any); e == nil || ok && len(m) == 0 {
				continue
			}
			out[k] = e
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = prune(e)
		}
		return out
	}
	return v
}

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// roundTrip checks one direction: v goes through the adapter's convert into T, and both
// marshal to the same JSON.
func roundTrip[T any](t *testing.T, what string, v any) *T {
	t.Helper()
	out, err := convert[T](v)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	sameJSON(t, what, marshal(t, v), marshal(t, out))
	return out
}

// TestModelToHCN: everything weft sends HNS reads the same as hcn's types.
func TestModelToHCN(t *testing.T) {
	sn := netip.MustParsePrefix("10.244.1.0/24")
	overlay := overlayNetwork("flannel.4096", 4096, "Ethernet", sn)
	bridge := bridgeNetwork("cbr0", "Ethernet", []string{"10.96.0.10"}, []netip.Prefix{sn})
	hn := roundTrip[hcn.HostComputeNetwork](t, "overlay network", overlay)
	if hn.Type != hcn.Overlay || hn.Flags != hcn.EnableNonPersistent || hn.SchemaVersion != (hcn.SchemaVersion{Major: 2, Minor: 0}) {
		t.Errorf("hcn sees the overlay as %+v", hn)
	}
	var vsid hcn.SubnetPolicy
	if err := json.Unmarshal(hn.Ipams[0].Subnets[0].Policies[0], &vsid); err != nil || vsid.Type != hcn.VSID {
		t.Errorf("VSID policy %s: %v", hn.Ipams[0].Subnets[0].Policies[0], err)
	}
	roundTrip[hcn.HostComputeNetwork](t, "l2bridge network", bridge)
	// Dual-stack: one subnet per family, each with its default route, as hcn reads them.
	dual := roundTrip[hcn.HostComputeNetwork](t, "dual-stack l2bridge network",
		bridgeNetwork("cbr0", "Ethernet", nil, []netip.Prefix{sn, netip.MustParsePrefix("fd00:10:244:1::/64")}))
	if s := dual.Ipams[0].Subnets; len(s) != 2 || s[1].IpAddressPrefix != "fd00:10:244:1::/64" || s[1].Routes[0].DestinationPrefix != "::/0" || s[1].Routes[0].NextHop != "fd00:10:244:1::1" {
		t.Errorf("hcn sees the dual-stack network's subnets as %+v", s)
	}

	remote := remoteEndpoint("00000000-0000-4000-8000-000000000001", "0E-2A", netip.MustParseAddr("10.244.2.2"), netip.MustParseAddr("192.168.1.11"))
	he := roundTrip[hcn.HostComputeEndpoint](t, "remote endpoint", &remote)
	if he.Flags != hcn.EndpointFlagsRemoteEndpoint || he.Policies[0].Type != hcn.NetworkProviderAddress {
		t.Errorf("hcn sees the remote endpoint as %+v", he)
	}
	host := HostComputeEndpoint{Name: "cbr0_ep", HostComputeNetwork: "00000000-0000-4000-8000-000000000001",
		IPConfigurations: []IPConfig{{IPAddress: "10.244.1.2", PrefixLength: 24}}, SchemaVersion: SchemaV2()}
	roundTrip[hcn.HostComputeEndpoint](t, "host endpoint", &host)
	roundTrip[hcn.HostComputeNamespace](t, "namespace", &HostComputeNamespace{Type: NamespaceHostDefault, SchemaVersion: SchemaV2()})

	rsr := RemoteSubnetRoutePolicy(rsrSettings(peer("10.244.2.0/24", "192.168.1.11", "c6:d2:32:6f:8f:44"), 4096))
	for name, req := range map[string]*ModifyNetworkSettingRequest{
		"add remote subnet route":    PolicyRequest(RequestAdd, rsr),
		"remove remote subnet route": PolicyRequest(RequestRemove, rsr),
		"add host route":             PolicyRequest(RequestAdd, HostRoutePolicy()),
	} {
		r := roundTrip[hcn.ModifyNetworkSettingRequest](t, name, req)
		var pr hcn.PolicyNetworkRequest
		if err := json.Unmarshal(r.Settings, &pr); err != nil || len(pr.Policies) != 1 {
			t.Fatalf("%s: settings %s: %v", name, r.Settings, err)
		}
		if pr.Policies[0].Type == hcn.RemoteSubnetRoute {
			var s hcn.RemoteSubnetRoutePolicySetting
			if err := json.Unmarshal(pr.Policies[0].Settings, &s); err != nil {
				t.Fatal(err)
			}
			want := hcn.RemoteSubnetRoutePolicySetting{DestinationPrefix: "10.244.2.0/24", IsolationId: 4096, ProviderAddress: "192.168.1.11", DistributedRouterMacAddress: "c6:d2:32:6f:8f:44"}
			if s != want {
				t.Errorf("%s: hcn reads %+v", name, s)
			}
		}
	}
	roundTrip[hcn.ModifyNamespaceSettingRequest](t, "attach endpoint", AttachRequest(RequestAdd, "00000000-0000-4000-8000-000000000002"))
}

// TestHCNToModel: what HNS reports through hcn reads the same in weft's model, and the
// model finds in it what the plane needs (DR MAC, management IP, subnet, VSID).
func TestHCNToModel(t *testing.T) {
	raw := func(v any) json.RawMessage { return marshal(t, v) }
	vsid := raw(hcn.SubnetPolicy{Type: hcn.VSID, Settings: raw(hcn.VsidPolicySetting{IsolationId: 4096})})
	net := &hcn.HostComputeNetwork{
		Id:   "8C7F4A86-5D0C-4A3F-9A42-6C1F3D6E2B10",
		Name: "flannel.4096",
		Type: hcn.Overlay,
		Policies: []hcn.NetworkPolicy{
			{Type: hcn.NetAdapterName, Settings: raw(hcn.NetAdapterNameNetworkPolicySetting{NetworkAdapterName: "Ethernet"})},
			{Type: hcn.DrMacAddress, Settings: raw(hcn.DrMacAddressNetworkPolicySetting{Address: "00-15-5D-2A-B1-07"})},
			{Type: hcn.ProviderAddress, Settings: raw(hcn.ProviderAddressNetworkPolicySetting{ProviderAddress: "192.168.1.10"})},
			{Type: hcn.HostRoute, Settings: json.RawMessage("{}")},
			{Type: hcn.RemoteSubnetRoute, Settings: raw(hcn.RemoteSubnetRoutePolicySetting{DestinationPrefix: "10.244.2.0/24", IsolationId: 4096,
				ProviderAddress: "192.168.1.11", DistributedRouterMacAddress: "c6:d2:32:6f:8f:44"})},
		},
		MacPool: hcn.MacPool{Ranges: []hcn.MacRange{{StartMacAddress: "00-15-5D-52-C0-00", EndMacAddress: "00-15-5D-52-CF-FF"}}},
		Ipams: []hcn.Ipam{{Type: "Static", Subnets: []hcn.Subnet{{
			IpAddressPrefix: "10.244.1.0/24",
			Policies:        []json.RawMessage{vsid},
			Routes:          []hcn.Route{{NextHop: "10.244.1.1", DestinationPrefix: "0.0.0.0/0"}},
		}}}},
		Flags:         hcn.EnableNonPersistent,
		SchemaVersion: hcn.SchemaVersion{Major: 2, Minor: 0},
	}
	n := roundTrip[HostComputeNetwork](t, "network", net)
	if mac, err := n.DRMAC(); err != nil || hnsMAC(mac) != "00-15-5D-2A-B1-07" {
		t.Errorf("DR MAC %v, %v", mac, err)
	}
	if n.ManagementIP() != netip.MustParseAddr("192.168.1.10") {
		t.Errorf("management IP %v", n.ManagementIP())
	}
	if why := overlayMismatch(n, 4096, netip.MustParsePrefix("10.244.1.0/24")); why != "" {
		t.Errorf("the network made by flanneld does not fit: %s", why)
	}
	plan := diffRemoteSubnetRoutes([]backend.Peer{peer("10.244.2.0/24", "192.168.1.11", "c6:d2:32:6f:8f:44")}, 4096, n.Policies, owned)
	if len(plan.Add)+len(plan.Remove) != 0 {
		t.Errorf("flanneld's policy is not adopted: %+v", plan)
	}

	ep := &hcn.HostComputeEndpoint{
		Id: "1D0C51A4-33A1-4B8E-8C0B-2F67C0B2D001", Name: "remote_10.244.2.2", HostComputeNetwork: net.Id,
		Policies:         []hcn.EndpointPolicy{{Type: hcn.NetworkProviderAddress, Settings: raw(hcn.ProviderAddressEndpointPolicySetting{ProviderAddress: "192.168.1.11"})}},
		IpConfigurations: []hcn.IpConfig{{IpAddress: "10.244.2.2"}},
		MacAddress:       "0E-2A-0A-F4-02-02",
		Flags:            hcn.EndpointFlagsRemoteEndpoint,
		SchemaVersion:    hcn.SchemaVersion{Major: 2, Minor: 0},
	}
	e := roundTrip[HostComputeEndpoint](t, "endpoint", ep)
	if e.IP() != netip.MustParseAddr("10.244.2.2") || e.ProviderAddress() != netip.MustParseAddr("192.168.1.11") || e.Flags != EndpointRemote {
		t.Errorf("endpoint read as %+v", e)
	}
	ns := &hcn.HostComputeNamespace{Id: "5B1C8E2A-0000-4000-8000-000000000003", Type: hcn.NamespaceTypeHostDefault,
		Resources:     []hcn.NamespaceResource{{Type: hcn.NamespaceResourceTypeEndpoint, Data: raw(hcn.NamespaceResourceEndpoint{Id: ep.Id})}},
		SchemaVersion: hcn.SchemaVersion{Major: 2, Minor: 0}}
	roundTrip[HostComputeNamespace](t, "namespace", ns)
	var v Version
	if err := json.Unmarshal(marshal(t, hcn.Version{Major: 15, Minor: 4}), &v); err != nil || v != (Version{Major: 15, Minor: 4}) {
		t.Errorf("version %+v, %v", v, err)
	}
}

// TestGoldenRequestsReadByHCN: the golden request bodies in testdata/requests decode into
// hcn's types and encode back the same, so what the tests pin is what hcn would send.
func TestGoldenRequestsReadByHCN(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "requests", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden requests: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var r struct { // as hnstest records a request
			Op, ID string
			Body   json.RawMessage
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		switch r.Op {
		case "CreateNetwork":
			roundTripRaw[hcn.HostComputeNetwork](t, f, r.Body)
		case "CreateEndpoint":
			roundTripRaw[hcn.HostComputeEndpoint](t, f, r.Body)
		case "ModifyNetworkSettings":
			m := roundTripRaw[hcn.ModifyNetworkSettingRequest](t, f, r.Body)
			roundTripRaw[hcn.PolicyNetworkRequest](t, f+" settings", m.Settings)
		case "HostAttach": // HNS v1, which hcn has no call of: hcsshim's HNSEndpoint.HostAttach
			roundTripRaw[hcsshim.EndpointAttachDetachRequest](t, f, r.Body)
		case "DeleteNetwork", "DeleteEndpoint":
			if r.ID == "" || len(r.Body) != 0 {
				t.Errorf("%s: a delete names an ID and sends nothing", f)
			}
		default:
			t.Errorf("%s: request %s has no hcn counterpart checked", f, r.Op)
		}
	}
}

func roundTripRaw[T any](t *testing.T, what string, b []byte) *T {
	t.Helper()
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	sameJSON(t, what, b, marshal(t, out))
	return out
}
