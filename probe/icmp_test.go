package probe

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// icmpError is an ICMP error of type typ and code carrying mtu, quoting an echo request
// (id, seq) to dst whose IP header is as a router sees it. IPv6 when dst is.
func icmpError(typ, code byte, mtu int, dst netip.Addr, id, seq int) []byte {
	b := []byte{typ, code, 0, 0, 0, 0, 0, 0}
	var ipHdr []byte
	if dst.Is6() {
		binary.BigEndian.PutUint32(b[4:8], uint32(mtu))
		ipHdr = make([]byte, ipv6Header)
		ipHdr[0], ipHdr[6], ipHdr[7] = 0x60, 58, 63
		copy(ipHdr[8:24], netip.MustParseAddr("fd00:1::").AsSlice())
		copy(ipHdr[24:40], dst.AsSlice())
	} else {
		binary.BigEndian.PutUint16(b[6:8], uint16(mtu))
		ipHdr = make([]byte, ipv4Header)
		ipHdr[0], ipHdr[8], ipHdr[9] = 0x45, 63, 1
		copy(ipHdr[12:16], netip.MustParseAddr("10.244.1.0").AsSlice())
		copy(ipHdr[16:20], dst.AsSlice())
	}
	echoType := byte(8)
	if dst.Is6() {
		echoType = 128
	}
	echo := []byte{echoType, 0, 0, 0, byte(id >> 8), byte(id), byte(seq >> 8), byte(seq)}
	return append(append(b, ipHdr...), echo...)
}

// TestQuoted: the request an ICMP error quotes, and the MTU it names, for IPv4's
// "fragmentation needed" and ICMPv6's "packet too big"; errors about other packets are not
// this Pinger's.
func TestQuoted(t *testing.T) {
	c := &ICMP{id: 0x1234}
	v4, v6 := netip.MustParseAddr("10.244.2.254"), netip.MustParseAddr("fd00:2::ffff")
	for _, tc := range []struct {
		name   string
		b      []byte
		v6, ok bool
		seq    int
		dst    netip.Addr
		mtu    int
	}{
		{"ipv4 fragmentation needed", icmpError(3, 4, 1350, v4, 0x1234, 7), false, true, 7, v4, 1350},
		{"ipv6 packet too big", icmpError(2, 0, 1330, v6, 0x1234, 65535), true, true, 65535, v6, 1330},
		{"another program's echo", icmpError(3, 4, 1350, v4, 0x4321, 7), false, false, 0, netip.Addr{}, 0},
		{"truncated quote", icmpError(3, 4, 1350, v4, 0x1234, 7)[:30], false, false, 0, netip.Addr{}, 0},
		{"ipv4 quote of another protocol", func() []byte {
			b := icmpError(3, 4, 1350, v4, 0x1234, 7)
			b[8+9] = 17 // UDP
			return b
		}(), false, false, 0, netip.Addr{}, 0},
		{"ipv6 quote with an extension header", func() []byte {
			b := icmpError(2, 0, 1330, v6, 0x1234, 7)
			b[8+6] = 44 // fragment header
			return b
		}(), true, false, 0, netip.Addr{}, 0},
		{"quote of an echo reply", func() []byte {
			b := icmpError(3, 4, 1350, v4, 0x1234, 7)
			b[8+ipv4Header] = 0
			return b
		}(), false, false, 0, netip.Addr{}, 0},
		{"too short", []byte{3, 4, 0}, false, false, 0, netip.Addr{}, 0},
	} {
		seq, dst, mtu, ok := c.quoted(tc.b, tc.v6)
		if ok != tc.ok || ok && (seq != tc.seq || dst != tc.dst || mtu != tc.mtu) {
			t.Errorf("%s: quoted = %d, %s, %d, %t; want %d, %s, %d, %t", tc.name, seq, dst, mtu, ok, tc.seq, tc.dst, tc.mtu, tc.ok)
		}
	}
}

// FuzzQuoted: whatever an ICMP error holds, reading it neither panics nor finds a request
// in a message too short to quote one.
func FuzzQuoted(f *testing.F) {
	f.Add(icmpError(3, 4, 1350, netip.MustParseAddr("10.244.2.254"), 0x1234, 7), false)
	f.Add(icmpError(2, 0, 1330, netip.MustParseAddr("fd00:2::ffff"), 0x1234, 7), true)
	f.Add([]byte{3, 4, 0, 0, 0, 0, 5, 0x46}, false)
	c := &ICMP{id: 0x1234}
	f.Fuzz(func(t *testing.T, b []byte, v6 bool) {
		seq, dst, _, ok := c.quoted(b, v6)
		if !ok {
			return
		}
		if min := 8 + ipv4Header + echoHeader; v6 {
			if len(b) < 8+ipv6Header+echoHeader || !dst.Is6() {
				t.Fatalf("IPv6 request found in %d bytes: %s", len(b), dst)
			}
		} else if len(b) < min || !dst.Is4() {
			t.Fatalf("IPv4 request found in %d bytes: %s", len(b), dst)
		}
		if seq < 0 || seq > 0xffff {
			t.Fatalf("sequence number %d", seq)
		}
	})
}
