package hnssim

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

// Server serves the DLLs' calls from the in-memory HNS.
type Server struct {
	hns *hnstest.HNS
	log *slog.Logger

	mu      sync.Mutex
	handles map[uint64]object
	next    uint64
	calls   []Call
	docs    map[string]json.RawMessage // by lower-case ID: each object's create document (documents.go)
	v1      v1State                    // what only HNS v1 knows of (v1.go)
	others  []standalone               // SDN routes and load balancers (standalone.go)
}

// Call is one call the service answered, as the DLL handed it over: the export, its GUID
// argument (HNSCall: the path), the ID of the object its handle stood for, the settings or
// query as hcn wrote them (HNS's JSON, not weft's model; HNSCall: its method, and its
// request's JSON as the body), and the HRESULT it got back. The
// log holds refused calls too: a test can tell that weftd asked nothing of a kind, not just
// that HNS changed nothing.
type Call struct {
	Name    string
	Method  string          `json:",omitempty"` // HNSCall's: GET, POST, DELETE
	ID      string          `json:",omitempty"`
	Object  string          `json:",omitempty"`
	Body    string          `json:",omitempty"`
	HResult windows.HResult `json:",omitempty"`
}

// Mutates reports whether the call asks HNS to change something (a create, modify or delete).
func (c Call) Mutates() bool {
	if c.Name == "HNSCall" {
		return !strings.EqualFold(c.Method, "GET")
	}
	for _, verb := range []string{"HcnCreate", "HcnModify", "HcnDelete"} {
		if strings.HasPrefix(c.Name, verb) {
			return true
		}
	}
	return false
}

// Calls returns the calls answered since the last ResetCalls, oldest first.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// ResetCalls forgets the logged calls.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = nil
}

// logCall logs a call with its answer; the handle's object is looked up before the call, as
// a Close forgets it.
func (s *Server) logCall(r request, object string, a answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Call{Name: r.call, ID: r.id, Object: object, Body: r.a, HResult: windows.HResult(a.hr)}
	if r.call == "HNSCall" {
		c.Method, c.Body = r.a, r.b
	}
	s.calls = append(s.calls, c)
}

// object is what a handle refers to.
type object struct {
	kind string // "Network", "Endpoint", "Namespace"
	id   string
}

// New returns a server of hns.
func New(hns *hnstest.HNS, log *slog.Logger) *Server {
	return &Server{hns: hns, log: log, handles: map[uint64]object{}, docs: map[string]json.RawMessage{}}
}

// Serve answers calls on l until it is closed.
func (s *Server) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("hnssim: accept: %w", err)
		}
		go s.conn(c)
	}
}

func (s *Server) conn(c net.Conn) {
	defer c.Close()
	b, err := readFrame(c)
	if err != nil {
		s.log.Warn("hnssim: reading a call", "err", err)
		return
	}
	req, err := decodeRequest(b)
	var a answer
	if err != nil {
		a = fail(windows.NewError("call", windows.InvalidArg, err.Error()))
	} else {
		object := s.handleObject(req.handle)
		a = s.Call(req)
		s.logCall(req, object, a)
	}
	s.log.Debug("hnssim", "call", req.call, "id", req.id, "handle", req.handle, "hr", fmt.Sprintf("0x%08X", a.hr))
	if err := a.write(c); err != nil {
		s.log.Warn("hnssim: answering a call", "call", req.call, "err", err)
	}
}

// fail is the answer of a failed call: its HRESULT and error record.
func fail(err error) answer {
	var e *windows.Error
	if errors.As(err, &e) {
		return answer{hr: uint32(e.Code), record: e.Record}
	}
	ne := windows.NewError("call", windows.Fail, err.Error())
	return answer{hr: uint32(ne.Code), record: ne.Record}
}

func invalidJSON(call string, err error) answer {
	return fail(windows.NewError(call, windows.HCNInvalidJSON, err.Error()))
}

func notImpl(call string) answer {
	return fail(windows.NewError(call, windows.NotImpl, call+" is not simulated"))
}

func ok(result any) answer {
	b, err := json.Marshal(result)
	if err != nil {
		return fail(err)
	}
	return answer{result: string(b)}
}

func (s *Server) open(kind, id string) answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	s.handles[s.next] = object{kind: kind, id: id}
	return answer{handle: s.next}
}

func (s *Server) object(kind string, h uint64) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, found := s.handles[h]
	return o.id, found && o.kind == kind
}

// handleObject is the ID of the object handle h stands for, "" if none.
func (s *Server) handleObject(h uint64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handles[h].id
}

func (s *Server) close(h uint64) answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.handles, h)
	return answer{}
}

// filterOf decodes a query strictly and returns its filter: a JSON object in a string,
// whose values hcn writes as strings (hcsshim hcn/hcn.go, defaultQuery) and other clients
// as any JSON.
func filterOf(q string) (map[string]json.RawMessage, error) {
	if q == "" {
		return nil, nil
	}
	var hq query
	if err := strict(q, &hq); err != nil {
		return nil, err
	}
	if hq.Filter == "" {
		return nil, nil
	}
	var f map[string]json.RawMessage
	if err := strict(hq.Filter, &f); err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	return f, nil
}

// Call answers one call.
func (s *Server) Call(r request) answer {
	if a, handled := s.standaloneCall(r); handled {
		return a
	}
	switch r.call {
	case "HNSCall":
		return s.hnsCall(r)
	case "HcnEnumerateNetworks", "HcnEnumerateEndpoints", "HcnEnumerateNamespaces":
		return s.enumerate(r)
	case "HcnOpenNetwork":
		if _, err := s.network(r.id); err != nil {
			return fail(err)
		}
		return s.open("Network", r.id)
	case "HcnOpenEndpoint":
		if _, err := s.endpoint(r.id); err != nil {
			return fail(err)
		}
		return s.open("Endpoint", r.id)
	case "HcnOpenNamespace":
		if _, err := s.namespace(r.id); err != nil {
			return fail(err)
		}
		return s.open("Namespace", r.id)
	case "HcnCloseNetwork", "HcnCloseEndpoint", "HcnCloseNamespace":
		return s.close(r.handle)
	case "HcnQueryNetworkProperties", "HcnQueryEndpointProperties", "HcnQueryNamespaceProperties":
		return s.query(r)
	case "HcnCreateNetwork":
		return s.createNetwork(r)
	case "HcnCreateEndpoint":
		return s.createEndpoint(r)
	case "HcnCreateNamespace":
		return s.createNamespace(r)
	case "HcnModifyNetwork":
		return s.modifyNetwork(r)
	case "HcnModifyNamespace":
		return s.modifyNamespace(r)
	case "HcnModifyEndpoint":
		return s.modifyEndpoint(r)
	case "HcnDeleteNetwork":
		if err := s.hns.DeleteNetwork(r.id); err != nil {
			return fail(err)
		}
		return answer{}
	case "HcnDeleteEndpoint":
		if err := s.hns.DeleteEndpoint(r.id); err != nil {
			return fail(err)
		}
		return answer{}
	case "HcnDeleteNamespace":
		if err := s.hns.DeleteNamespace(r.id); err != nil {
			return fail(err)
		}
		return answer{}
	}
	if a, ok := s.ipHelper(r); ok {
		return a
	}
	return notImpl(r.call)
}

func (s *Server) network(id string) (*windows.HostComputeNetwork, error) {
	return find(s.hns.Networks, func(n windows.HostComputeNetwork) string { return n.ID }, id,
		windows.NewError("HcnOpenNetwork", windows.HCNNetworkNotFound, "network "+id+" not found"))
}

func (s *Server) endpoint(id string) (*windows.HostComputeEndpoint, error) {
	return find(s.hns.Endpoints, func(ep windows.HostComputeEndpoint) string { return ep.ID }, id,
		windows.NewError("HcnOpenEndpoint", windows.HCNEndpointNotFound, "endpoint "+id+" not found"))
}

func (s *Server) namespace(id string) (*windows.HostComputeNamespace, error) {
	return find(s.hns.Namespaces, func(ns windows.HostComputeNamespace) string { return ns.ID }, id,
		windows.NewError("HcnOpenNamespace", windows.ElementNotFound, "namespace "+id+" not found"))
}

// find returns the object of list whose ID is id, or notFound.
func find[T any](list func() ([]T, error), idOf func(T) string, id string, notFound error) (*T, error) {
	all, err := list()
	if err != nil {
		return nil, err
	}
	for i := range all {
		if strings.EqualFold(idOf(all[i]), id) {
			return &all[i], nil
		}
	}
	return nil, notFound
}

// enumerate lists the IDs of the objects a query's filter selects, by the fields of their
// answers (query).
func (s *Server) enumerate(r request) answer {
	f, err := filterOf(r.a)
	if err != nil {
		return invalidJSON(r.call, err)
	}
	var objects []any
	switch r.call {
	case "HcnEnumerateNetworks":
		all, err := s.hns.Networks()
		if err != nil {
			return fail(err)
		}
		for i := range all {
			objects = append(objects, &all[i])
		}
	case "HcnEnumerateEndpoints":
		all, err := s.hns.Endpoints()
		if err != nil {
			return fail(err)
		}
		for i := range all {
			objects = append(objects, &all[i])
		}
	case "HcnEnumerateNamespaces":
		all, err := s.hns.Namespaces()
		if err != nil {
			return fail(err)
		}
		for i := range all {
			objects = append(objects, &all[i])
		}
	}
	ids := []string{}
	for _, o := range objects {
		id := idOf(o)
		doc, err := s.document(id, o)
		if err != nil {
			return fail(err)
		}
		if matches(f, doc) {
			ids = append(ids, id)
		}
	}
	return ok(ids)
}

// idOf is the ID of a model object.
func idOf(o any) string {
	switch o := o.(type) {
	case *windows.HostComputeNetwork:
		return o.ID
	case *windows.HostComputeEndpoint:
		return o.ID
	case *windows.HostComputeNamespace:
		return o.ID
	}
	return ""
}

func (s *Server) query(r request) answer {
	if _, err := filterOf(r.a); err != nil {
		return invalidJSON(r.call, err)
	}
	kind := strings.TrimSuffix(strings.TrimPrefix(r.call, "HcnQuery"), "Properties")
	id, found := s.object(kind, r.handle)
	if !found {
		return fail(windows.NewError(r.call, windows.InvalidArg, "not a handle of an open "+strings.ToLower(kind)))
	}
	var v any
	var err error
	switch kind {
	case "Network":
		v, err = s.network(id)
	case "Endpoint":
		v, err = s.endpoint(id)
	default:
		v, err = s.namespace(id)
	}
	if err != nil {
		return fail(err)
	}
	doc, err := s.document(id, v)
	if err != nil {
		return fail(err)
	}
	return ok(doc)
}

// asModel decodes a request HNS's schema accepted into weft's model of it, for the in-memory
// HNS (whose JSON is HNS's).
func asModel[T any](call, settings string) (*T, *answer) {
	out := new(T)
	if err := json.Unmarshal([]byte(settings), out); err != nil {
		a := invalidJSON(call, err)
		return nil, &a
	}
	return out, nil
}

func (s *Server) createNetwork(r request) answer {
	doc := r.a
	if isV1(doc) {
		v2, err := networkFromV1(doc)
		if err != nil {
			return invalidJSON(r.call, err)
		}
		doc = v2
	}
	var n networkSchema
	if err := strict(doc, &n); err != nil {
		return invalidJSON(r.call, err)
	}
	if err := checkNetwork(&n); err != nil {
		return invalidJSON(r.call, err)
	}
	m, bad := asModel[windows.HostComputeNetwork](r.call, doc)
	if bad != nil {
		return *bad
	}
	made, err := s.hns.CreateNetwork(m)
	if err != nil {
		return fail(err)
	}
	s.keep(made.ID, json.RawMessage(doc))
	return s.open("Network", made.ID)
}

func (s *Server) createEndpoint(r request) answer {
	netID, found := s.object("Network", r.handle)
	if !found {
		return fail(windows.NewError(r.call, windows.InvalidArg, "not a handle of an open network"))
	}
	doc := r.a
	if isV1(doc) {
		v2, err := s.endpointFromV1(doc, netID)
		if err != nil {
			return invalidJSON(r.call, err)
		}
		doc = v2
	}
	var ep endpointSchema
	if err := strict(doc, &ep); err != nil {
		return invalidJSON(r.call, err)
	}
	if err := checkPolicies(ep.Policies); err != nil {
		return invalidJSON(r.call, err)
	}
	m, bad := asModel[windows.HostComputeEndpoint](r.call, doc)
	if bad != nil {
		return *bad
	}
	m.HostComputeNetwork = netID
	made, err := s.hns.CreateEndpoint(m)
	if err != nil {
		return fail(err)
	}
	s.keep(made.ID, json.RawMessage(doc))
	return s.open("Endpoint", made.ID)
}

func (s *Server) createNamespace(r request) answer {
	var ns namespaceSchema
	if err := strict(r.a, &ns); err != nil {
		return invalidJSON(r.call, err)
	}
	m, bad := asModel[windows.HostComputeNamespace](r.call, r.a)
	if bad != nil {
		return *bad
	}
	made, err := s.hns.CreateNamespace(m)
	if err != nil {
		return fail(err)
	}
	s.keep(made.ID, json.RawMessage(r.a))
	return s.open("Namespace", made.ID)
}

func (s *Server) modifyNetwork(r request) answer {
	return modify(s, r, "Network", true, s.hns.ModifyNetworkSettings)
}

func (s *Server) modifyNamespace(r request) answer {
	// The in-memory HNS decodes the settings strictly: {"EndpointId": …}.
	return modify(s, r, "Namespace", false, s.hns.ModifyNamespace)
}

func (s *Server) modifyEndpoint(r request) answer {
	return modify(s, r, "Endpoint", true, s.hns.ModifyEndpoint)
}

// modify is HcnModify<kind>: the request on the open object of handle r.handle, whose
// policies, where the object has them, are checked as HNS checks them, applied with apply.
func modify[M any](s *Server, r request, kind string, policies bool, apply func(id string, m *M) error) answer {
	id, found := s.object(kind, r.handle)
	if !found {
		return fail(windows.NewError(r.call, windows.InvalidArg, "not a handle of an open "+strings.ToLower(kind)))
	}
	var mr modifyRequest
	if err := strict(r.a, &mr); err != nil {
		return invalidJSON(r.call, err)
	}
	if policies && mr.ResourceType == "Policy" {
		var pr policyRequest
		if err := strict(string(mr.Settings), &pr); err != nil {
			return invalidJSON(r.call, err)
		}
		if err := checkPolicies(pr.Policies); err != nil {
			return invalidJSON(r.call, err)
		}
	}
	m, bad := asModel[M](r.call, r.a)
	if bad != nil {
		return *bad
	}
	if err := apply(id, m); err != nil {
		return fail(err)
	}
	return answer{}
}
