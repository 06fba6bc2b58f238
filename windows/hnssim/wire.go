// Package hnssim is a simulated HNS service for weftd.exe under Wine: it answers the calls
// of the thin computenetwork.dll and vmcompute.dll of tools/wine/hns, which hcsshim's hcn
// package loads as it would Windows' own, with the rules of the in-memory HNS (hnstest).
//
// It decodes every request by HNS's own JSON schema (the structs of schema.go, written from
// hcsshim's hcn types), strictly: an unknown field or a wrong shape is refused with
// HCN_E_INVALID_JSON, as a request weft's model would let through but HNS would not. It
// answers with HNS's HRESULTs and error records, results as HNS's JSON, and opaque handles.
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
