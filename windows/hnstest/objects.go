package hnstest

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"

	"github.com/weftnet/weft/windows"
)

// NamespaceHost is the type HNS gives a namespace made without one (containerd's, made as
// HostComputeNamespace{}): a compartment of its own on the host. HNS's schema enums read
// as strings, and an absent one as the enum's first value; hcsshim lists the namespace
// types Host, HostDefault, Guest, GuestDefault (hcn/hcnnamespace.go). Unverified.
const NamespaceHost windows.NamespaceType = "Host"

// DeleteNamespace is HcnDeleteNamespace, as containerd calls it when it removes a sandbox
// (pkg/netns/netns_windows.go). Endpoints still attached are detached (unverified).
func (h *HNS) DeleteNamespace(id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("DeleteNamespace")
	if h.stopped {
		return stoppedError()
	}
	i := slices.IndexFunc(h.namespaces, func(ns *windows.HostComputeNamespace) bool { return strings.EqualFold(ns.ID, id) })
	if i < 0 {
		return hnsError("HcnDeleteNamespace", windows.ElementNotFound, "namespace %s not found", id)
	}
	h.record("DeleteNamespace", id, nil)
	for _, ep := range h.endpoints {
		if strings.EqualFold(ep.HostComputeNamespace, h.namespaces[i].ID) {
			h.detach(ep)
		}
	}
	h.namespaces = slices.Delete(h.namespaces, i, i+1)
	return nil
}

// EndpointRequest is HcnModifyEndpoint's request (hcsshim hcn/hcnendpoint.go,
// ModifyEndpointSettingRequest): ResourceType "Policy" with {"Policies": […]} settings.
type EndpointRequest = windows.ModifyEndpointSettingRequest

// RequestUpdate replaces policies (an endpoint's ACLs, in hcsshim's ApplyPolicy tests).
const RequestUpdate = windows.RequestUpdate

// ModifyEndpointSettings implements windows.Client: ModifyEndpoint.
func (h *HNS) ModifyEndpointSettings(id string, req *windows.ModifyEndpointSettingRequest) error {
	return h.ModifyEndpoint(id, req)
}

// ModifyEndpoint is HcnModifyEndpoint with a policy request: Add adds the policies
// (hcsshim's TestAddL4WfpProxyPolicyOnEndpoint), Remove removes each as its JSON value
// (as for a network's), Update puts the request's policies in place of the endpoint's
// policies of their types (hcsshim's TestApplyPolicyOnEndpoint and TestModifyEndpointSettings
// update ACLs and read them back; that other types stay is unverified). Port requests
// (a VM's switch port) are not simulated.
func (h *HNS) ModifyEndpoint(id string, req *EndpointRequest) error {
	const call = "HcnModifyEndpoint"
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("ModifyEndpoint")
	if h.stopped {
		return stoppedError()
	}
	i := slices.IndexFunc(h.endpoints, func(ep *windows.HostComputeEndpoint) bool { return strings.EqualFold(ep.ID, id) })
	if i < 0 {
		return hnsError(call, windows.HCNEndpointNotFound, "endpoint %s not found", id)
	}
	ep := h.endpoints[i]
	if req.ResourceType != "Policy" {
		return hnsError(call, windows.NotImpl, "endpoint %s: a %q request is not simulated", id, req.ResourceType)
	}
	var pr struct{ Policies []windows.Policy }
	dec := json.NewDecoder(bytes.NewReader(req.Settings))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pr); err != nil {
		return hnsError(call, windows.HCNInvalidJSON, "endpoint %s: policy request %s: %v", id, req.Settings, err)
	}
	policies := slices.Clone(ep.Policies)
	switch req.RequestType {
	case windows.RequestAdd, RequestUpdate:
		if err := checkPolicies(call, "endpoint", pr.Policies, h.opts.Version); err != nil {
			return err
		}
		if req.RequestType == RequestUpdate {
			policies = slices.DeleteFunc(policies, func(p windows.Policy) bool {
				return slices.ContainsFunc(pr.Policies, func(q windows.Policy) bool { return q.Type == p.Type })
			})
		}
		if err := h.checkPorts(call, pr.Policies, ep); err != nil {
			return err
		}
		policies = append(policies, pr.Policies...)
	case windows.RequestRemove:
		for _, p := range pr.Policies {
			j := slices.IndexFunc(policies, func(x windows.Policy) bool { return samePolicy(x, p) })
			if j < 0 {
				return hnsError(call, windows.HCNPolicyNotFound, "endpoint %s: no %s policy %s", ep.Name, p.Type, p.Settings)
			}
			policies = slices.Delete(policies, j, j+1)
		}
	default:
		return hnsError(call, windows.HCNRequestUnsupported, "endpoint %s: request type %q", id, req.RequestType)
	}
	h.record("ModifyEndpoint", id, req)
	ep.Policies = policies
	return nil
}

// assignAddresses gives an endpoint made without an address one address of each family
// its network has a static subnet of: the lowest that is not the subnet's own, a gateway
// (a route's next hop), IPv4's broadcast address, or another endpoint's. HNS assigns
// addresses so: hcsshim's tests make every endpoint without one, and the win-bridge plugin
// without IPAM sends one so; which address it picks is unverified.
func (h *HNS) assignAddresses(m *memNetwork, ep *windows.HostComputeEndpoint) error {
	used := map[netip.Addr]bool{}
	for _, other := range h.endpoints {
		if other.HostComputeNetwork == m.n.ID {
			for _, a := range other.IPs() {
				used[a] = true
			}
		}
	}
	families := map[bool]bool{} // is4: done
	for _, sn := range m.n.StaticSubnets() {
		p, err := netip.ParsePrefix(sn.IPAddressPrefix)
		if err != nil || families[p.Addr().Is4()] {
			continue
		}
		p = p.Masked()
		for _, r := range sn.Routes {
			if a, err := netip.ParseAddr(r.NextHop); err == nil {
				used[a] = true
			}
		}
		for a := p.Addr().Next(); a.IsValid() && p.Contains(a); a = a.Next() {
			if used[a] || a.Is4() && !p.Contains(a.Next()) {
				continue
			}
			ep.IPConfigurations = append(ep.IPConfigurations, windows.IPConfig{IPAddress: a.String(), PrefixLength: uint8(p.Bits())})
			families[a.Is4()] = true
			break
		}
		if !families[p.Addr().Is4()] {
			return hnsError("HcnCreateEndpoint", windows.HCNAddrInvalidOrReserved, "endpoint %q: subnet %s has no free address to give it", ep.Name, p)
		}
	}
	if len(families) == 0 {
		return hnsError("HcnCreateEndpoint", windows.HCNAddrInvalidOrReserved, "endpoint %q: network %s has no subnet to give it an address of", ep.Name, m.n.Name)
	}
	return nil
}
