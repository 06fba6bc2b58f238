package hnssim

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/weftnet/weft/windows/hnstest"
)

// Each object's document as its create request carried it (by HNS's schema, so every
// field is one HNS has) is kept, and a query answers with it under the in-memory HNS's
// model of the object: the model's fields (ID, network, namespace, policies, addresses,
// what HNS added or assigned) replace the document's, and what the model has no field for
// (an endpoint's Routes, Health, …) comes back as the client sent it. HNS echoes what it
// was given: the win-overlay and win-bridge plugins read an endpoint's Routes[0] from
// HNS's answer (containernetworking/plugins pkg/hns/endpoint_windows.go).

// keep stores the document of a new object.
func (s *Server) keep(id string, doc json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs[strings.ToLower(id)] = doc
}

// document is the merged answer for an object: model is the in-memory HNS's view of it.
func (s *Server) document(id string, model any) (map[string]json.RawMessage, error) {
	s.mu.Lock()
	doc := s.docs[strings.ToLower(id)]
	s.mu.Unlock()
	out := map[string]json.RawMessage{}
	if len(doc) > 0 {
		if err := json.Unmarshal(doc, &out); err != nil {
			return nil, fmt.Errorf("document of %s: %w", id, err)
		}
	}
	owned := jsonFields(reflect.TypeOf(model))
	for k := range out {
		if owned[strings.ToLower(k)] {
			delete(out, k)
		}
	}
	b, err := json.Marshal(model)
	if err != nil {
		return nil, fmt.Errorf("model of %s: %w", id, err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("model of %s: %w", id, err)
	}
	for k, v := range m {
		out[k] = v
	}
	return out, nil
}

// jsonFields are the JSON names (lower case) of a struct type's fields.
func jsonFields(t reflect.Type) map[string]bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	out := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[strings.ToLower(name)] = true
	}
	return out
}

// field looks a field of a document up as HNS's JSON reads names: without regard to case.
func field(doc map[string]json.RawMessage, name string) (json.RawMessage, bool) {
	if v, found := doc[name]; found {
		return v, true
	}
	for k, v := range doc {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return nil, false
}

// matches reports whether a document has every field of the filter: strings compared
// without regard to case (unverified), other JSON values as values, whatever their
// spelling. An endpoint's VirtualNetwork is its HostComputeNetwork (hcsshim
// hcn/hcnendpoint.go, ListEndpointsOfNetwork).
func matches(f map[string]json.RawMessage, doc map[string]json.RawMessage) bool {
	for k, want := range f {
		have, found := field(doc, k)
		if !found && strings.EqualFold(k, "VirtualNetwork") {
			have, found = field(doc, "HostComputeNetwork")
		}
		if !found {
			return false
		}
		var ws, hs string
		if json.Unmarshal(want, &ws) == nil && json.Unmarshal(have, &hs) == nil {
			if !strings.EqualFold(ws, hs) {
				return false
			}
			continue
		}
		if hnstest.CanonicalJSON(want) != hnstest.CanonicalJSON(have) {
			return false
		}
	}
	return true
}
