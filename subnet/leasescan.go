package subnet

import "encoding/json"

// Every node reads every lease value at start-up: 65,000 of them in the largest clusters,
// which took encoding/json's reflection 2.5 µs and 10 allocations each (170 ms of CPU at
// 65,000 leases, and their garbage). Nearly all were written by json.Marshal, flanneld's and
// weftd's alike, in one shape; scanAttrs reads that shape directly, in 0.9 µs and 4
// allocations (BenchmarkLeaseAttrsUnmarshal), and leaves every other to encoding/json.

// scanAttrs reads data into w, which is zero, as json.Unmarshal would, when data is a lease
// value in the shape json.Marshal writes: one object without whitespace between its
// tokens, whose keys are wireAttrs' field names as spelt there, each at most once, with
// strings of printable ASCII without escapes and, for the backend data, null or an object
// of printable ASCII. It returns false for anything else, having maybe written part of w:
// the caller zeroes w and has encoding/json read data (its case-insensitive keys, escapes,
// duplicate keys, whitespace, errors). Where it returns true, encoding/json reads the same
// (FuzzScanAttrs).
func scanAttrs(data []byte, w *wireAttrs) bool {
	s, ok := cut(data, '{')
	if !ok {
		return false
	}
	if string(s) == "}" {
		return true
	}
	var seen uint8
	for {
		key, rest, ok := scanString(s)
		if !ok {
			return false
		}
		if s, ok = cut(rest, ':'); !ok {
			return false
		}
		var bit uint8
		switch string(key) {
		case "PublicIP":
			bit = 1 << 0
			s, ok = scanText(s, &w.PublicIP)
		case "PublicIPv6":
			bit = 1 << 1
			if rest, isNull := cutNull(s); isNull {
				s = rest // a null leaves the pointer nil, as encoding/json does
			} else {
				w.PublicIPv6 = new(string)
				s, ok = scanText(s, w.PublicIPv6)
			}
		case "BackendType":
			bit = 1 << 2
			s, ok = scanText(s, &w.BackendType)
		case "BackendData":
			bit = 1 << 3
			w.BackendData, s, ok = scanRaw(s)
		case "BackendV6Data":
			bit = 1 << 4
			w.BackendV6Data, s, ok = scanRaw(s)
		case "WeftNodeID":
			bit = 1 << 5
			s, ok = scanText(s, &w.WeftNodeID)
		default:
			return false
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		if string(s) == "}" {
			return true
		}
		if s, ok = cut(s, ','); !ok {
			return false
		}
	}
}

// cut returns s after its first byte, if that is c.
func cut(s []byte, c byte) ([]byte, bool) {
	if len(s) == 0 || s[0] != c {
		return nil, false
	}
	return s[1:], true
}

// cutNull returns s after the literal null it starts with, if it does.
func cutNull(s []byte) ([]byte, bool) {
	if len(s) < 4 || string(s[:4]) != "null" {
		return nil, false
	}
	return s[4:], true
}

// printable reports whether c is printable ASCII: a byte a JSON string holds as it is, and
// that encoding/json reads as it is (it replaces invalid UTF-8).
func printable(c byte) bool { return c >= 0x20 && c < 0x7f }

// scanString reads the JSON string s starts with, of printable ASCII and no escapes: its
// content and the rest of s.
func scanString(s []byte) (v, rest []byte, ok bool) {
	if len(s) == 0 || s[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return s[1:i], s[i+1:], true
		case c == '\\' || !printable(c):
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// scanText reads the JSON string s starts with (scanString) into dst: one shared string for
// each backend type's name, rather than one per lease read. It returns the rest of s.
func scanText(s []byte, dst *string) ([]byte, bool) {
	v, rest, ok := scanString(s)
	if !ok {
		return nil, false
	}
	for _, t := range []string{BackendVXLAN, BackendHostGW, BackendWireGuard} {
		if string(v) == t {
			*dst = t
			return rest, true
		}
	}
	*dst = string(v)
	return rest, true
}

// scanRaw reads the backend data s starts with: null, kept as encoding/json keeps it in a
// json.RawMessage (the literal), or a valid object of printable ASCII, copied (the value
// must not share the datastore's buffer).
func scanRaw(s []byte) (v json.RawMessage, rest []byte, ok bool) {
	if rest, ok := cutNull(s); ok {
		return json.RawMessage("null"), rest, true
	}
	if len(s) == 0 || s[0] != '{' {
		return nil, nil, false
	}
	depth, inString := 0, false
	for i, c := range s {
		switch {
		case !printable(c):
			return nil, nil, false
		case inString:
			switch c {
			case '\\':
				return nil, nil, false
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				if !json.Valid(s[:i+1]) {
					return nil, nil, false
				}
				return append(json.RawMessage(nil), s[:i+1]...), s[i+1:], true
			}
		}
	}
	return nil, nil, false
}
