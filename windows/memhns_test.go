package windows

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
)

func overlayFor(name, sn string, vni uint32) *HostComputeNetwork {
	return overlayNetwork(name, backend.VXLANDevice{VNI: vni, Underlay: testAdapter}, netip.MustParsePrefix(sn))
}

func TestPolicyJSON(t *testing.T) {
	for _, tc := range []struct {
		p    Policy
		want string
	}{
		{RemoteSubnetRoutePolicy(RemoteSubnetRouteSettings{DestinationPrefix: "192.168.2.0/24", IsolationID: 5000, ProviderAddress: "1.1.1.1", DistributedRouterMacAddress: "00-12-34-56-78-9a"}),
			`{"Type":"RemoteSubnetRoute","Settings":{"DestinationPrefix":"192.168.2.0/24","IsolationId":5000,"ProviderAddress":"1.1.1.1","DistributedRouterMacAddress":"00-12-34-56-78-9a"}}`},
		{HostRoutePolicy(), `{"Type":"HostRoute","Settings":{}}`},
		{VSIDPolicy(4096), `{"Type":"VSID","Settings":{"IsolationId":4096}}`},
		{NetAdapterNamePolicy("Ethernet"), `{"Type":"NetAdapterName","Settings":{"NetworkAdapterName":"Ethernet"}}`},
		{ProviderAddressPolicy(netip.MustParseAddr("10.0.0.5")), `{"Type":"ProviderAddress","Settings":{"ProviderAddress":"10.0.0.5"}}`},
		{DrMacAddressPolicy("00-15-5D-01-02-03"), `{"Type":"DrMacAddress","Settings":{"Address":"00-15-5D-01-02-03"}}`},
	} {
		b, err := json.Marshal(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("got  %s\nwant %s", b, tc.want)
		}
	}
}

// TestMemHNSRefuses: what HNS (or hcn before it) refuses, MemHNS refuses, with errors
// callers can tell apart.
func TestMemHNSRefuses(t *testing.T) {
	h := NewMemHNS(MemOptions{Version: Version{Major: 9, Minor: 1}, Host: NewMemHost(Interface{Index: 4, Name: testAdapter})})
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
	badAdapter.Policies = []Policy{NetAdapterNamePolicy("Ethernet 9")}
	rsr := RemoteSubnetRoutePolicy(RemoteSubnetRouteSettings{DestinationPrefix: "10.244.3.0/24", IsolationID: 4096, ProviderAddress: "192.168.1.3", DistributedRouterMacAddress: "00-15-5D-00-00-01"})
	for _, tc := range []struct {
		name string
		err  error
		is   error  // nil: any error
		text string // part of the message
	}{
		{"no default route", func() error { _, err := h.CreateNetwork(noDefault); return err }(), nil, "no default gateway"},
		{"route without gateway", func() error { _, err := h.CreateNetwork(noGateway); return err }(), nil, "no gateway specified"},
		{"overlay without VSID", func() error { _, err := h.CreateNetwork(noVSID); return err }(), nil, "VSID"},
		{"VSID below 4096", func() error { _, err := h.CreateNetwork(lowVSID); return err }(), nil, "4096"},
		{"unknown adapter", func() error { _, err := h.CreateNetwork(badAdapter); return err }(), ErrNotFound, "Ethernet 9"},
		{"duplicate name", func() error { _, err := h.CreateNetwork(overlayFor("flannel.4096", "10.244.9.0/24", 4096)); return err }(), ErrExists, ""},
		{"delete unknown network", h.DeleteNetwork("00000000-0000-4000-8000-0000000000FF"), ErrNotFound, ""},
		{"modify unknown network", h.ModifyNetworkSettings("nope", PolicyRequest(RequestAdd, rsr)), ErrNotFound, ""},
		{"endpoints of unknown network", func() error { _, err := h.NetworkEndpoints("nope"); return err }(), ErrNotFound, ""},
		{"network by unknown name", func() error { _, err := h.NetworkByName("cbr0"); return err }(), ErrNotFound, ""},
		{"delete unknown endpoint", h.DeleteEndpoint("nope"), ErrNotFound, ""},
		{"remote subnet route on 9.1", h.ModifyNetworkSettings(net.ID, PolicyRequest(RequestAdd, rsr)), ErrNotSupported, "9.1"},
		{"host route on 9.1", h.ModifyNetworkSettings(net.ID, PolicyRequest(RequestAdd, HostRoutePolicy())), ErrNotSupported, ""},
		{"remove a policy it does not have", h.ModifyNetworkSettings(net.ID, PolicyRequest(RequestRemove, rsr)), ErrNotFound, ""},
		{"namespace in endpoint create", func() error {
			_, err := h.CreateEndpoint(&HostComputeEndpoint{HostComputeNetwork: net.ID, HostComputeNamespace: "x", IPConfigurations: []IPConfig{{IPAddress: "10.244.1.5"}}})
			return err
		}(), nil, "read only"},
		{"local endpoint outside the subnet", func() error {
			_, err := h.CreateEndpoint(&HostComputeEndpoint{HostComputeNetwork: net.ID, IPConfigurations: []IPConfig{{IPAddress: "10.244.2.5"}}})
			return err
		}(), nil, "outside"},
		{"remote endpoint without provider address", func() error {
			_, err := h.CreateEndpoint(&HostComputeEndpoint{HostComputeNetwork: net.ID, Flags: EndpointRemote, IPConfigurations: []IPConfig{{IPAddress: "10.244.2.5"}}})
			return err
		}(), nil, "ProviderAddress"},
		{"attach to unknown namespace", h.ModifyNamespaceSettings("nope", AttachRequest(RequestAdd, "x")), ErrNotFound, ""},
	} {
		if tc.err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if tc.is != nil && !errors.Is(tc.err, tc.is) {
			t.Errorf("%s: %v, want errors.Is %v", tc.name, tc.err, tc.is)
		}
		if !strings.Contains(tc.err.Error(), tc.text) {
			t.Errorf("%s: %v, want it to mention %q", tc.name, tc.err, tc.text)
		}
	}
	if r := h.Requests(); len(r) != 1 || r[0].Op != "CreateNetwork" {
		t.Errorf("refused requests were recorded: %+v", r)
	}

	// Duplicates: a second route to a destination, a second endpoint on an address, a
	// second attachment.
	h.SetVersion(Version{Major: 10, Minor: 0})
	if err := h.ModifyNetworkSettings(net.ID, PolicyRequest(RequestAdd, rsr)); err != nil {
		t.Fatal(err)
	}
	rsr2 := RemoteSubnetRoutePolicy(RemoteSubnetRouteSettings{DestinationPrefix: "10.244.3.0/24", IsolationID: 4096, ProviderAddress: "192.168.1.4", DistributedRouterMacAddress: "00-15-5D-00-00-02"})
	if err := h.ModifyNetworkSettings(net.ID, PolicyRequest(RequestAdd, rsr2)); !errors.Is(err, ErrExists) {
		t.Errorf("second route to 10.244.3.0/24: %v", err)
	}
	ep := &HostComputeEndpoint{Name: "a", HostComputeNetwork: net.ID, IPConfigurations: []IPConfig{{IPAddress: "10.244.1.5", PrefixLength: 24}}, SchemaVersion: schemaV2()}
	made, err := h.CreateEndpoint(ep)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.CreateEndpoint(ep); !errors.Is(err, ErrExists) {
		t.Errorf("second endpoint on 10.244.1.5: %v", err)
	}
	ns, err := h.CreateNamespace(&HostComputeNamespace{Type: NamespaceHostDefault, SchemaVersion: schemaV2()})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.ModifyNamespaceSettings(ns.ID, AttachRequest(RequestAdd, made.ID)); err != nil {
		t.Fatal(err)
	}
	if err := h.ModifyNamespaceSettings(ns.ID, AttachRequest(RequestAdd, made.ID)); !errors.Is(err, ErrExists) {
		t.Errorf("second attach: %v", err)
	}
	// Removing a policy as HNS reported it works even if HNS wrote it differently.
	got, _ := h.NetworkByName("flannel.4096")
	for _, p := range got.PoliciesOf(PolicyRemoteSubnetRoute) {
		var buf bytes.Buffer
		_ = json.Indent(&buf, p.Settings, "", "  ")
		p.Settings = buf.Bytes()
		if err := h.ModifyNetworkSettings(net.ID, PolicyRequest(RequestRemove, p)); err != nil {
			t.Errorf("removing the reported policy: %v", err)
		}
	}
}

func TestMemHNSBlipAndReboot(t *testing.T) {
	clock := newClock()
	mgmt := netip.MustParseAddr("192.168.1.10")
	h := NewMemHNS(MemOptions{ManagementIP: mgmt, Blip: 2 * time.Second, Now: clock.Now})
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
	if mac, err := n.DRMAC(); err != nil || !strings.HasPrefix(hnsMAC(mac), "00-15-5D-") {
		t.Errorf("DR MAC %v, %v", mac, err)
	}
	_ = clock.Sleep(t.Context(), 2*time.Second)
	n, _ = h.NetworkByName("flannel.4096")
	if n.ManagementIP() != mgmt {
		t.Errorf("management IP %v after the blip", n.ManagementIP())
	}
	h.Reboot()
	if _, err := h.NetworkByName("flannel.4096"); !errors.Is(err, ErrNotFound) {
		t.Errorf("non-persistent network after reboot: %v", err)
	}
	if _, err := h.NetworkByName("persistent"); err != nil {
		t.Errorf("persistent network after reboot: %v", err)
	}
}

// TestRequestGolden: the JSON of every kind of request weft sends HNS, as hcn would send
// it, in testdata/requests.
func TestRequestGolden(t *testing.T) {
	kinds := map[string]Request{}
	name := func(r Request) string {
		switch r.Op {
		case "CreateNetwork":
			var n HostComputeNetwork
			_ = json.Unmarshal(r.Body, &n)
			return "create-network-" + strings.ToLower(string(n.Type))
		case "ModifyNetworkSettings":
			var m ModifyNetworkSettingRequest
			var pr PolicyNetworkRequest
			_ = json.Unmarshal(r.Body, &m)
			_ = json.Unmarshal(m.Settings, &pr)
			return "network-" + strings.ToLower(string(m.RequestType)) + "-" + strings.ToLower(string(pr.Policies[0].Type))
		case "CreateEndpoint":
			var ep HostComputeEndpoint
			_ = json.Unmarshal(r.Body, &ep)
			if ep.Flags&EndpointRemote != 0 {
				return "create-endpoint-remote"
			}
			return "create-endpoint-host"
		case "ModifyNamespaceSettings":
			return "namespace-attach-endpoint"
		}
		return strings.ToLower(r.Op)
	}
	collect := func(n *winNode) {
		for _, r := range n.hns.Requests() {
			if k := name(r); kinds[k].Op == "" {
				kinds[k] = r
			}
		}
		n.hns.ResetRequests()
	}
	a := vxlanLease(t, "10.244.2.0/28", "192.168.1.11", "c6:d2:32:6f:8f:44")
	a2 := vxlanLease(t, "10.244.2.0/28", "192.168.1.11", "c6:d2:32:6f:8f:45")
	conf := `{"Network":"10.244.0.0/16","SubnetLen":28,"Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}`
	o := newWinNode(t, mustConfig(t, conf), "192.168.1.10", hns10, Config{})
	o.mustAcquire("10.244.1.0/28")
	o.mustConverge([]subnet.Lease{a})
	o.mustConverge([]subnet.Lease{a2})
	o.restart()
	o.mustAcquire("10.244.1.16/28") // another subnet: the network is replaced
	collect(o)
	e := newWinNode(t, mustConfig(t, conf), "192.168.1.10", Version{Major: 9, Minor: 1}, Config{})
	e.mustAcquire("10.244.1.0/28")
	e.mustConverge([]subnet.Lease{a})
	e.mustConverge(nil)
	collect(e)
	g := newWinNode(t, mustConfig(t, hostgwConf), "192.168.1.10", hns10, Config{DNSServers: []string{"10.96.0.10"}})
	g.mustAcquire("10.244.1.0/24")
	collect(g)

	for _, k := range []string{
		"create-network-overlay", "create-network-l2bridge", "deletenetwork",
		"network-add-remotesubnetroute", "network-remove-remotesubnetroute", "network-add-hostroute",
		"create-endpoint-remote", "create-endpoint-host", "deleteendpoint",
		"createnamespace", "namespace-attach-endpoint",
	} {
		r, ok := kinds[k]
		if !ok {
			t.Errorf("no %s request was made", k)
			continue
		}
		var b bytes.Buffer
		if err := json.Indent(&b, mustMarshal(t, r), "", "  "); err != nil {
			t.Fatal(err)
		}
		golden(t, filepath.Join("testdata", "requests", k+".json"), b.String()+"\n")
		delete(kinds, k)
	}
	for k := range kinds {
		t.Errorf("request kind %s has no golden file", k)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
