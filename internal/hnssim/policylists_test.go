package hnssim

import (
	"encoding/json"
	"testing"

	"github.com/weftnet/weft/windows"
)

// TestV1PolicyLists: HNS v1's /policylists/ shows the load balancers made through v2, one
// ELB policy a port mapping with the load balancer's VIPs and flags and its endpoints as
// references, as hcsshim's PolicyList and ELBPolicy read them; none is an empty list (what
// Windows kube-proxy asks first); DELETE removes the load balancer from v2's view too; an
// unknown one, and making one through v1, are refused.
func TestV1PolicyLists(t *testing.T) {
	v := newV1Sim(t)
	var empty []json.RawMessage
	v.ok("GET", "/policylists/", "", &empty)
	if a := v.envelope(v.call("GET", "/policylists/", "")); string(a.Output) != "[]" {
		t.Errorf("no load balancers: output %s, want []", a.Output)
	}

	var n hnsNetwork
	v.ok("POST", "/networks/", `{"Name":"x","Type":"L2Bridge","Subnets":[{"AddressPrefix":"10.1.0.0/24","GatewayAddress":"10.1.0.1"}]}`, &n)
	var ep struct{ ID string }
	v.ok("POST", "/endpoints/", `{"VirtualNetwork":"`+n.ID+`","IPAddress":"10.1.0.5"}`, &ep)
	v.hns.SetVersion(windows.Version{Major: 10, Minor: 2}) // DSR
	lb := `{"HostComputeEndpoints":["` + ep.ID + `"],"SourceVIP":"10.1.0.254","FrontendVIPs":["10.96.0.10"],` +
		`"PortMappings":[{"Protocol":6,"InternalPort":8080,"ExternalPort":80,"Flags":1},{"Protocol":17,"InternalPort":53,"ExternalPort":53}],` +
		`"Flags":1,"SchemaVersion":{"Major":2,"Minor":0}}`
	made := v.v2(request{call: "HcnCreateLoadBalancer", a: lb})
	var got struct{ ID string }
	if err := json.Unmarshal([]byte(v.v2(request{call: "HcnQueryLoadBalancerProperties", handle: made.handle}).result), &got); err != nil {
		t.Fatal(err)
	}

	var lists []struct {
		ID         string
		References []string
		Policies   []map[string]any
	}
	v.ok("GET", "/policylists/", "", &lists)
	if len(lists) != 1 || lists[0].ID != got.ID || len(lists[0].References) != 1 || lists[0].References[0] != "/endpoints/"+ep.ID {
		t.Fatalf("policy lists %+v, want one of ID %s referring to /endpoints/%s", lists, got.ID, ep.ID)
	}
	want := []string{
		`{"ExternalPort":80,"ILB":true,"InternalPort":8080,"IsDSR":true,"Protocol":6,"SourceVIP":"10.1.0.254","Type":"ELB","VIPs":["10.96.0.10"]}`,
		`{"ExternalPort":53,"InternalPort":53,"IsDSR":true,"Protocol":17,"SourceVIP":"10.1.0.254","Type":"ELB","VIPs":["10.96.0.10"]}`,
	}
	if len(lists[0].Policies) != len(want) {
		t.Fatalf("policies %v, want %d", lists[0].Policies, len(want))
	}
	for i, p := range lists[0].Policies {
		if b, _ := json.Marshal(p); string(b) != want[i] {
			t.Errorf("policy %d: %s, want %s", i, b, want[i])
		}
	}
	var one struct{ ID string }
	v.ok("GET", "/policylists/"+got.ID, "", &one)
	if one.ID != got.ID {
		t.Errorf("policy list %s: %+v", got.ID, one)
	}

	v.refused("POST", "/policylists/", `{"Policies":[]}`, "POST /policylists/ is not simulated")
	v.ok("DELETE", "/policylists/"+got.ID, "", nil)
	if a := v.s.Call(request{call: "HcnOpenLoadBalancer", id: got.ID}); windows.HResult(a.hr) != windows.ElementNotFound {
		t.Errorf("the load balancer after its policy list was deleted: HRESULT 0x%08X, want ERROR_NOT_FOUND", a.hr)
	}
	v.refused("GET", "/policylists/"+got.ID, "", "Element not found.")
	v.refused("DELETE", "/policylists/"+got.ID, "", "Element not found.")
}

// TestSessionAffinityBelow12: a load balancer distributed by source IP is made at HNS 9.5
// too, kept as sent (standalone.go says why), as Windows kube-proxy sends it there.
func TestSessionAffinityBelow12(t *testing.T) {
	v := newV1Sim(t)
	v.hns.SetVersion(windows.Version{Major: 9, Minor: 5})
	lb := `{"FrontendVIPs":["10.96.0.20"],"PortMappings":[{"Protocol":6,"InternalPort":443,"ExternalPort":8443,"DistributionType":1}],"SchemaVersion":{"Major":2,"Minor":0}}`
	v.v2(request{call: "HcnCreateLoadBalancer", a: lb})
	lbs, err := v.s.LoadBalancers()
	if err != nil || len(lbs) != 1 || lbs[0].PortMappings[0].DistributionType != 1 {
		t.Errorf("load balancers %+v, %v: want the one made, distributed by source IP", lbs, err)
	}
}
