package kube

import (
	"net/netip"
	"strconv"
	"strings"
)

// A record (peerNode) keeps a watched annotation's value shorter when it is in a form that
// flanneld and weftd write and that the record gives back byte for byte: an IPv4 address in
// dotted decimal (the public IP, 4 bytes rather than up to 15) and VXLAN backend data as
// json.Marshal writes it (10 bytes rather than about 40). With the podCIDR, the name and the
// rest, a peer's record then takes the allocator's 64-byte class rather than 112. Such a
// field's 2-byte header has compactBit set in its first byte, which a length never has
// (maxValue+1 < 0x8000), the form in the rest of that byte and 0 in the second; its payload
// follows. Any other value, one byte different from these forms included, is kept as it is.
const (
	compactBit   = 0x80
	compactIPv4  = 1 // the address's 4 bytes
	compactVXLAN = 2 // the VNI, 4 bytes big-endian, and the VTEP MAC's 6
)

// The parts of VXLAN backend data as json.Marshal writes it:
// {"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}.
const (
	vxlanHead = `{"VNI":`
	vxlanMid  = `,"VtepMAC":"`
	vxlanTail = `"}`
)

// compactSize is the length of the payload of a compact form.
func compactSize(form byte) int {
	if form == compactVXLAN {
		return 10
	}
	return 4
}

// compactOf is the compact form of v and its payload; form 0 if v has none.
func compactOf[S string | []byte](v S) (form byte, payload [10]byte) {
	if a, ok := parseIPv4(v); ok {
		copy(payload[:], a[:])
		return compactIPv4, payload
	}
	if p, ok := parseVXLANData(v); ok {
		return compactVXLAN, p
	}
	return 0, payload
}

// expand gives back the value of a compact form's payload.
func expand(form byte, payload string) string {
	if form == compactIPv4 {
		return netip.AddrFrom4([4]byte{payload[0], payload[1], payload[2], payload[3]}).String()
	}
	// One allocation: the value (the data of 65,000 Nodes is read at start).
	var num [10]byte
	vni := uint32(payload[0])<<24 | uint32(payload[1])<<16 | uint32(payload[2])<<8 | uint32(payload[3])
	digits := strconv.AppendUint(num[:0], uint64(vni), 10)
	var b strings.Builder
	b.Grow(len(vxlanHead) + len(digits) + len(vxlanMid) + 17 + len(vxlanTail))
	b.WriteString(vxlanHead)
	b.Write(digits)
	b.WriteString(vxlanMid)
	const hex = "0123456789abcdef"
	for i, c := range []byte(payload[4:10]) {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	b.WriteString(vxlanTail)
	return b.String()
}

// parseIPv4 reads an IPv4 address written as netip.Addr.String writes it: four numbers of 0
// to 255, without leading zeros, between dots.
func parseIPv4[S string | []byte](v S) (a [4]byte, ok bool) {
	i := 0
	for k := range a {
		if k > 0 {
			if i >= len(v) || v[i] != '.' {
				return a, false
			}
			i++
		}
		start, n := i, 0
		for i < len(v) && i-start < 3 && v[i] >= '0' && v[i] <= '9' {
			n = n*10 + int(v[i]-'0')
			i++
		}
		if i == start || n > 255 || (v[start] == '0' && i-start > 1) {
			return a, false
		}
		a[k] = byte(n)
	}
	return a, i == len(v)
}

// parseVXLANData reads VXLAN backend data written as expand writes it: a VNI of at most
// 32 bits without leading zeros, a MAC in lower-case hex.
func parseVXLANData[S string | []byte](v S) (p [10]byte, ok bool) {
	if len(v) < len(vxlanHead)+1+len(vxlanMid)+17+len(vxlanTail) || string(v[:len(vxlanHead)]) != vxlanHead {
		return p, false
	}
	i, vni := len(vxlanHead), uint64(0)
	for start := i; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
		if i > start && v[start] == '0' {
			return p, false
		}
		vni = vni*10 + uint64(v[i]-'0')
		if vni > 1<<32-1 {
			return p, false
		}
	}
	if i == len(vxlanHead) || len(v)-i != len(vxlanMid)+17+len(vxlanTail) || string(v[i:i+len(vxlanMid)]) != vxlanMid ||
		string(v[len(v)-len(vxlanTail):]) != vxlanTail {
		return p, false
	}
	p[0], p[1], p[2], p[3] = byte(vni>>24), byte(vni>>16), byte(vni>>8), byte(vni)
	mac := v[i+len(vxlanMid) : len(v)-len(vxlanTail)]
	for k := range 6 {
		hi, okHi := lowerHex(mac[3*k])
		lo, okLo := lowerHex(mac[3*k+1])
		if !okHi || !okLo || (k < 5 && mac[3*k+2] != ':') {
			return p, false
		}
		p[4+k] = hi<<4 | lo
	}
	return p, true
}

// lowerHex is the value of a lower-case hex digit.
func lowerHex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
