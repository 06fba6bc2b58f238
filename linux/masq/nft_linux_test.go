package masq

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/google/nftables/expr"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, c := range []struct {
		v6   bool
		n, s string
	}{
		{false, "10.244.0.0/16", "10.244.1.0/24"},
		{false, "10.244.0.0/14", "10.246.3.128/25"}, // prefixes not on byte boundaries
		{false, "10.244.0.0/16", "10.244.1.7/32"},   // a full-length prefix needs no mask
		{true, "fd00:10:244::/56", "fd00:10:244:1::/64"},
		{true, "fd00:10:244::/41", "fd00:10:244:1::/125"}, // masked to fd00:10:200::/41 by buildPlan
	} {
		r := Rules{Network: pfx(c.n), Subnet: pfx(c.s)}
		if c.v6 {
			r = Rules{IPv6Network: pfx(c.n), IPv6Subnet: pfx(c.s)}
		}
		p, err := buildPlan(r)
		if err != nil {
			t.Fatalf("%s %s: %v", c.n, c.s, err)
		}
		fp := p.v4
		if c.v6 {
			fp = p.v6
		}
		f := familyOf(c.v6)
		for i, want := range fp.rules {
			exprs, udata := f.encode(want)
			got, err := f.decode(exprs, udata)
			if err != nil {
				t.Errorf("%s %s rule %d: decode: %v", c.n, c.s, i+1, err)
				continue
			}
			if !got.equal(want) {
				t.Errorf("%s %s rule %d: round trip gave %s, want %s", c.n, c.s, i+1, got, want)
			}
		}
	}
}

// The exact expressions matter beyond weft itself: they are what nft and a
// human debugging a node see. This pins them to what nft writes for the same
// rule.
func TestEncodeExpressions(t *testing.T) {
	f := familyOf(false)
	rules := familyRules(pfx("10.244.0.0/16"), pfx("10.244.1.0/24"), actMasquerade)

	mark := binary.NativeEndian.AppendUint32(nil, 0x4000)
	got, udata := f.encode(rules[0])
	want := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mark, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: mark},
		&expr.Verdict{Kind: expr.VerdictReturn},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mark rule:\n got %#v\nwant %#v", got, want)
	}
	if wantU := append([]byte{0, byte(len(commentKubeProxy) + 1)}, commentKubeProxy+"\x00"...); string(udata) != string(wantU) {
		t.Errorf("userdata %q, want %q", udata, wantU)
	}

	got, _ = f.encode(rules[2])
	want = []expr.Any{
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 255, 0, 0}, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{10, 244, 0, 0}},
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{240, 0, 0, 0}, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{224, 0, 0, 0}},
		&expr.Masq{FullyRandom: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("masquerade rule:\n got %#v\nwant %#v", got, want)
	}

	f6 := familyOf(true)
	got, _ = f6.encode(familyRules(pfx("fd00:10:244::/56"), pfx("fd00:10:244:1::/64"), actMasquerade)[3])
	if p, ok := got[0].(*expr.Payload); !ok || p.Offset != 8 || p.Len != 16 {
		t.Errorf("ipv6 saddr load is %#v, want offset 8 length 16", got[0])
	}
	if p, ok := got[3].(*expr.Payload); !ok || p.Offset != 24 || p.Len != 16 {
		t.Errorf("ipv6 daddr load is %#v, want offset 24 length 16", got[3])
	}
}

func TestDecodeRejectsForeignRules(t *testing.T) {
	f := familyOf(false)
	base, udata := f.encode(familyRules(pfx("10.244.0.0/16"), pfx("10.244.1.0/24"), actMasquerade)[2])
	clone := func() []expr.Any {
		out := make([]expr.Any, len(base))
		for i, e := range base {
			v := reflect.New(reflect.TypeOf(e).Elem())
			v.Elem().Set(reflect.ValueOf(e).Elem())
			out[i] = v.Interface().(expr.Any)
		}
		return out
	}
	tests := []struct {
		name   string
		mutate func([]expr.Any) []expr.Any
		want   string
	}{
		{"no verdict", func(e []expr.Any) []expr.Any { return e[:len(e)-1] }, "no verdict"},
		{"drop instead of return", func(e []expr.Any) []expr.Any {
			e[len(e)-1] = &expr.Verdict{Kind: expr.VerdictDrop}
			return e
		}, "want return or accept"},
		// A masquerade without fully-random decodes (--ip-masq-fully-random-disable's), and
		// differs from a wanted fully-random one; other flags are no rule of weft's.
		{"masquerade random", func(e []expr.Any) []expr.Any {
			e[len(e)-1] = &expr.Masq{Random: true}
			return e
		}, "want none but fully-random"},
		{"masquerade persistent", func(e []expr.Any) []expr.Any {
			e[len(e)-1] = &expr.Masq{FullyRandom: true, Persistent: true}
			return e
		}, "want none but fully-random"},
		{"counter added", func(e []expr.Any) []expr.Any {
			return append(e[:len(e)-1:len(e)-1], &expr.Counter{}, e[len(e)-1])
		}, "unexpected expression *expr.Counter"},
		{"expression after verdict", func(e []expr.Any) []expr.Any {
			return append(e, &expr.Verdict{Kind: expr.VerdictReturn})
		}, "after the verdict"},
		{"host bits under the mask", func(e []expr.Any) []expr.Any {
			e[2].(*expr.Cmp).Data = []byte{10, 244, 0, 1}
			return e
		}, "bits outside its mask"},
		{"mask that is not a prefix", func(e []expr.Any) []expr.Any {
			e[1].(*expr.Bitwise).Mask = []byte{255, 0, 255, 0}
			return e
		}, "not a prefix"},
		{"ttl instead of an address", func(e []expr.Any) []expr.Any {
			e[0].(*expr.Payload).Offset = 8
			return e
		}, "not an ip address"},
		{"ipv6-sized load in an ip table", func(e []expr.Any) []expr.Any {
			e[0].(*expr.Payload).Len = 16
			return e
		}, "not an ip address load"},
		{"xor in the mask", func(e []expr.Any) []expr.Any {
			e[1].(*expr.Bitwise).Xor = []byte{0, 0, 0, 1}
			return e
		}, "not masked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.decode(tt.mutate(clone()), udata)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := f.decode(base, udata); err != nil {
		t.Fatalf("mutations leaked into the original rule: %v", err)
	}
}

func TestPrefixMask(t *testing.T) {
	for _, c := range []struct {
		bits, n int
		want    []byte
	}{
		{0, 4, []byte{0, 0, 0, 0}},
		{4, 4, []byte{0xf0, 0, 0, 0}},
		{16, 4, []byte{0xff, 0xff, 0, 0}},
		{25, 4, []byte{0xff, 0xff, 0xff, 0x80}},
		{32, 4, []byte{0xff, 0xff, 0xff, 0xff}},
		{8, 16, append([]byte{0xff}, make([]byte, 15)...)},
	} {
		got := prefixMask(c.bits, c.n)
		if string(got) != string(c.want) {
			t.Errorf("prefixMask(%d, %d) = %x, want %x", c.bits, c.n, got, c.want)
		}
		b, ok := maskBits(got, c.n)
		if !ok || b != c.bits {
			t.Errorf("maskBits(%x) = %d, %v, want %d, true", got, b, ok, c.bits)
		}
	}
	for _, m := range [][]byte{{0xff, 0, 0xff, 0}, {0x7f, 0, 0, 0}, {0xff, 0xff, 0}} {
		if _, ok := maskBits(m, 4); ok {
			t.Errorf("maskBits(%x) accepted a non-prefix", m)
		}
	}
}

// Userdata is written by whoever last touched a rule; a malformed one must
// not crash the daemon, only fail to match.
func TestReadComment(t *testing.T) {
	for _, c := range []struct {
		udata []byte
		want  string
	}{
		{appendComment(nil, "weft masq: x"), "weft masq: x"},
		{append([]byte{7, 2, 'a', 'b'}, appendComment(nil, "after another TLV")...), "after another TLV"},
		{[]byte{0, 200, 'a'}, ""}, // length past the end
		{[]byte{0}, ""},
		{nil, ""},
		{[]byte{0, 3, 'a', 'b', 'c'}, "abc"}, // no NUL, as some writers do
	} {
		if got := readComment(c.udata); got != c.want {
			t.Errorf("readComment(%q) = %q, want %q", c.udata, got, c.want)
		}
	}
}

func TestForwardRulesRoundTrip(t *testing.T) {
	for _, c := range []struct {
		v6 bool
		n  string
	}{{false, "10.244.0.0/16"}, {true, "fd00:10:244::/56"}} {
		f := familyOf(c.v6)
		for _, r := range forwardRules(pfx(c.n)) {
			exprs, udata := f.encode(r)
			if v, ok := exprs[len(exprs)-1].(*expr.Verdict); !ok || v.Kind != expr.VerdictAccept {
				t.Errorf("%s: ends with %#v, want accept", r, exprs[len(exprs)-1])
			}
			got, err := f.decode(exprs, udata)
			if err != nil || !got.equal(r) {
				t.Errorf("%s: round trip gave %s, %v", r, got, err)
			}
		}
	}
}
