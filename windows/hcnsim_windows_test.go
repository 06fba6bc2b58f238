package windows_test

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	xwin "golang.org/x/sys/windows"

	"github.com/weftnet/weft/internal/hnssim"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

// simulatedHNS starts the simulated HNS service in this process, on loopback, and points the
// simulated computenetwork.dll and vmcompute.dll at it. Only Go runs here: the DLLs are C
// and hand every call to the service over TCP. It skips unless the computenetwork.dll
// Windows loads is the simulation (tools/wine/setup.sh builds it into the Wine prefix), so
// that on a real Windows the test leaves HNS alone.
func simulatedHNS(t *testing.T, o hnstest.Options) (*hnstest.HNS, *hnssim.Server) {
	t.Helper()
	if err := xwin.NewLazySystemDLL("computenetwork.dll").NewProc("WeftSimulatedHNS").Find(); err != nil {
		t.Skipf("computenetwork.dll is not the simulated one (run under Wine: make wine): %v", err)
	}
	hns := hnstest.New(o)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	srv := hnssim.New(hns, testLogger(t))
	go func() { _ = srv.Serve(l) }()
	t.Setenv("WEFT_HNS_ADDR", l.Addr().String())
	return hns, srv
}

// TestHCNThroughSimulatedHNS: every call of the hcn adapter goes through hcsshim's hcn
// package, its generated syscalls and the simulated DLLs to the simulated HNS, which reads
// it by HNS's schema. The e2e tests run weftd.exe this way; this one also runs what they do
// not: remote endpoints, a second host attachment, and the errors weft tells apart by
// HRESULT.
func TestHCNThroughSimulatedHNS(t *testing.T) {
	mgmt := netip.MustParseAddr("192.0.2.10")
	hns, srv := simulatedHNS(t, hnstest.Options{ManagementIP: mgmt})
	c := windows.NewHCN()
	is := func(what string, err, target error) {
		t.Helper()
		if !errors.Is(err, target) {
			t.Errorf("%s: %v, want an error matching %v", what, err, target)
		}
	}

	v, err := c.Version()
	if err != nil || v != (windows.Version{Major: 10, Minor: 0}) {
		t.Fatalf("version: %v %v", v, err)
	}
	hns.SetVersion(windows.Version{Major: 9, Minor: 1})
	_, err = c.Version()
	is("version 9.1", err, windows.ErrNotSupported)
	hns.SetVersion(windows.Version{Major: 10, Minor: 0})

	_, err = c.NetworkByName("flannel.4096")
	is("a network HNS lacks", err, windows.ErrNotFound)

	// The vxlan network, as the plane asks for it.
	sn := "10.244.1.0/24"
	overlay := &windows.HostComputeNetwork{
		Name: "flannel.4096", Type: windows.NetworkOverlay, Flags: windows.EnableNonPersistent,
		Policies: []windows.Policy{windows.NetAdapterNamePolicy("Ethernet")},
		Ipams: []windows.Ipam{{Type: "Static", Subnets: []windows.Subnet{{
			IPAddressPrefix: sn,
			Policies:        []windows.Policy{windows.VSIDPolicy(4096)},
			Routes:          []windows.Route{{NextHop: "10.244.1.1", DestinationPrefix: "0.0.0.0/0"}},
		}}}},
		SchemaVersion: windows.SchemaV2(),
	}
	n, err := c.CreateNetwork(overlay)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.DRMAC(); err != nil || n.ID == "" || n.ManagementIP() != mgmt {
		t.Errorf("created network: ID %q, DR MAC error %v, management IP %v", n.ID, err, n.ManagementIP())
	}
	if sub := n.StaticSubnet(); sub == nil || sub.IPAddressPrefix != sn || len(sub.Policies) != 1 {
		t.Errorf("created network's subnet: %+v", sub)
	}
	_, err = c.CreateNetwork(overlay)
	is("a second network of the name", err, windows.ErrExists)
	byName, err := c.NetworkByName("flannel.4096")
	if err != nil || byName.ID != n.ID {
		t.Fatalf("network by name: %+v %v", byName, err)
	}

	// A peer's route: added, refused twice, removed, not removed twice.
	rsr := windows.RemoteSubnetRoutePolicy(windows.RemoteSubnetRouteSettings{
		DestinationPrefix: "10.244.2.0/24", IsolationID: 4096, ProviderAddress: "192.0.2.11", DistributedRouterMacAddress: "0E-00-00-00-00-02",
	})
	if err := c.ModifyNetworkSettings(n.ID, windows.PolicyRequest(windows.RequestAdd, rsr)); err != nil {
		t.Fatal(err)
	}
	is("the same route again", c.ModifyNetworkSettings(n.ID, windows.PolicyRequest(windows.RequestAdd, rsr)), windows.ErrExists)
	if err := c.ModifyNetworkSettings(n.ID, windows.PolicyRequest(windows.RequestRemove, rsr)); err != nil {
		t.Fatal(err)
	}
	is("a route it lacks", c.ModifyNetworkSettings(n.ID, windows.PolicyRequest(windows.RequestRemove, rsr)), windows.ErrNotFound)
	is("a route on a network HNS lacks", c.ModifyNetworkSettings("00000000-0000-4000-8000-0000000000ff", windows.PolicyRequest(windows.RequestAdd, rsr)), windows.ErrNotFound)

	// A remote endpoint (an HNS older than 9.2 gets one per remote pod), listed by network.
	remote := &windows.HostComputeEndpoint{
		Name: "remote-10.244.2.5", HostComputeNetwork: n.ID, Flags: windows.EndpointRemote, MacAddress: "0E-2A-0A-F4-02-05",
		Policies:         []windows.Policy{windows.ProviderAddressPolicy(netip.MustParseAddr("192.0.2.11"))},
		IPConfigurations: []windows.IPConfig{{IPAddress: "10.244.2.5", PrefixLength: 32}},
		SchemaVersion:    windows.SchemaV2(),
	}
	ep, err := c.CreateEndpoint(remote)
	if err != nil {
		t.Fatal(err)
	}
	eps, err := c.NetworkEndpoints(n.ID)
	if err != nil || len(eps) != 1 || eps[0].ID != ep.ID || eps[0].ProviderAddress() != netip.MustParseAddr("192.0.2.11") {
		t.Errorf("endpoints of the network: %+v %v", eps, err)
	}
	if err := c.DeleteEndpoint(ep.ID); err != nil {
		t.Fatal(err)
	}
	is("an endpoint deleted already", c.DeleteEndpoint(ep.ID), windows.ErrNotFound)

	// host-gw's part of HNS: an L2Bridge network, its host endpoint attached to the host's
	// compartment through HNS v1 (HostAttach(1)), once.
	bridge := &windows.HostComputeNetwork{
		Name: "cbr0", Type: windows.NetworkL2Bridge, Flags: windows.EnableNonPersistent,
		Policies: []windows.Policy{windows.NetAdapterNamePolicy("Ethernet")},
		Ipams: []windows.Ipam{{Type: "Static", Subnets: []windows.Subnet{{
			IPAddressPrefix: "10.245.1.0/24",
			Routes:          []windows.Route{{NextHop: "10.245.1.1", DestinationPrefix: "0.0.0.0/0"}},
		}}}},
		SchemaVersion: windows.SchemaV2(),
	}
	bn, err := c.CreateNetwork(bridge)
	if err != nil {
		t.Fatal(err)
	}
	hostEP, err := c.CreateEndpoint(&windows.HostComputeEndpoint{
		Name: "cbr0_ep", HostComputeNetwork: bn.ID,
		IPConfigurations: []windows.IPConfig{{IPAddress: "10.245.1.2", PrefixLength: 24}},
		SchemaVersion:    windows.SchemaV2(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.HostAttach(hostEP.ID); err != nil {
		t.Fatalf("attaching the host endpoint: %v", err)
	}
	is("a second attachment", c.HostAttach(hostEP.ID), windows.ErrExists)
	if ns, err := hns.HostDefaultNamespace(); err != nil || len(ns.Resources) != 1 || !strings.Contains(string(ns.Resources[0].Data), hostEP.ID) {
		t.Errorf("host namespace after the attachment: %+v %v", ns, err)
	}
	attach := ""
	for _, call := range srv.Calls() {
		if call.Name == "HNSCall" && call.HResult == 0 && strings.Contains(call.ID, "/attach") {
			attach = call.ID + " " + call.Body
		}
	}
	if want := "/endpoints/" + hostEP.ID + "/attach " + `{"SystemType":"Host","CompartmentId":1}`; !strings.EqualFold(attach, want) {
		t.Errorf("the attachment sent: %q, want %q, as hcsshim's HostAttach(1)", attach, want)
	}

	// Deletion, and a stopped HNS.
	if err := c.DeleteNetwork(bn.ID); err != nil {
		t.Fatal(err)
	}
	is("a network deleted already", c.DeleteNetwork(bn.ID), windows.ErrNotFound)
	hns.Stop()
	_, err = c.NetworkByName("flannel.4096")
	is("HNS stopped", err, windows.ErrStopped)
	hns.Start()
	if _, err := c.Version(); err != nil {
		t.Errorf("HNS started again: %v", err)
	}

	// Every call reached the service: none was refused for its JSON.
	for _, call := range srv.Calls() {
		if call.HResult == windows.HCNInvalidJSON {
			t.Errorf("HNS's schema refused %s %s", call.Name, call.Body)
		}
	}
	if _, set := os.LookupEnv("WEFT_HNS_ADDR"); !set {
		t.Error("WEFT_HNS_ADDR unset during the test")
	}
}
