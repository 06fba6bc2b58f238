package windows

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/weftnet/weft/backend"
)

func mustMAC(s string) backend.MAC {
	m, err := backend.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func peer(sn, pub, mac string) backend.Peer {
	return backend.Peer{Subnet: netip.MustParsePrefix(sn), VTEPMAC: mustMAC(mac), PublicIP: netip.MustParseAddr(pub)}
}

var owned = scope{network: netip.MustParsePrefix("10.244.0.0/16"), own: netip.MustParsePrefix("10.244.1.0/24")}

func added(es []rsrEntry) []Policy {
	var out []Policy
	for _, e := range es {
		out = append(out, e.Policy)
	}
	return out
}

func describe(ps []Policy) string {
	var out []string
	for _, p := range ps {
		var s RemoteSubnetRouteSettings
		_ = p.Decode(&s)
		out = append(out, fmt.Sprintf("%s>%s@%s", s.DestinationPrefix, s.DistributedRouterMacAddress, s.ProviderAddress))
	}
	return strings.Join(out, " ")
}

func TestDiffRemoteSubnetRoutes(t *testing.T) {
	a := peer("10.244.2.0/24", "192.168.1.11", "c6:d2:32:6f:8f:44")
	b := peer("10.244.3.0/24", "192.168.1.12", "00:15:5d:c0:00:09")
	rsr := func(p backend.Peer) Policy { return RemoteSubnetRoutePolicy(rsrSettings(p, 4096)) }
	// As HNS might report it: dashes, upper case.
	aUpper := RemoteSubnetRoutePolicy(RemoteSubnetRouteSettings{DestinationPrefix: "10.244.2.0/24", IsolationID: 4096, ProviderAddress: "192.168.1.11", DistributedRouterMacAddress: "C6-D2-32-6F-8F-44"})
	foreign := RemoteSubnetRoutePolicy(RemoteSubnetRouteSettings{DestinationPrefix: "172.16.0.0/24", IsolationID: 4096, ProviderAddress: "192.168.1.99", DistributedRouterMacAddress: "00-15-5D-00-00-01"})
	ownSubnet := RemoteSubnetRoutePolicy(RemoteSubnetRouteSettings{DestinationPrefix: "10.244.1.0/24", IsolationID: 4096, ProviderAddress: "192.168.1.98", DistributedRouterMacAddress: "00-15-5D-00-00-02"})
	otherVNI := RemoteSubnetRoutePolicy(RemoteSubnetRouteSettings{DestinationPrefix: "10.244.2.0/24", IsolationID: 4097, ProviderAddress: "192.168.1.11", DistributedRouterMacAddress: "c6:d2:32:6f:8f:44"})
	for _, tc := range []struct {
		name        string
		peers       []backend.Peer
		have        []Policy
		remove, add string
	}{
		{"cold", []backend.Peer{a, b}, nil, "", describe([]Policy{rsr(a), rsr(b)})},
		{"converged", []backend.Peer{a, b}, []Policy{rsr(b), rsr(a)}, "", ""},
		{"HNS's spelling of the MAC", []backend.Peer{a}, []Policy{aUpper}, "", ""},
		{"peer gone", []backend.Peer{a}, []Policy{rsr(a), rsr(b)}, describe([]Policy{rsr(b)}), ""},
		{"MAC changed", []backend.Peer{peer("10.244.2.0/24", "192.168.1.11", "c6:d2:32:6f:8f:45")}, []Policy{rsr(a)},
			describe([]Policy{rsr(a)}), "10.244.2.0/24>c6:d2:32:6f:8f:45@192.168.1.11"},
		{"duplicate", []backend.Peer{a}, []Policy{rsr(a), aUpper}, describe([]Policy{aUpper}), ""},
		{"wrong VNI", []backend.Peer{a}, []Policy{otherVNI}, describe([]Policy{otherVNI}), describe([]Policy{rsr(a)})},
		{"not ours", nil, []Policy{foreign, ownSubnet, HostRoutePolicy()}, "", ""},
	} {
		plan := diffRemoteSubnetRoutes(tc.peers, 4096, tc.have, owned)
		if got := describe(plan.Remove); got != tc.remove {
			t.Errorf("%s: remove %q, want %q", tc.name, got, tc.remove)
		}
		if got := describe(added(plan.Add)); got != tc.add {
			t.Errorf("%s: add %q, want %q", tc.name, got, tc.add)
		}
	}
}

func TestDiffRemoteEndpoints(t *testing.T) {
	a := peer("10.244.2.0/29", "192.168.1.11", "c6:d2:32:6f:8f:44")
	want := func(ip, pa string) HostComputeEndpoint {
		return remoteEndpoint("net", "0E-2A", netip.MustParseAddr(ip), netip.MustParseAddr(pa))
	}
	kubeProxy := HostComputeEndpoint{Name: "", IPConfigurations: []IPConfig{{IPAddress: "10.244.2.3"}}, MacAddress: "02-11-0A-F4-02-03", Flags: EndpointRemote}
	local := HostComputeEndpoint{Name: "remote_10.244.1.7", IPConfigurations: []IPConfig{{IPAddress: "10.244.1.7"}}}
	moved := want("10.244.2.4", "192.168.1.99")
	names := func(eps []HostComputeEndpoint) string {
		var s []string
		for _, e := range eps {
			s = append(s, e.Name+"@"+e.ProviderAddress().String())
		}
		return strings.Join(s, " ")
	}
	have := []HostComputeEndpoint{want("10.244.2.2", "192.168.1.11"), want("10.244.2.3", "192.168.1.11"), moved,
		want("10.244.9.2", "192.168.1.19"), kubeProxy, local}
	plan := diffRemoteEndpoints([]backend.Peer{a}, "net", "0E-2A", have, owned)
	if got, want := names(plan.Delete), "remote_10.244.2.4@192.168.1.99 remote_10.244.9.2@192.168.1.19"; got != want {
		t.Errorf("delete %q, want %q", got, want)
	}
	if got, want := names(plan.Create), "remote_10.244.2.4@192.168.1.11 remote_10.244.2.5@192.168.1.11 remote_10.244.2.6@192.168.1.11"; got != want {
		t.Errorf("create %q, want %q", got, want)
	}
	if got := conjureMAC("0e:2a", netip.MustParseAddr("10.244.2.254")); got != "0E-2A-0A-F4-02-FE" {
		t.Errorf("conjureMAC %s", got)
	}
}

func TestDiffRoutes(t *testing.T) {
	r := func(dst, via string, idx uint32, proto RouteProtocol) HostRoute {
		return HostRoute{Dst: netip.MustParsePrefix(dst), NextHop: netip.MustParseAddr(via), IfIndex: idx, Protocol: proto}
	}
	want := []HostRoute{r("10.244.2.0/24", "192.168.1.11", 7, ProtoNetMgmt), r("10.244.3.0/24", "192.168.1.12", 7, ProtoNetMgmt)}
	have := []HostRoute{
		r("10.244.2.0/24", "192.168.1.11", 7, ProtoNetMgmt), // kept
		r("10.244.3.0/24", "192.168.1.13", 7, ProtoNetMgmt), // old gateway: replaced
		r("10.244.4.0/24", "192.168.1.14", 7, ProtoNetMgmt), // peer gone
		r("10.244.1.0/24", "0.0.0.0", 9, 2),                 // the node's own subnet, on-link
		r("10.244.1.0/24", "10.244.1.1", 9, ProtoNetMgmt),   // into the own subnet: not ours
		r("10.244.5.0/24", "192.168.1.15", 7, 2),            // not a static route
		r("0.0.0.0/0", "192.168.1.1", 7, ProtoNetMgmt),      // outside the network
	}
	plan := diffRoutes(want, have, owned)
	if len(plan.Add) != 1 || plan.Add[0].String() != "10.244.3.0/24 via 192.168.1.12 if 7" {
		t.Errorf("add %v", plan.Add)
	}
	if len(plan.Delete) != 2 || plan.Delete[0].Dst.String() != "10.244.3.0/24" || plan.Delete[1].Dst.String() != "10.244.4.0/24" {
		t.Errorf("delete %v", plan.Delete)
	}
}

func TestAddresses(t *testing.T) {
	sn := netip.MustParsePrefix("10.244.1.0/24")
	if got := SourceVIP(sn); got.String() != "10.244.1.254" {
		t.Errorf("source VIP %s", got)
	}
	if got := podAddresses(netip.MustParsePrefix("10.244.1.0/29")); fmt.Sprint(got) != "[10.244.1.2 10.244.1.3 10.244.1.4 10.244.1.5 10.244.1.6]" {
		t.Errorf("pod addresses %v", got)
	}
	if n := len(podAddresses(sn)); n != 253 {
		t.Errorf("%d pod addresses in a /24", n)
	}
	if got := hostEndpointIP(sn); got.String() != "10.244.1.2" {
		t.Errorf("host endpoint %s", got)
	}
	for in, want := range map[string]string{"vEthernet (Ethernet)": "Ethernet", "Ethernet 2": "Ethernet 2", "vEthernet (nat": "vEthernet (nat"} {
		if got := physicalAdapter(in); got != want {
			t.Errorf("physicalAdapter(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]PeerMode{"": PeersAuto, "auto": PeersAuto, "remotesubnetroute": PeersRemoteSubnetRoute, "RemoteEndpoints": PeersRemoteEndpoints} {
		if got, err := ParsePeerMode(in); err != nil || got != want {
			t.Errorf("ParsePeerMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParsePeerMode("vxlan"); err == nil {
		t.Error("ParsePeerMode accepted vxlan")
	}
}

func TestDefaultRoute(t *testing.T) {
	r := func(dst string, metric uint32, idx uint32) HostRoute {
		return HostRoute{Dst: netip.MustParsePrefix(dst), IfIndex: idx, Metric: metric}
	}
	got, ok := defaultRoute([]HostRoute{r("10.0.0.0/8", 0, 1), r("0.0.0.0/0", 25, 2), r("0.0.0.0/0", 5, 3)})
	if !ok || got.IfIndex != 3 {
		t.Errorf("default route %+v, %v", got, ok)
	}
	if _, ok := defaultRoute([]HostRoute{r("10.0.0.0/8", 0, 1)}); ok {
		t.Error("found a default route in none")
	}
}

// TestPolicyJSON: the policies' JSON as HNS reads it.
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
