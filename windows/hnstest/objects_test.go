package hnstest

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/weftnet/weft/windows"
)

// natNetwork is hcsshim's test NAT network (hcn/hcnutils_test.go, HcnGenerateNATNetwork).
func natNetwork(subnet bool) *windows.HostComputeNetwork {
	n := &windows.HostComputeNetwork{Name: "GoTestNat", Type: "NAT", SchemaVersion: windows.SchemaV2()}
	if subnet {
		n.Ipams = []windows.Ipam{{Type: "Static", Subnets: []windows.Subnet{{
			IPAddressPrefix: "192.168.100.0/24",
			Routes:          []windows.Route{{NextHop: "192.168.100.1", DestinationPrefix: "0.0.0.0/0"}},
		}}}}
	}
	return n
}

func wantCode(t *testing.T, what string, err error, code windows.HResult) {
	t.Helper()
	if c, _ := windows.CodeOf(err); c != code {
		t.Errorf("%s: %v, want HRESULT %v", what, err, code)
	}
}

// TestAssignsAddresses: an endpoint made without an address gets the lowest free one of
// each family its network has a subnet of, past the gateway; one it names is its own.
func TestAssignsAddresses(t *testing.T) {
	h := New(Options{Version: windows.Version{Major: 15, Minor: 4}})
	n, err := h.CreateNetwork(natNetwork(true))
	if err != nil {
		t.Fatal(err)
	}
	ips := func(ep *windows.HostComputeEndpoint) []windows.IPConfig { return ep.IPConfigurations }
	a, err := h.CreateEndpoint(&windows.HostComputeEndpoint{Name: "a", HostComputeNetwork: n.ID, SchemaVersion: windows.SchemaV2()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.CreateEndpoint(&windows.HostComputeEndpoint{Name: "b", HostComputeNetwork: n.ID, SchemaVersion: windows.SchemaV2()})
	if err != nil {
		t.Fatal(err)
	}
	if want := []windows.IPConfig{{IPAddress: "192.168.100.2", PrefixLength: 24}}; !slices.Equal(ips(a), want) {
		t.Errorf("first endpoint: %+v, want %+v", ips(a), want)
	}
	if want := []windows.IPConfig{{IPAddress: "192.168.100.3", PrefixLength: 24}}; !slices.Equal(ips(b), want) {
		t.Errorf("second endpoint: %+v, want %+v", ips(b), want)
	}
	if err := h.DeleteEndpoint(a.ID); err != nil {
		t.Fatal(err)
	}
	c, err := h.CreateEndpoint(&windows.HostComputeEndpoint{Name: "c", HostComputeNetwork: n.ID, SchemaVersion: windows.SchemaV2()})
	if err != nil || c.IP().String() != "192.168.100.2" {
		t.Errorf("after a's deletion: %+v, %v, want 192.168.100.2 again", c, err)
	}

	dual := &windows.HostComputeNetwork{Name: "dual", Type: windows.NetworkL2Bridge, SchemaVersion: windows.SchemaV2(),
		Ipams: []windows.Ipam{{Type: "Static", Subnets: []windows.Subnet{
			{IPAddressPrefix: "10.0.0.0/30", Routes: []windows.Route{{NextHop: "10.0.0.1", DestinationPrefix: "0.0.0.0/0"}}},
			{IPAddressPrefix: "fd00::/64", Routes: []windows.Route{{NextHop: "fd00::1", DestinationPrefix: "::/0"}}},
		}}}}
	dn, err := h.CreateNetwork(dual)
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.CreateEndpoint(&windows.HostComputeEndpoint{Name: "d", HostComputeNetwork: dn.ID, SchemaVersion: windows.SchemaV2()})
	if err != nil {
		t.Fatal(err)
	}
	if want := []windows.IPConfig{{IPAddress: "10.0.0.2", PrefixLength: 30}, {IPAddress: "fd00::2", PrefixLength: 64}}; !slices.Equal(ips(d), want) {
		t.Errorf("dual-stack endpoint: %+v, want %+v", ips(d), want)
	}
	// 10.0.0.0/30: .1 is the gateway, .2 is d's, .3 the broadcast address.
	if _, err := h.CreateEndpoint(&windows.HostComputeEndpoint{Name: "e", HostComputeNetwork: dn.ID, SchemaVersion: windows.SchemaV2()}); err == nil {
		t.Error("an endpoint got an address of a full /30")
	}

	if err := h.DeleteNetwork(n.ID); err != nil {
		t.Fatal(err)
	}
	bare, err := h.CreateNetwork(natNetwork(false))
	if err != nil {
		t.Fatalf("a NAT network without a subnet: %v", err)
	}
	_, err = h.CreateEndpoint(&windows.HostComputeEndpoint{Name: "f", HostComputeNetwork: bare.ID, SchemaVersion: windows.SchemaV2()})
	wantCode(t, "an endpoint of a network without a subnet", err, windows.HCNAddrInvalidOrReserved)
}

// TestNamespaces: containerd's namespace (no type, schema 0.0) is a Host namespace; delete
// detaches its endpoints; a given ID is kept.
func TestNamespaces(t *testing.T) {
	h := New(Options{})
	ns, err := h.CreateNamespace(&windows.HostComputeNamespace{})
	if err != nil {
		t.Fatalf("containerd's namespace: %v", err)
	}
	if ns.Type != NamespaceHost {
		t.Errorf("type %q, want %q", ns.Type, NamespaceHost)
	}
	_, err = h.CreateNamespace(&windows.HostComputeNamespace{Type: "Nowhere", SchemaVersion: windows.SchemaV2()})
	wantCode(t, "an unknown type", err, windows.HCNInvalidJSON)
	_, err = h.CreateNamespace(&windows.HostComputeNamespace{SchemaVersion: windows.SchemaVersion{Major: 1}})
	wantCode(t, "schema 1.0", err, windows.HCNInvalidJSON)

	n, err := h.CreateNetwork(natNetwork(true))
	if err != nil {
		t.Fatal(err)
	}
	ep, err := h.CreateEndpoint(&windows.HostComputeEndpoint{Name: "a", HostComputeNetwork: n.ID, SchemaVersion: windows.SchemaV2()})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AttachEndpoint(ns.ID, ep.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.DeleteNamespace(ns.ID); err != nil {
		t.Fatal(err)
	}
	eps, _ := h.Endpoints()
	if len(eps) != 1 || eps[0].HostComputeNamespace != "" {
		t.Errorf("endpoint after its namespace's deletion: %+v", eps)
	}
	err = h.DeleteNamespace(ns.ID)
	wantCode(t, "deleting it again", err, windows.ElementNotFound)
	if !errors.Is(err, windows.ErrNotFound) {
		t.Errorf("deleting it again: %v, want ErrNotFound", err)
	}

	const id = "5f0b1190-63be-4e0c-b974-bd0f55675a42"
	again, err := h.CreateNamespace(&windows.HostComputeNamespace{ID: id, SchemaVersion: windows.SchemaV2()})
	if err != nil || again.ID != id {
		t.Fatalf("a namespace naming its ID: %+v, %v", again, err)
	}
	_, err = h.CreateNamespace(&windows.HostComputeNamespace{ID: id, SchemaVersion: windows.SchemaV2()})
	wantCode(t, "a second namespace of that ID", err, windows.InvalidArg)
	_, err = h.CreateNamespace(&windows.HostComputeNamespace{ID: "not-a-guid", SchemaVersion: windows.SchemaV2()})
	wantCode(t, "an ID that is no GUID", err, windows.InvalidArg)
}

func policy(t string, settings string) windows.Policy {
	return windows.Policy{Type: windows.PolicyType(t), Settings: json.RawMessage(settings)}
}

func policyRequest(rt windows.RequestType, ps ...windows.Policy) *EndpointRequest {
	b, _ := json.Marshal(struct{ Policies []windows.Policy }{ps})
	return &EndpointRequest{ResourceType: "Policy", RequestType: rt, Settings: b}
}

// TestModifyEndpoint: policies added, updated by type, removed by value; each type only
// in the HNS versions that have it; a host port mapped once.
func TestModifyEndpoint(t *testing.T) {
	h := New(Options{Version: windows.Version{Major: 13, Minor: 1}})
	n, err := h.CreateNetwork(natNetwork(true))
	if err != nil {
		t.Fatal(err)
	}
	pm := policy("PortMapping", `{"Protocol":17,"InternalPort":45678,"ExternalPort":56789}`)
	ep, err := h.CreateEndpoint(&windows.HostComputeEndpoint{Name: "a", HostComputeNetwork: n.ID, Policies: []windows.Policy{pm}, SchemaVersion: windows.SchemaV2()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.CreateEndpoint(&windows.HostComputeEndpoint{Name: "b", HostComputeNetwork: n.ID, Policies: []windows.Policy{pm}, SchemaVersion: windows.SchemaV2()})
	wantCode(t, "a second endpoint of the port mapping", err, windows.HCNPortAlreadyExists)

	wfp := policy("L4WFPPROXY", `{"InboundProxyPort":"80"}`)
	wantCode(t, "L4WFPPROXY on 13.1", h.ModifyEndpoint(ep.ID, policyRequest(windows.RequestAdd, wfp)), windows.HCNInvalidPolicyType)
	wantCode(t, "an unknown policy type", h.ModifyEndpoint(ep.ID, policyRequest(windows.RequestAdd, policy("Teleport", `{}`))), windows.HCNInvalidPolicyType)
	h.SetVersion(windows.Version{Major: 13, Minor: 2})
	if err := h.ModifyEndpoint(ep.ID, policyRequest(windows.RequestAdd, wfp)); err != nil {
		t.Fatalf("L4WFPPROXY on 13.2: %v", err)
	}
	acl1 := policy("ACL", `{"Action":"Allow","Direction":"In","Priority":200}`)
	acl2 := policy("ACL", `{"Action":"Block","Direction":"Out","Priority":300}`)
	for _, step := range []*EndpointRequest{policyRequest(RequestUpdate, acl1), policyRequest(RequestUpdate, acl2)} {
		if err := h.ModifyEndpoint(ep.ID, step); err != nil {
			t.Fatal(err)
		}
	}
	types := func() []windows.PolicyType {
		eps, _ := h.Endpoints()
		var out []windows.PolicyType
		for _, p := range eps[0].Policies {
			out = append(out, p.Type)
		}
		return out
	}
	if got, want := types(), []windows.PolicyType{"PortMapping", "L4WFPPROXY", "ACL"}; !slices.Equal(got, want) {
		t.Errorf("after two ACL updates: %v, want %v", got, want)
	}
	wantCode(t, "removing an ACL it no longer has", h.ModifyEndpoint(ep.ID, policyRequest(windows.RequestRemove, acl1)), windows.HCNPolicyNotFound)
	if err := h.ModifyEndpoint(ep.ID, policyRequest(windows.RequestRemove, acl2, wfp)); err != nil {
		t.Fatal(err)
	}
	if got, want := types(), []windows.PolicyType{"PortMapping"}; !slices.Equal(got, want) {
		t.Errorf("after removing them: %v, want %v", got, want)
	}
	wantCode(t, "an ACL of protocol 252 on 10.0", func() error {
		h.SetVersion(windows.Version{Major: 10, Minor: 0})
		return h.ModifyEndpoint(ep.ID, policyRequest(windows.RequestAdd, policy("ACL", `{"Protocols":"6,252"}`)))
	}(), windows.HCNInvalidPolicy)
	wantCode(t, "a Refresh request", h.ModifyEndpoint(ep.ID, policyRequest("Refresh")), windows.HCNRequestUnsupported)
	wantCode(t, "an unknown endpoint", h.ModifyEndpoint("nope", policyRequest(windows.RequestAdd)), windows.HCNEndpointNotFound)
}

// TestNetworkPolicyVersions: a network policy type in the versions that have it, at
// creation and added later; hcsshim's network types; a given network ID kept.
func TestNetworkPolicyVersions(t *testing.T) {
	h := New(Options{Version: windows.Version{Major: 14, Minor: 0}})
	withPolicy := func(name string, p windows.Policy) *windows.HostComputeNetwork {
		n := natNetwork(true)
		n.Name, n.Policies = name, []windows.Policy{p}
		return n
	}
	_, err := h.CreateNetwork(withPolicy("a", policy("NetworkACL", `{}`)))
	wantCode(t, "NetworkACL on 14.0", err, windows.HCNInvalidPolicyType)
	_, err = h.CreateNetwork(withPolicy("b", policy("SetPolicy", `{"Type":"NESTEDIPSET"}`)))
	wantCode(t, "a NESTEDIPSET set on 14.0", err, windows.HCNInvalidPolicyType)
	if _, err := h.CreateNetwork(withPolicy("c", policy("SetPolicy", `{"Type":"IPSET"}`))); err != nil {
		t.Errorf("an IPSET set on 14.0: %v", err)
	}
	bogus := natNetwork(true)
	bogus.Name, bogus.Type = "d", "Bogus"
	_, err = h.CreateNetwork(bogus)
	wantCode(t, "an unknown network type", err, windows.HCNInvalidNetworkType)

	const id = "6f0b1190-63be-4e0c-b974-bd0f55675a42"
	named := natNetwork(true)
	named.ID = id
	n, err := h.CreateNetwork(named)
	if err != nil || n.ID != id {
		t.Fatalf("a network naming its ID: %+v, %v", n, err)
	}
	acl := windows.PolicyRequest(windows.RequestAdd, policy("NetworkACL", `{"Action":"Allow"}`))
	wantCode(t, "adding NetworkACL on 14.0", h.ModifyNetworkSettings(id, acl), windows.HCNInvalidPolicyType)
	h.SetVersion(windows.Version{Major: 15, Minor: 0})
	if err := h.ModifyNetworkSettings(id, acl); err != nil {
		t.Errorf("adding NetworkACL on 15.0: %v", err)
	}
	wantCode(t, "adding an adapter", h.ModifyNetworkSettings(id, windows.PolicyRequest(windows.RequestAdd, windows.NetAdapterNamePolicy("Ethernet"))), windows.HCNInvalidPolicyType)
}
