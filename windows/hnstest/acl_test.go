package hnstest

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/weftnet/weft/windows"
)

// TestACLs: the simulator takes the ACL settings hcsshim writes (v2's, as in its tests, and
// v1's single-valued fields), refuses values HNS has no meaning for, and judges flows by the
// rules acl.go sources: no ACL passes everything, any ACL makes the endpoint deny by default,
// lower priorities first, a Block before an Allow of the same priority.
func TestACLs(t *testing.T) {
	h := New(Options{Version: windows.Version{Major: 15, Minor: 4}})
	n, err := h.CreateNetwork(natNetwork(true))
	if err != nil {
		t.Fatal(err)
	}
	ep, err := h.CreateEndpoint(&windows.HostComputeEndpoint{Name: "a", HostComputeNetwork: n.ID, SchemaVersion: windows.SchemaV2()})
	if err != nil {
		t.Fatal(err)
	}
	ip := ep.IPs()[0]
	update := func(ps ...windows.Policy) error {
		return h.ModifyEndpoint(ep.ID, policyRequest(RequestUpdate, ps...))
	}
	raw := func(js string) windows.Policy { return windows.Policy{Type: "ACL", Settings: json.RawMessage(js)} }

	for _, bad := range []string{
		`{"Action":"Deny","Direction":"In"}`,
		`{"Action":"Allow","Direction":"Inbound"}`,
		`{"Action":"Allow","Direction":"In","RuleType":"Firewall"}`,
		`{"Action":"Allow","Direction":"In","Protocols":"tcp"}`,
		`{"Action":"Allow","Direction":"In","RemoteAddresses":"10.0.0.0/33"}`,
		`{"Action":"Allow","Direction":"In","LocalPorts":"90-80"}`,
	} {
		wantCode(t, bad, update(raw(bad)), windows.HCNInvalidPolicy)
	}
	for _, good := range []string{
		// hcsshim's tests (hcn/hcnutils_test.go).
		`{"Protocols":"6","Action":"Allow","Direction":"In","LocalAddresses":"192.168.100.0/24,10.0.0.21","RemoteAddresses":"192.168.100.0/24,10.0.0.21","LocalPorts":"80,8080","RemotePorts":"80,8080","RuleType":"Switch","Priority":200}`,
		// v1's ACLPolicy, as hcsshim issue 1059's allow-all.
		`{"Id":"x","Protocol":256,"Action":"Allow","Direction":"Out","RuleType":"Switch","Priority":1000,"ServiceName":"s"}`,
	} {
		if err := update(raw(good)); err != nil {
			t.Errorf("%s: %v", good, err)
		}
	}

	allows := func(step string, f Flow, want bool) {
		t.Helper()
		got, rule, err := h.ACLAllows(ip, f)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: %+v allowed %v (by %q), want %v", step, f, got, rule, want)
		}
	}
	web := Flow{In: true, Protocol: ProtoTCP, Remote: netip.MustParseAddr("10.1.0.5"), Port: 80}
	if err := h.ModifyEndpoint(ep.ID, policyRequest(windows.RequestRemove, raw(`{"Id":"x","Protocol":256,"Action":"Allow","Direction":"Out","RuleType":"Switch","Priority":1000,"ServiceName":"s"}`))); err != nil {
		t.Fatal(err)
	}
	allows("no ACL", web, true)

	acl := func(s windows.ACLSettings) windows.Policy { return windows.ACLPolicy(s) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(update(acl(windows.ACLSettings{Action: windows.ACLAllow, Direction: windows.ACLOut, Priority: 100})))
	allows("an Out ACL only: In denied by default", web, false)
	allows("an Out ACL only: Out allowed", Flow{Protocol: ProtoUDP, Remote: netip.MustParseAddr("10.1.0.5"), Port: 53}, true)

	must(update(
		acl(windows.ACLSettings{Action: windows.ACLAllow, Direction: windows.ACLIn, Protocols: "6", LocalPorts: "80-81", RemoteAddresses: "10.1.0.0/16", Priority: 200}),
		acl(windows.ACLSettings{Action: windows.ACLBlock, Direction: windows.ACLIn, RemoteAddresses: "10.1.0.5", Priority: 200}),
		acl(windows.ACLSettings{Action: windows.ACLAllow, Direction: windows.ACLIn, RemoteAddresses: "10.1.0.6", Priority: 100}),
	))
	allows("a Block of the same priority first", web, false)
	allows("an Allow of a lower priority first", Flow{In: true, Protocol: ProtoUDP, Remote: netip.MustParseAddr("10.1.0.6"), Port: 9}, true)
	allows("the port range", Flow{In: true, Protocol: ProtoTCP, Remote: netip.MustParseAddr("10.1.0.7"), Port: 81}, true)
	allows("outside the port range", Flow{In: true, Protocol: ProtoTCP, Remote: netip.MustParseAddr("10.1.0.7"), Port: 82}, false)
	allows("another protocol", Flow{In: true, Protocol: ProtoUDP, Remote: netip.MustParseAddr("10.1.0.7"), Port: 80}, false)
	allows("outside the addresses", Flow{In: true, Protocol: ProtoTCP, Remote: netip.MustParseAddr("10.2.0.7"), Port: 80}, false)
}
