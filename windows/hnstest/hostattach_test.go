package hnstest

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/weftnet/weft/windows"
)

// TestHostAttach: HNS v1's HostAttach(1) puts the endpoint in the host's HostDefault
// namespace (made for it) and gives the host a vNIC with its address; a second one answers
// HCN_E_ENDPOINT_ALREADY_ATTACHED with the text flanneld matches.
func TestHostAttach(t *testing.T) {
	host := NewHost(windows.Interface{Index: 4, Name: "Ethernet", Prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}})
	h := New(Options{ManagementIP: netip.MustParseAddr("192.0.2.10"), Host: host})
	n, err := h.CreateNetwork(&windows.HostComputeNetwork{Name: "cbr0", Type: windows.NetworkL2Bridge,
		Policies: []windows.Policy{windows.NetAdapterNamePolicy("Ethernet")},
		Ipams: []windows.Ipam{{Type: "Static", Subnets: []windows.Subnet{{IPAddressPrefix: "10.244.1.0/24",
			Routes: []windows.Route{{NextHop: "10.244.1.1", DestinationPrefix: "0.0.0.0/0"}}}}}},
		SchemaVersion: windows.SchemaV2()})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := h.CreateEndpoint(&windows.HostComputeEndpoint{Name: "cbr0_ep", HostComputeNetwork: n.ID,
		IPConfigurations: []windows.IPConfig{{IPAddress: "10.244.1.2", PrefixLength: 24}}, SchemaVersion: windows.SchemaV2()})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.HostAttach("00000000-0000-4000-8000-0000000000ff"); !errors.Is(err, windows.ErrNotFound) {
		t.Errorf("attaching an unknown endpoint: %v", err)
	}
	if err := h.HostAttach(ep.ID); err != nil {
		t.Fatal(err)
	}
	ns, err := h.HostDefaultNamespace()
	if err != nil || len(ns.Resources) != 1 || !strings.Contains(string(ns.Resources[0].Data), ep.ID) {
		t.Errorf("host namespace after the attachment: %+v %v", ns, err)
	}
	if !strings.Contains(host.Render(), `"vEthernet (cbr0_ep)" 10.244.1.2/24`) {
		t.Errorf("no vNIC with the endpoint's address on the host:\n%s", host.Render())
	}
	err = h.HostAttach(ep.ID)
	if code, _ := windows.CodeOf(err); code != windows.HCNEndpointAlreadyAttached || !errors.Is(err, windows.ErrExists) ||
		!strings.Contains(err.Error(), "This endpoint is already attached to the switch.") {
		t.Errorf("a second attachment: %v, want HCN_E_ENDPOINT_ALREADY_ATTACHED with its text", err)
	}
	if r := h.Requests(); len(r) != 3 || r[2].Op != "HostAttach" || string(r[2].Body) != `{"SystemType":"Host","CompartmentId":1}` {
		t.Errorf("requests %+v, want the attachment once, as hcsshim's HostAttach(1) sends it", r)
	}
}
