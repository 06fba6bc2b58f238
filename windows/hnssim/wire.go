// Package hnssim is a simulated HNS service for weftd.exe under Wine: it answers the calls
// of the thin computenetwork.dll and vmcompute.dll of tools/wine/hns, which hcsshim's hcn
// package loads as it would Windows' own, with the rules of the in-memory HNS (hnstest).
//
// It decodes every request by HNS's own JSON schema (the structs of schema.go, written from
// hcsshim's hcn types), strictly: an unknown field or a wrong shape is refused with
// HCN_E_INVALID_JSON, as a request weft's model would let through but HNS would not. It
// answers with HNS's HRESULTs and error records, results as HNS's JSON, and opaque handles.
//
// # What it adds to the in-memory HNS's rules, and where each comes from
//
// hcsshim is github.com/Microsoft/hcsshim v0.15.0. The rules of hnstest (its doc names their
// sources) apply unchanged behind these.
//
//   - Every function hcn binds from computenetwork.dll is exported, since hcn panics on a
//     missing one (hcsshim hcn/zsyscall_windows.go; seen under Wine). The
//     load balancer and SDN route listings are empty, their other calls E_NOTIMPL: weft
//     makes none.
//   - A successful call leaves the error record NULL: hcn's checkForErrors takes any
//     non-empty record for an error, whatever the HRESULT (hcsshim hcn/hcnerrors.go). A
//     failed one returns the HRESULT and a record {"Error":…,"ErrorMessage":…}; that HNS's
//     record has that shape is unverified (it is the Host Compute Service's, hcsshim
//     internal/hcs/errors.go).
//   - Results and records are UTF-16 strings hcn frees with CoTaskMemFree (hcsshim
//     internal/interop, ConvertAndFreeCoTaskMemString).
//   - HNSCall answers GET /globals/version in HNS v1's envelope {"Success":…,"Error":…,
//     "Output":…} (hcsshim internal/hns/hnsnetwork.go, hnsResponse; hcn/hcnglobals.go,
//     GetGlobals); any other v1 call answers Success false.
//   - Create*, Open* hand out handles, Query*Properties and Modify* take them; a handle is
//     opaque and stands for one object until Close*. A handle that is not open answers
//     E_INVALIDARG: unverified (HNS may answer E_HANDLE; hcn never uses a closed one).
//   - Create* ignores the GUID argument: hcn passes the zero GUID and HNS assigns the ID
//     (hcsshim hcn/hcnnetwork.go, createNetwork).
//   - Enumerate* reads hcn's HostComputeQuery {"SchemaVersion","Flags","Filter"}, whose Filter
//     is a JSON object of strings in a string (hcsshim hcn/hcn.go, defaultQuery), and
//     filters by the keys hcn writes: ID and Name (GetNetworkByID/ByName), VirtualNetwork for
//     an endpoint's network (ListEndpointsOfNetwork). That HNS compares IDs and names
//     without regard to case is unverified.
//   - Query*Properties answers the object as HNS's JSON (hcn decodes it into its types),
//     each network reporting the ManagementIP hnstest was given: in the e2e test, the
//     node's real underlay address.
//   - Requests are decoded by HNS's schema (schema.go), strictly: a field the schema lacks,
//     a value of the wrong type or trailing data is refused with HCN_E_INVALID_JSON, and so
//     is a namespace attachment that is not {"EndpointId": …} (hcsshim hcn/hcnnamespace.go,
//     AddNamespaceEndpoint). That HNS refuses unknown fields, and with that code, is
//     unverified: the simulation is stricter than what is known, so that weft sends only
//     what HNS's schema names.
//   - A call while HNS is stopped, or while the service is unreachable, fails:
//     HCN_E_MANAGER_STOPPED from the service (hnstest.Stop), RPC_S_SERVER_UNAVAILABLE from
//     the DLL when it cannot reach the service. Both codes are unverified for HNS.
//
// The DLLs and the service speak a small framing over TCP on loopback, one call per
// connection: a request is a little-endian uint32 length and as many bytes of fields
// separated by NUL (call, GUID, handle, first string, second string); an answer is framed
// the same, with the fields HRESULT, handle, result and error record. Numbers are decimal.
package hnssim

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
)

// maxFrame bounds a frame: HNS objects are a few KiB; a listing of thousands of IDs, less
// than a MiB.
const maxFrame = 16 << 20

// request is one call as a DLL hands it over.
type request struct {
	call   string // the export: HcnCreateNetwork, HNSCall, ...
	id     string // the GUID argument, lower case without braces; for HNSCall, the path
	handle uint64 // the handle argument
	a, b   string // the string arguments, in order (settings, query; HNSCall: method, object)
}

// answer is what the DLL returns to its caller.
type answer struct {
	hr     uint32
	handle uint64 // a handle made by a Create or Open
	result string // the properties, listing or HNSCall response
	record string // the error record, "" on success
}

func readFrame(r io.Reader) ([]byte, error) {
	var n uint32
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return nil, err
	}
	if n > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

func writeFrame(w io.Writer, fields ...string) error {
	b := []byte{0, 0, 0, 0}
	for i, f := range fields {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, f...)
	}
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	_, err := w.Write(b)
	return err
}

func decodeRequest(b []byte) (request, error) {
	f := bytes.Split(b, []byte{0})
	if len(f) != 5 {
		return request{}, fmt.Errorf("request of %d fields, want 5", len(f))
	}
	h, err := strconv.ParseUint(string(f[2]), 10, 64)
	if err != nil {
		return request{}, fmt.Errorf("handle %q: %w", f[2], err)
	}
	return request{call: string(f[0]), id: string(f[1]), handle: h, a: string(f[3]), b: string(f[4])}, nil
}

func (a answer) write(w io.Writer) error {
	return writeFrame(w, strconv.FormatUint(uint64(a.hr), 10), strconv.FormatUint(a.handle, 10), a.result, a.record)
}
