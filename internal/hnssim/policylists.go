package hnssim

import (
	"encoding/json"
	"strings"
)

// HNS v1's policy lists are its view of the load balancers: each v2 load balancer is one
// policy list, its endpoints the list's References ("/endpoints/<id>", as hcsshim's v1
// AddLoadBalancer writes them, internal/hns/hnspolicylist.go) and each of its port mappings
// one ELB policy (hcsshim's ELBPolicy and LBPolicy: Protocol, InternalPort, ExternalPort,
// SourceVIP, VIPs, ILB, IsDSR). Get-HnsPolicyList is how Windows' own troubleshooting
// guides show the load balancers kube-proxy made through v2 (microsoft/SDN,
// Kubernetes/windows/debug), so both views are one set of objects here. Windows kube-proxy
// lists them once at start to tell whether HNS can do kernel-mode load balancing (hnslib's
// HNSListPolicyListRequest in kubernetes pkg/proxy/winkernel/supported.go,
// IsCompatible), and stops when that fails. DELETE /policylists/<id> deletes the load
// balancer (hcsshim's PolicyList.Delete); making one through v1 (POST) is not simulated.

// v1PolicyList is hcsshim's internal/hns PolicyList.
type v1PolicyList struct {
	ID                 string
	EndpointReferences []string          `json:"References,omitempty"`
	Policies           []json.RawMessage `json:"Policies,omitempty"`
}

// v1ELBPolicy is hcsshim's ELBPolicy, flattened as its JSON is.
type v1ELBPolicy struct {
	Type         string
	Protocol     uint32 `json:",omitempty"`
	InternalPort uint16
	ExternalPort uint16
	SourceVIP    string   `json:",omitempty"`
	VIPs         []string `json:",omitempty"`
	ILB          bool     `json:",omitempty"`
	DSR          bool     `json:"IsDSR,omitempty"`
}

// lbPortMappingILB is LoadBalancerPortMappingFlagsILB (hcsshim hcn/hcnloadbalancer.go).
const lbPortMappingILB = 1

// policyListCall answers /policylists/: GET of all or one, DELETE of one.
func (s *Server) policyListCall(method, id, sub string) answer {
	switch {
	case sub != "":
	case method == "GET" && id == "":
		lbs, err := s.LoadBalancers()
		if err != nil {
			return v1Failed(fail(err))
		}
		out := make([]v1PolicyList, 0, len(lbs))
		for i := range lbs {
			out = append(out, policyListOf(&lbs[i]))
		}
		return v1OK(out)
	case method == "GET":
		lb, a := s.loadBalancer(id)
		if a.hr != 0 {
			return v1Failed(a)
		}
		return v1OK(policyListOf(lb))
	case method == "DELETE":
		return v1Result(s.v2("HcnDeleteLoadBalancer", id, 0, ""), nil)
	}
	return v1OK(nil).withError(method + " /policylists/" + strings.Trim(id+"/"+sub, "/") + " is not simulated")
}

// LoadBalancer is a load balancer as HNS keeps it: hcsshim's HostComputeLoadBalancer.
type LoadBalancer = loadBalancerSchema

// LoadBalancers returns every load balancer, in the order they were made; an error if HNS
// is stopped.
func (s *Server) LoadBalancers() ([]LoadBalancer, error) {
	if _, err := s.hns.Version(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []LoadBalancer
	for _, o := range s.others {
		if o.kind != "LoadBalancer" {
			continue
		}
		var lb LoadBalancer
		if err := json.Unmarshal(o.doc, &lb); err != nil {
			return nil, err // the documents kept are the ones strict() read
		}
		out = append(out, lb)
	}
	return out, nil
}

// loadBalancer is one load balancer by ID, or the failed answer for an unknown one.
func (s *Server) loadBalancer(id string) (*LoadBalancer, answer) {
	o, found := s.standalone("LoadBalancer", strings.Trim(id, "{}"))
	if !found {
		return nil, fail(notFound("HNSCall", "LoadBalancer", id))
	}
	var lb LoadBalancer
	if err := json.Unmarshal(o.doc, &lb); err != nil {
		return nil, fail(err)
	}
	return &lb, answer{}
}

// policyListOf is a load balancer in v1's shape.
func policyListOf(lb *LoadBalancer) v1PolicyList {
	pl := v1PolicyList{ID: lb.ID}
	for _, ep := range lb.HostComputeEndpoints {
		pl.EndpointReferences = append(pl.EndpointReferences, "/endpoints/"+ep)
	}
	for _, pm := range lb.PortMappings {
		pl.Policies = append(pl.Policies, mustJSON(v1ELBPolicy{
			Type: "ELB", Protocol: pm.Protocol, InternalPort: pm.InternalPort, ExternalPort: pm.ExternalPort,
			SourceVIP: lb.SourceVIP, VIPs: lb.FrontendVIPs, ILB: pm.Flags&lbPortMappingILB != 0, DSR: lb.Flags&lbFlagDSR != 0,
		}))
	}
	return pl
}
