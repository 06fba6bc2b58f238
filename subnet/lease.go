package subnet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"net/netip"
	"time"
)

// Lease is a node's claim on a subnet of the cluster network.
type Lease struct {
	Subnet     netip.Prefix // IPv4 subnet; zero when the lease has none
	IPv6Subnet netip.Prefix // zero when the lease has none
	Attrs      LeaseAttrs
	// Expiration is when the datastore drops the lease unless it is renewed. Zero means
	// never (a reservation, or a datastore without expiry) or unknown (a peer's lease).
	Expiration time.Time
	// Created orders leases by age, smaller first: etcd's create revision of the key, the
	// Node's creation time (ns) in Kubernetes. Zero when unknown. Conflicting claims are
	// settled by it, so that every node decides the same and the first claimant keeps its
	// claim.
	Created int64
}

// Key is the lease's datastore key.
func (l Lease) Key() string { return Key(l.Subnet, l.IPv6Subnet) }

// SameSubnets reports whether two leases name the same subnets.
func (l Lease) SameSubnets(o Lease) bool {
	return l.Subnet == o.Subnet && l.IPv6Subnet == o.IPv6Subnet
}

// String is for logs.
func (l Lease) String() string {
	s := l.Key() + " " + l.Attrs.BackendType + " " + l.Attrs.PublicIP.String()
	if l.Attrs.PublicIPv6.IsValid() {
		s += " " + l.Attrs.PublicIPv6.String()
	}
	return s
}

// LeaseAttrs is what a node publishes with its lease; its JSON is flannel's.
type LeaseAttrs struct {
	PublicIP   netip.Addr // zero when the node has no IPv4 address
	PublicIPv6 netip.Addr
	// BadPublicIPv6 is a PublicIPv6 that is no IPv6 address, as written: the lease's IPv6
	// half is unusable, its IPv4 half is not (PublicIPv6 is zero then).
	BadPublicIPv6 string
	BackendType   string
	BackendData   json.RawMessage // e.g. {"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}; nil for host-gw
	BackendV6Data json.RawMessage
	// NodeID names the node that published the lease (etcd mode: weftd's node identity, kept
	// beside subnet.env), so that a node can tell its own lease from one with its public IP
	// that another node holds (a clone of it). Empty in a lease flanneld wrote. Written as
	// WeftNodeID, a key flanneld's reader ignores.
	NodeID string
}

// Equal reports whether two attribute sets are the same, BackendData compared as JSON values.
func (a LeaseAttrs) Equal(b LeaseAttrs) bool {
	return a.PublicIP == b.PublicIP && a.PublicIPv6 == b.PublicIPv6 && a.BadPublicIPv6 == b.BadPublicIPv6 && a.BackendType == b.BackendType &&
		jsonEqual(a.BackendData, b.BackendData) && jsonEqual(a.BackendV6Data, b.BackendV6Data) && a.NodeID == b.NodeID
}

// Digest is a 64-bit hash of the attributes, the same for attributes that are Equal (backend
// data that differs only in insignificant space hashes alike). Watchers keep it instead of
// the attributes, to tell a changed lease from one written again unchanged without holding a
// second copy of every lease; two different attribute sets collide with a chance of 2^-64.
// The seed is the keeper's own (maphash.MakeSeed): digests are comparable under one seed.
// It assumes the backend data is valid JSON, as UnmarshalJSON and the Kubernetes annotation
// parser guarantee.
func (a LeaseAttrs) Digest(seed maphash.Seed) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	for _, ip := range [2]netip.Addr{a.PublicIP, a.PublicIPv6} {
		b := ip.As16()
		h.Write(b[:])
		h.WriteByte(byte(ip.BitLen()))
		h.WriteString(ip.Zone())
		h.WriteByte(0)
	}
	h.WriteString(a.BadPublicIPv6)
	h.WriteByte(0)
	h.WriteString(a.BackendType)
	h.WriteByte(0)
	digestJSON(&h, a.BackendData)
	digestJSON(&h, a.BackendV6Data)
	h.WriteString(a.NodeID)
	return h.Sum64()
}

// digestJSON writes the compact form of a JSON value to h (what json.Compact makes of it,
// without a buffer), ended by a 0 byte, which JSON text never holds; an absent value and null
// write the same.
func digestJSON(h *maphash.Hash, v json.RawMessage) {
	if len(v) == 0 || isJSONNull(v) {
		h.WriteByte(0)
		return
	}
	inString, escaped := false, false
	for _, c := range v {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			continue
		}
		h.WriteByte(c)
	}
	h.WriteByte(0)
}

// wireAttrs is the JSON layout flannel reads and writes.
type wireAttrs struct {
	PublicIP      string
	PublicIPv6    *string
	BackendType   string          `json:",omitempty"`
	BackendData   json.RawMessage // null for host-gw, as flannel writes it
	BackendV6Data json.RawMessage `json:",omitempty"`
	WeftNodeID    string          `json:",omitempty"`
}

// MarshalJSON writes flannel's lease value.
func (a LeaseAttrs) MarshalJSON() ([]byte, error) {
	w := wireAttrs{PublicIP: "0.0.0.0", BackendType: a.BackendType, BackendData: a.BackendData, BackendV6Data: a.BackendV6Data, WeftNodeID: a.NodeID}
	if a.PublicIP.IsValid() {
		w.PublicIP = a.PublicIP.String()
	}
	switch {
	case a.PublicIPv6.IsValid():
		s := a.PublicIPv6.String()
		w.PublicIPv6 = &s
	case a.BadPublicIPv6 != "":
		// Written back as it was read, so that a lease read and written again is the same.
		w.PublicIPv6 = &a.BadPublicIPv6
	}
	if len(w.BackendData) == 0 {
		w.BackendData = json.RawMessage("null")
	}
	return json.Marshal(w)
}

// MaxAttrsSize bounds a lease's attributes as the datastore holds them: an etcd value, a
// Node's backend-data annotation. flannel's and weft's are a few hundred bytes; a larger one
// is refused unread, so that no writer can make every node parse and keep megabytes a lease.
const MaxAttrsSize = 16 << 10

// UnmarshalJSON reads a lease value. It is written by other nodes, maybe by other software,
// so unknown keys are ignored, but every known key must hold a valid value. A value over
// MaxAttrsSize is refused.
func (a *LeaseAttrs) UnmarshalJSON(data []byte) error {
	if len(data) > MaxAttrsSize {
		return fmt.Errorf("lease attributes: %d bytes, over the %d-byte limit", len(data), MaxAttrsSize)
	}
	var w wireAttrs
	if !scanAttrs(data, &w) {
		w = wireAttrs{}
		if err := json.Unmarshal(data, &w); err != nil {
			return fmt.Errorf("lease attributes: %w", err)
		}
	}
	var out LeaseAttrs
	if w.PublicIP != "" {
		ip, err := netip.ParseAddr(w.PublicIP)
		if err != nil || !ip.Is4() {
			return fmt.Errorf("lease attributes: PublicIP %q is not an IPv4 address", w.PublicIP)
		}
		if !ip.IsUnspecified() {
			out.PublicIP = ip
		}
	}
	if w.PublicIPv6 != nil && *w.PublicIPv6 != "" {
		// A bad IPv6 address spoils the IPv6 half of the lease only: its IPv4 half may be good.
		switch ip, err := netip.ParseAddr(*w.PublicIPv6); {
		case err != nil || !ip.Is6() || ip.Is4In6() || ip.Zone() != "":
			out.BadPublicIPv6 = *w.PublicIPv6
		case !ip.IsUnspecified():
			out.PublicIPv6 = ip
		}
	}
	out.BackendType = w.BackendType
	out.NodeID = w.WeftNodeID
	// json.RawMessage copies what it is given: the data is already the lease's own.
	if !isJSONNull(w.BackendData) {
		out.BackendData = htmlEscaped(w.BackendData)
	}
	if !isJSONNull(w.BackendV6Data) {
		out.BackendV6Data = htmlEscaped(w.BackendV6Data)
	}
	*a = out
	return nil
}

// htmlEscaped is v with <, >, & and U+2028/9 in its strings escaped as json.Marshal writes
// them, so that backend data read, written back and read again is the same bytes (Equal).
func htmlEscaped(v json.RawMessage) json.RawMessage {
	if !needsEscape(v) {
		return v
	}
	var b bytes.Buffer
	json.HTMLEscape(&b, v)
	return b.Bytes()
}

// needsEscape reports whether v holds <, >, & or U+2028/9 (whose UTF-8 starts with 0xe2),
// byte by byte: bytes.ContainsAny decodes v rune by rune when the set is not all ASCII, which
// made this check a quarter of the decoding of 20,000 leases.
func needsEscape(v []byte) bool {
	for i, c := range v {
		switch c {
		case '<', '>', '&':
			return true
		case 0xe2:
			if i+2 < len(v) && v[i+1] == 0x80 && (v[i+2] == 0xa8 || v[i+2] == 0xa9) {
				return true
			}
		}
	}
	return false
}

func jsonEqual(a, b json.RawMessage) bool {
	if isJSONNull(a) || len(a) == 0 {
		return isJSONNull(b) || len(b) == 0
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
