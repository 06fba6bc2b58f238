package hnstest

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/windows"
)

const testAdapter = "Ethernet"

// overlayFor is an Overlay network as weft asks for one.
func overlayFor(name, sn string, vni uint32) *windows.HostComputeNetwork {
	p := netip.MustParsePrefix(sn)
	return &windows.HostComputeNetwork{
		Name: name, Type: windows.NetworkOverlay, Flags: windows.EnableNonPersistent,
		Policies: []windows.Policy{windows.NetAdapterNamePolicy(testAdapter)},
		Ipams: []windows.Ipam{{Type: "Static", Subnets: []windows.Subnet{{
			IPAddressPrefix: sn,
			Policies:        []windows.Policy{windows.VSIDPolicy(vni)},
			Routes:          []windows.Route{{NextHop: p.Addr().Next().String(), DestinationPrefix: "0.0.0.0/0"}},
		}}}},
		SchemaVersion: windows.SchemaV2(),
	}
}

// clock is a test's time: Sleep advances it at once.
type clock struct{ t time.Time }

func (c *clock) Now() time.Time { return c.t }

func (c *clock) Sleep(d time.Duration) { c.t = c.t.Add(d) }

// TestRefuses: what HNS (or hcn before it) refuses, hnstest.HNS refuses, with errors
// callers can tell apart.
func TestRefuses(t *testing.T) {
	h := New(Options{Version: windows.Version{Major: 9, Minor: 1}, Host: NewHost(windows.Interface{Index: 4, Name: testAdapter})})
	net, err := h.CreateNetwork(overlayFor("flannel.4096", "10.244.1.0/24", 4096))
	if err != nil {
		t.Fatal(err)
	}
	noDefault := overlayFor("x", "10.244.2.0/24", 4096)
	noDefault.Ipams[0].Subnets[0].Routes[0].DestinationPrefix = "10.0.0.0/8"
	noGateway := overlayFor("y", "10.244.2.0/24", 4096)
	noGateway.Ipams[0].Subnets[0].Routes[0].NextHop = ""
	noVSID := overlayFor("z", "10.244.2.0/24", 4096)
	noVSID.Ipams[0].Subnets[0].Policies = nil
	lowVSID := overlayFor("w", "10.244.2.0/24", 1)
	badAdapter := overlayFor("v", "10.244.2.0/24", 4096)
	badAdapter.Policies = []windows.Policy{windows.NetAdapterNamePolicy("Ethernet 9")}
	rsr := windows.RemoteSubnetRoutePolicy(windows.RemoteSubnetRouteSettings{DestinationPrefix: "10.244.3.0/24", IsolationID: 4096, ProviderAddress: "192.168.1.3", DistributedRouterMacAddress: "00-15-5D-00-00-01"})
	ns, err := h.CreateNamespace(&windows.HostComputeNamespace{Type: windows.NamespaceHostDefault, SchemaVersion: windows.SchemaV2()})
	if err != nil {
		t.Fatal(err)
	}
	local, err := h.CreateEndpoint(&windows.HostComputeEndpoint{Name: "local", HostComputeNetwork: net.ID, IPConfigurations: []windows.IPConfig{{IPAddress: "10.244.1.9", PrefixLength: 24}}, SchemaVersion: windows.SchemaV2()})
	if err != nil {
		t.Fatal(err)
	}
	h.ResetRequests()
	for _, tc := range []struct {
		name string
		err  error
		is   error           // nil: any error
		code windows.HResult // the HRESULT HNS answers with; 0: hcn refuses it before calling HNS
		text string          // part of the message
	}{
		{"no default route", func() error { _, err := h.CreateNetwork(noDefault); return err }(), nil, 0, "no default gateway"},
		{"route without gateway", func() error { _, err := h.CreateNetwork(noGateway); return err }(), nil, 0, "no gateway specified"},
		{"overlay without VSID", func() error { _, err := h.CreateNetwork(noVSID); return err }(), nil, windows.HCNInvalidPolicy, "VSID"},
		{"VSID below 4096", func() error { _, err := h.CreateNetwork(lowVSID); return err }(), nil, windows.HCNInvalidPolicy, "4096"},
		{"unknown adapter", func() error { _, err := h.CreateNetwork(badAdapter); return err }(), nil, windows.HCNAdapterNotFound, "Ethernet 9"},
		{"duplicate name", func() error { _, err := h.CreateNetwork(overlayFor("flannel.4096", "10.244.9.0/24", 4096)); return err }(), windows.ErrExists, windows.HCNNetworkAlreadyExists, ""},
		{"delete unknown network", h.DeleteNetwork("00000000-0000-4000-8000-0000000000FF"), windows.ErrNotFound, windows.HCNNetworkNotFound, ""},
		{"modify unknown network", h.ModifyNetworkSettings("nope", windows.PolicyRequest(windows.RequestAdd, rsr)), windows.ErrNotFound, windows.HCNNetworkNotFound, ""},
		{"endpoints of unknown network", func() error { _, err := h.NetworkEndpoints("nope"); return err }(), windows.ErrNotFound, windows.HCNNetworkNotFound, ""},
		{"network by unknown name", func() error { _, err := h.NetworkByName("cbr0"); return err }(), windows.ErrNotFound, 0, ""},
		{"delete unknown endpoint", h.DeleteEndpoint("nope"), windows.ErrNotFound, windows.HCNEndpointNotFound, ""},
		{"remote subnet route on 9.1", h.ModifyNetworkSettings(net.ID, windows.PolicyRequest(windows.RequestAdd, rsr)), windows.ErrNotSupported, windows.HCNInvalidPolicyType, "9.1"},
		{"host route on 9.1", h.ModifyNetworkSettings(net.ID, windows.PolicyRequest(windows.RequestAdd, windows.HostRoutePolicy())), windows.ErrNotSupported, windows.HCNInvalidPolicyType, ""},
		{"remove a policy it does not have", h.ModifyNetworkSettings(net.ID, windows.PolicyRequest(windows.RequestRemove, rsr)), windows.ErrNotFound, windows.HCNPolicyNotFound, ""},
		{"namespace in endpoint create", func() error {
			_, err := h.CreateEndpoint(&windows.HostComputeEndpoint{HostComputeNetwork: net.ID, HostComputeNamespace: "x", IPConfigurations: []windows.IPConfig{{IPAddress: "10.244.1.5"}}})
			return err
		}(), nil, 0, "read only"},
		{"local endpoint outside the subnet", func() error {
			_, err := h.CreateEndpoint(&windows.HostComputeEndpoint{HostComputeNetwork: net.ID, IPConfigurations: []windows.IPConfig{{IPAddress: "10.244.2.5"}}})
			return err
		}(), nil, windows.HCNInvalidIP, "outside"},
		{"remote endpoint without provider address", func() error {
			_, err := h.CreateEndpoint(&windows.HostComputeEndpoint{HostComputeNetwork: net.ID, Flags: windows.EndpointRemote, IPConfigurations: []windows.IPConfig{{IPAddress: "10.244.2.5"}}})
			return err
		}(), nil, windows.HCNInvalidPolicy, "ProviderAddress"},
		{"attach to unknown namespace", h.AttachEndpoint("nope", local.ID), windows.ErrNotFound, windows.ElementNotFound, ""},
		{"attach an unknown endpoint", h.AttachEndpoint(ns.ID, "nope"), windows.ErrNotFound, windows.HCNEndpointNotFound, ""},
		// A namespace lists its endpoints as {"ID": …}; a request names one as {"EndpointId": …}.
		{"attach with the resource's shape", h.ModifyNamespace(ns.ID, &windows.ModifyNamespaceSettingRequest{ResourceType: "Endpoint", RequestType: windows.RequestAdd,
			Settings: json.RawMessage(`{"ID":"` + local.ID + `"}`)}), nil, windows.HCNInvalidJSON, "EndpointId"},
	} {
		if tc.err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if tc.is != nil && !errors.Is(tc.err, tc.is) {
			t.Errorf("%s: %v, want errors.Is %v", tc.name, tc.err, tc.is)
		}
		if code, ok := windows.CodeOf(tc.err); code != tc.code || ok != (tc.code != 0) {
			t.Errorf("%s: %v: HRESULT %v (%v), want %v", tc.name, tc.err, code, ok, tc.code)
		}
		if !strings.Contains(tc.err.Error(), tc.text) {
			t.Errorf("%s: %v, want it to mention %q", tc.name, tc.err, tc.text)
		}
	}
	if r := h.Requests(); len(r) != 0 {
		t.Errorf("refused requests were recorded: %+v", r)
	}

	// Duplicates: a second route to a destination, a second endpoint on an address, a
	// second attachment.
	h.SetVersion(windows.Version{Major: 10, Minor: 0})
	if err := h.ModifyNetworkSettings(net.ID, windows.PolicyRequest(windows.RequestAdd, rsr)); err != nil {
		t.Fatal(err)
	}
	rsr2 := windows.RemoteSubnetRoutePolicy(windows.RemoteSubnetRouteSettings{DestinationPrefix: "10.244.3.0/24", IsolationID: 4096, ProviderAddress: "192.168.1.4", DistributedRouterMacAddress: "00-15-5D-00-00-02"})
	if err := h.ModifyNetworkSettings(net.ID, windows.PolicyRequest(windows.RequestAdd, rsr2)); !errors.Is(err, windows.ErrExists) {
		t.Errorf("second route to 10.244.3.0/24: %v", err)
	}
	ep := &windows.HostComputeEndpoint{Name: "a", HostComputeNetwork: net.ID, IPConfigurations: []windows.IPConfig{{IPAddress: "10.244.1.5", PrefixLength: 24}}, SchemaVersion: windows.SchemaV2()}
	made, err := h.CreateEndpoint(ep)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.CreateEndpoint(ep); err == nil {
		t.Errorf("second endpoint on 10.244.1.5 accepted")
	}
	if err := h.AttachEndpoint(ns.ID, made.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.AttachEndpoint(ns.ID, made.ID); !errors.Is(err, windows.ErrExists) ||
		!strings.Contains(err.Error(), "already part of a network namespace") {
		t.Errorf("second attach: %v", err)
	} else if code, _ := windows.CodeOf(err); code != windows.HCNEndpointNamespaceAlreadyExist {
		t.Errorf("second attach answered %s, want HCN_E_ENDPOINT_NAMESPACE_ALREADY_EXISTS", code)
	}
	// Removing a policy as HNS reported it works even if HNS wrote it differently.
	got, _ := h.NetworkByName("flannel.4096")
	for _, p := range got.PoliciesOf(windows.PolicyRemoteSubnetRoute) {
		var buf bytes.Buffer
		_ = json.Indent(&buf, p.Settings, "", "  ")
		p.Settings = buf.Bytes()
		if err := h.ModifyNetworkSettings(net.ID, windows.PolicyRequest(windows.RequestRemove, p)); err != nil {
			t.Errorf("removing the reported policy: %v", err)
		}
	}
}

func TestBlipAndReboot(t *testing.T) {
	clock := &clock{t: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
	mgmt := netip.MustParseAddr("192.168.1.10")
	h := New(Options{ManagementIP: mgmt, Blip: 2 * time.Second, Now: clock.Now})
	if _, err := h.CreateNetwork(overlayFor("flannel.4096", "10.244.1.0/24", 4096)); err != nil {
		t.Fatal(err)
	}
	persistent := overlayFor("persistent", "10.244.2.0/24", 4097)
	persistent.Flags = 0
	if _, err := h.CreateNetwork(persistent); err != nil {
		t.Fatal(err)
	}
	n, _ := h.NetworkByName("flannel.4096")
	if n.ManagementIP().IsValid() {
		t.Error("management IP reported during the blip")
	}
	if mac, err := n.DRMAC(); err != nil || !strings.HasPrefix(strings.ToUpper(strings.ReplaceAll(mac.String(), ":", "-")), "00-15-5D-") {
		t.Errorf("DR MAC %v, %v", mac, err)
	}
	clock.Sleep(2 * time.Second)
	n, _ = h.NetworkByName("flannel.4096")
	if n.ManagementIP() != mgmt {
		t.Errorf("management IP %v after the blip", n.ManagementIP())
	}
	h.Reboot()
	if _, err := h.NetworkByName("flannel.4096"); !errors.Is(err, windows.ErrNotFound) {
		t.Errorf("non-persistent network after reboot: %v", err)
	}
	if _, err := h.NetworkByName("persistent"); err != nil {
		t.Errorf("persistent network after reboot: %v", err)
	}
}
