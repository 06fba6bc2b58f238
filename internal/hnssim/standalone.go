package hnssim

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/weftnet/weft/windows"
)

// SDN routes and load balancers are objects weft never makes, so the in-memory HNS has no
// model of them: the service keeps each as its document (decoded by HNS's schema, as
// hcsshim's hcn/hcnroute.go HostComputeRoute and hcnloadbalancer.go HostComputeLoadBalancer
// write it) with its ID, checks what the package doc lists, and answers a query with the
// document.

// standalone is one such object.
type standalone struct {
	kind string // "SdnRoute", "LoadBalancer"
	id   string
	doc  json.RawMessage
}

type sdnRouteSetting struct {
	DestinationPrefix string
	NextHop           string
	NeedEncap         bool
}

type sdnRouteSchema struct {
	ID                   string
	HostComputeEndpoints []string
	Setting              []sdnRouteSetting
	SchemaVersion        schemaVersion
}

type lbPortMapping struct {
	Protocol         uint32
	InternalPort     uint16
	ExternalPort     uint16
	DistributionType uint32
	Flags            uint32
}

type loadBalancerSchema struct {
	ID                   string
	HostComputeEndpoints []string
	SourceVIP            string
	FrontendVIPs         []string
	PortMappings         []lbPortMapping
	SchemaVersion        schemaVersion
	Flags                uint32
}

// lbFlagDSR is LoadBalancerFlagsDSR (hcsshim hcn/hcnloadbalancer.go).
const lbFlagDSR = 1

// The versions of HNS with a load balancer feature (hcsshim hcn/hcnglobals.go: DSRVersion,
// ModifyLoadbalancerVersion). A port mapping's distribution by source IP (session
// affinity, hcsshim's SessionAffinityVersion: 12.0) is taken at every version and kept as
// sent: Windows kube-proxy sends it below 12.0 too, after logging "Session Affinity is not
// supported on this version of Windows" (kubernetes pkg/proxy/winkernel/proxier.go), and
// Services with ClientIP affinity worked on Windows Server 2019, only without the affinity
// (Microsoft's AKS Windows FAQ, MicrosoftDocs/azure-docs pull 79222). That HNS below 12.0
// accepts the field rather than refusing it is read from those, unverified. HcnModifyLoadBalancer is taken from
// 15.4, as hcsshim v0.15.0 gates it and its TestCreateUpdateDeleteLoadBalancer expects;
// hnslib v0.1.2, which Windows kube-proxy uses, asks for 15.5 (16.0 and later too) before
// it modifies in place, and deletes and re-creates below: Windows Server 2025's HNS 15.4
// answered the call with success but kept the old endpoints (kubernetes issue 131466, fixed
// on kube-proxy's side by kubernetes pull 131506). The simulator does not reproduce that
// fault; nobody that follows hnslib's gate meets it.
func dsrVersion(v windows.Version) bool {
	return v.AtLeast(9, 3) && !v.AtLeast(10, 0) || v.AtLeast(10, 2)
}

func modifyLoadBalancerVersion(v windows.Version) bool { return v.AtLeast(15, 4) }

// standaloneCall answers the calls of SDN routes and load balancers; handled reports
// whether the call is one of theirs.
func (s *Server) standaloneCall(r request) (a answer, handled bool) {
	kind := ""
	for _, k := range []string{"SdnRoute", "LoadBalancer"} {
		if strings.Contains(r.call, k) {
			kind = k
		}
	}
	if kind == "" {
		return answer{}, false
	}
	v, err := s.hns.Version() // also: a stopped HNS answers nothing
	if err != nil {
		return fail(err), true
	}
	switch strings.Replace(strings.TrimPrefix(r.call, "Hcn"), kind, "", 1) {
	case "Enumerates":
		return s.enumerateStandalone(r, kind), true
	case "Create":
		return s.createStandalone(r, kind, v, ""), true
	case "Open":
		if _, found := s.standalone(kind, r.id); !found {
			return fail(notFound(r.call, kind, r.id)), true
		}
		return s.open(kind, r.id), true
	case "QueryProperties":
		if _, err := filterOf(r.a); err != nil {
			return invalidJSON(r.call, err), true
		}
		id, found := s.object(kind, r.handle)
		if !found {
			return fail(windows.NewError(r.call, windows.InvalidArg, "not a handle of an open "+kind)), true
		}
		o, found := s.standalone(kind, id)
		if !found {
			return fail(notFound(r.call, kind, id)), true
		}
		return answer{result: string(o.doc)}, true
	case "Modify":
		if kind != "LoadBalancer" {
			// hcsshim re-creates a route to change it: "HCNRoute doesn't implement modify
			// functionality" (hcn/hcnroute.go, AddEndpoint).
			return notImpl(r.call), true
		}
		if !modifyLoadBalancerVersion(v) {
			return fail(windows.NewError(r.call, windows.HCNRequestUnsupported, fmt.Sprintf("modifying a load balancer: not in HNS %s", v))), true
		}
		id, found := s.object(kind, r.handle)
		if !found {
			return fail(windows.NewError(r.call, windows.InvalidArg, "not a handle of an open "+kind)), true
		}
		return s.createStandalone(r, kind, v, id), true
	case "Delete":
		s.mu.Lock()
		defer s.mu.Unlock()
		i := slices.IndexFunc(s.others, func(o standalone) bool { return o.kind == kind && strings.EqualFold(o.id, r.id) })
		if i < 0 {
			return fail(notFound(r.call, kind, r.id)), true
		}
		s.others = slices.Delete(s.others, i, i+1)
		return answer{}, true
	case "Close":
		return s.close(r.handle), true
	}
	return notImpl(r.call), true
}

// notFound is the answer for an unknown route or load balancer: ERROR_NOT_FOUND, as for a
// namespace (unverified; hcn turns an empty listing into its own RouteNotFoundError and
// LoadBalancerNotFoundError).
func notFound(call, kind, id string) error {
	return windows.NewError(call, windows.ElementNotFound, kind+" "+id+" not found")
}

func (s *Server) standalone(kind, id string) (standalone, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.others {
		if o.kind == kind && strings.EqualFold(o.id, id) {
			return o, true
		}
	}
	return standalone{}, false
}

func (s *Server) enumerateStandalone(r request, kind string) answer {
	f, err := filterOf(r.a)
	if err != nil {
		return invalidJSON(r.call, err)
	}
	s.mu.Lock()
	others := slices.Clone(s.others)
	s.mu.Unlock()
	ids := []string{}
	for _, o := range others {
		var doc map[string]json.RawMessage
		if o.kind == kind && json.Unmarshal(o.doc, &doc) == nil && matches(f, doc) {
			ids = append(ids, o.id)
		}
	}
	return ok(ids)
}

// createStandalone makes a route or load balancer, or (replace, an ID) puts a load
// balancer's new document in place of its old one (HcnModifyLoadBalancer takes the whole
// document: hcsshim hcn/hcnloadbalancer.go, Update).
func (s *Server) createStandalone(r request, kind string, v windows.Version, replace string) answer {
	var id string
	var endpoints []string
	if kind == "SdnRoute" {
		var rt sdnRouteSchema
		if err := strict(r.a, &rt); err != nil {
			return invalidJSON(r.call, err)
		}
		id, endpoints = rt.ID, rt.HostComputeEndpoints
		if err := checkRoute(&rt); err != nil {
			return fail(windows.NewError(r.call, windows.HCNInvalidIP, err.Error()))
		}
	} else {
		var lb loadBalancerSchema
		if err := strict(r.a, &lb); err != nil {
			return invalidJSON(r.call, err)
		}
		id, endpoints = lb.ID, lb.HostComputeEndpoints
		if err := checkLoadBalancer(r.call, &lb, v); err != nil {
			return fail(err)
		}
	}
	for _, ep := range endpoints {
		if _, err := s.endpoint(ep); err != nil {
			return fail(windows.NewError(r.call, windows.HCNEndpointNotFound, kind+": endpoint "+ep+" not found"))
		}
	}
	if replace != "" && id != "" && !strings.EqualFold(id, replace) {
		return fail(windows.NewError(r.call, windows.InvalidArg, fmt.Sprintf("%s %s: the document names ID %s", kind, replace, id)))
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.a), &doc); err != nil {
		return invalidJSON(r.call, err)
	}
	for k := range doc {
		if strings.EqualFold(k, "ID") {
			delete(doc, k)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case replace != "":
		id = replace
	case id != "":
		// A create may name the ID (hcsshim re-creates routes and load balancers with theirs).
		id = strings.TrimSuffix(strings.TrimPrefix(id, "{"), "}")
		if slices.ContainsFunc(s.others, func(o standalone) bool { return o.kind == kind && strings.EqualFold(o.id, id) }) {
			return fail(windows.NewError(r.call, windows.InvalidArg, kind+" "+id+" exists"))
		}
	default:
		s.next++
		id = fmt.Sprintf("00000000-0000-4000-9000-%012X", s.next)
	}
	doc["ID"], _ = json.Marshal(id) // a string always marshals
	b, _ := json.Marshal(doc)       // decoded JSON always marshals
	o := standalone{kind: kind, id: id, doc: b}
	if i := slices.IndexFunc(s.others, func(o standalone) bool { return o.kind == kind && strings.EqualFold(o.id, id) }); i >= 0 {
		s.others[i] = o
		return answer{}
	}
	s.others = append(s.others, o)
	s.next++
	s.handles[s.next] = object{kind: kind, id: id}
	return answer{handle: s.next}
}

// checkRoute refuses a route whose prefix or next hop is no address (unverified).
func checkRoute(rt *sdnRouteSchema) error {
	for _, st := range rt.Setting {
		if _, err := netip.ParsePrefix(st.DestinationPrefix); err != nil {
			return fmt.Errorf("SDN route DestinationPrefix: %w", err)
		}
		if _, err := netip.ParseAddr(st.NextHop); err != nil {
			return fmt.Errorf("SDN route NextHop: %w", err)
		}
	}
	return nil
}

// checkLoadBalancer refuses a load balancer whose VIPs are no addresses (HCN_E_INVALID_IP),
// or that asks for a feature its HNS version lacks (HCN_E_REQUEST_UNSUPPORTED); both codes
// are unverified.
func checkLoadBalancer(call string, lb *loadBalancerSchema, v windows.Version) error {
	for _, a := range append([]string{lb.SourceVIP}, lb.FrontendVIPs...) {
		if a == "" {
			continue
		}
		if _, err := netip.ParseAddr(a); err != nil {
			return windows.NewError(call, windows.HCNInvalidIP, "load balancer VIP: "+err.Error())
		}
	}
	if lb.Flags&lbFlagDSR != 0 && !dsrVersion(v) {
		return windows.NewError(call, windows.HCNRequestUnsupported, fmt.Sprintf("direct server return: not in HNS %s", v))
	}
	return nil
}
