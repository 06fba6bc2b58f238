package masq

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// family holds what differs between "table ip" and "table ip6" in the
// encoding of the rules.
type family struct {
	name    string // nft's name of the family, for logs
	table   nftables.TableFamily
	addrLen uint32 // bytes of an address in the IP header
	srcOff  uint32 // offset of the source address in the IP header
	dstOff  uint32 // offset of the destination address in the IP header
}

// familyOf returns the IPv4 or IPv6 family description. It is a function
// rather than two package variables so the package holds no mutable state.
func familyOf(v6 bool) family {
	if v6 {
		return family{name: "ip6", table: nftables.TableFamilyIPv6, addrLen: 16, srcOff: 8, dstOff: 24}
	}
	return family{name: "ip", table: nftables.TableFamilyIPv4, addrLen: 4, srcOff: 12, dstOff: 16}
}

// reg is the register every match of a rule loads into and compares from; one
// is enough because each match is complete before the next one starts.
const reg = 1

// userdata type of a rule comment, as nft writes it (libnftnl's
// NFTNL_UDATA_RULE_COMMENT): a type byte, a length byte, a NUL-terminated string.
const udataComment = 0

// encode turns a rule into the expressions and userdata nft itself would
// produce for it, so that `nft list ruleset` shows it in its usual syntax.
func (f family) encode(s ruleSpec) ([]expr.Any, []byte) {
	var out []expr.Any
	if s.markMask != 0 {
		// skb->mark travels in host byte order in the registers, unlike
		// packet data.
		m := binary.NativeEndian.AppendUint32(nil, s.markMask)
		out = append(out,
			&expr.Meta{Key: expr.MetaKeyMARK, Register: reg},
			&expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4, Mask: m, Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: bytes.Clone(m)},
		)
	}
	for _, a := range s.addrs {
		off := f.srcOff
		if a.field == dstAddr {
			off = f.dstOff
		}
		out = append(out, &expr.Payload{
			OperationType: expr.PayloadLoad,
			DestRegister:  reg,
			Base:          expr.PayloadBaseNetworkHeader,
			Offset:        off,
			Len:           f.addrLen,
		})
		if a.prefix.Bits() < int(f.addrLen)*8 {
			out = append(out, &expr.Bitwise{
				SourceRegister: reg,
				DestRegister:   reg,
				Len:            f.addrLen,
				Mask:           prefixMask(a.prefix.Bits(), int(f.addrLen)),
				Xor:            make([]byte, f.addrLen),
			})
		}
		op := expr.CmpOpEq
		if a.not {
			op = expr.CmpOpNeq
		}
		out = append(out, &expr.Cmp{Op: op, Register: reg, Data: a.prefix.Addr().AsSlice()})
	}
	switch s.action {
	case actReturn:
		out = append(out, &expr.Verdict{Kind: expr.VerdictReturn})
	case actMasquerade:
		// fully-random, as flannel does: with masquerade's default of
		// keeping the source port, two pods that open connections from the
		// same port to the same destination at the same moment race for one
		// translated tuple in conntrack and one of the first packets is lost.
		out = append(out, &expr.Masq{FullyRandom: true})
	case actMasqueradePlain:
		out = append(out, &expr.Masq{})
	case actAccept:
		out = append(out, &expr.Verdict{Kind: expr.VerdictAccept})
	}
	return out, appendComment(nil, s.comment)
}

// decode reads a rule back from the kernel's expressions and userdata. It
// accepts only the shapes encode produces (and the equivalent ones nft would
// write), so anything else — a rule added or edited by hand — is reported as
// an error and gets replaced.
//
// github.com/google/nftables silently drops expressions it cannot parse; such
// a rule can only be told apart by what remains, which is a limit of the
// library, not of this check.
func (f family) decode(exprs []expr.Any, udata []byte) (ruleSpec, error) {
	s := ruleSpec{comment: readComment(udata)}
	i := 0
	next := func() expr.Any {
		if i >= len(exprs) {
			return nil
		}
		e := exprs[i]
		i++
		return e
	}
	for {
		e := next()
		switch e := e.(type) {
		case nil:
			return ruleSpec{}, fmt.Errorf("rule has no verdict")
		case *expr.Meta:
			if s.markMask != 0 || len(s.addrs) != 0 {
				return ruleSpec{}, fmt.Errorf("unexpected meta expression")
			}
			mask, err := decodeMark(e, next)
			if err != nil {
				return ruleSpec{}, err
			}
			s.markMask = mask
		case *expr.Payload:
			m, err := f.decodeAddr(e, next)
			if err != nil {
				return ruleSpec{}, err
			}
			s.addrs = append(s.addrs, m)
		case *expr.Verdict:
			switch e.Kind {
			case expr.VerdictReturn:
				s.action = actReturn
			case expr.VerdictAccept:
				s.action = actAccept
			default:
				return ruleSpec{}, fmt.Errorf("verdict %d, want return or accept", e.Kind)
			}
		case *expr.Masq:
			if e.Random || e.Persistent || e.ToPorts {
				return ruleSpec{}, fmt.Errorf("masquerade with flags %+v, want none but fully-random", *e)
			}
			s.action = actMasqueradePlain
			if e.FullyRandom {
				s.action = actMasquerade
			}
		default:
			return ruleSpec{}, fmt.Errorf("unexpected expression %T", e)
		}
		if s.action != 0 {
			if i != len(exprs) {
				return ruleSpec{}, fmt.Errorf("%d expressions after the verdict", len(exprs)-i)
			}
			return s, nil
		}
	}
}

// decodeMark reads "meta mark & m == m" following a meta expression.
func decodeMark(meta *expr.Meta, next func() expr.Any) (uint32, error) {
	if meta.Key != expr.MetaKeyMARK || meta.SourceRegister {
		return 0, fmt.Errorf("meta expression is not a load of the mark")
	}
	bw, ok := next().(*expr.Bitwise)
	if !ok || bw.SourceRegister != meta.Register || bw.DestRegister != meta.Register || bw.Len != 4 ||
		len(bw.Mask) != 4 || !isZero(bw.Xor) {
		return 0, fmt.Errorf("mark is not masked as expected")
	}
	cmp, ok := next().(*expr.Cmp)
	if !ok || cmp.Op != expr.CmpOpEq || cmp.Register != meta.Register || !bytes.Equal(cmp.Data, bw.Mask) {
		return 0, fmt.Errorf("mark is not compared with its mask")
	}
	mask := binary.NativeEndian.Uint32(bw.Mask)
	if mask == 0 {
		return 0, fmt.Errorf("mark mask is zero")
	}
	return mask, nil
}

// decodeAddr reads "ip saddr|daddr [!=] prefix" following a payload load.
func (f family) decodeAddr(p *expr.Payload, next func() expr.Any) (addrMatch, error) {
	var m addrMatch
	switch {
	case p.OperationType != expr.PayloadLoad || p.Base != expr.PayloadBaseNetworkHeader || p.Len != f.addrLen:
		return m, fmt.Errorf("payload expression is not an %s address load", f.name)
	case p.Offset == f.srcOff:
		m.field = srcAddr
	case p.Offset == f.dstOff:
		m.field = dstAddr
	default:
		return m, fmt.Errorf("payload offset %d is not an %s address", p.Offset, f.name)
	}
	e := next()
	n := int(f.addrLen)
	bitLen := n * 8
	if bw, ok := e.(*expr.Bitwise); ok {
		if bw.SourceRegister != p.DestRegister || bw.DestRegister != p.DestRegister || bw.Len != f.addrLen ||
			!isZero(bw.Xor) {
			return m, fmt.Errorf("address is not masked as expected")
		}
		b, ok := maskBits(bw.Mask, n)
		if !ok {
			return m, fmt.Errorf("address mask %x is not a prefix", bw.Mask)
		}
		bitLen = b
		e = next()
	}
	cmp, ok := e.(*expr.Cmp)
	if !ok || cmp.Register != p.DestRegister || len(cmp.Data) != n ||
		(cmp.Op != expr.CmpOpEq && cmp.Op != expr.CmpOpNeq) {
		return m, fmt.Errorf("address is not compared as expected")
	}
	addr, _ := netip.AddrFromSlice(cmp.Data)
	m.prefix = netip.PrefixFrom(addr, bitLen)
	if m.prefix.Masked() != m.prefix {
		// Host bits under the mask make the comparison always false (or,
		// negated, always true): not a rule weft wrote.
		return m, fmt.Errorf("address %s has bits outside its mask", m.prefix)
	}
	m.not = cmp.Op == expr.CmpOpNeq
	return m, nil
}

// prefixMask returns the n-byte network mask of a prefix length.
func prefixMask(bitLen, n int) []byte {
	m := make([]byte, n)
	for i := range m {
		switch {
		case bitLen >= 8:
			m[i] = 0xff
			bitLen -= 8
		case bitLen > 0:
			m[i] = ^byte(0xff >> bitLen)
			bitLen = 0
		}
	}
	return m
}

// maskBits returns the prefix length of an n-byte network mask, and false when
// it is not one (wrong length, or ones after zeros).
func maskBits(m []byte, n int) (int, bool) {
	if len(m) != n {
		return 0, false
	}
	total := 0
	for _, b := range m {
		ones := bits.LeadingZeros8(^b)
		total += ones
		if ones < 8 {
			break
		}
	}
	return total, bytes.Equal(m, prefixMask(total, n))
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// appendComment appends a comment TLV to rule userdata, as nft writes it.
func appendComment(udata []byte, comment string) []byte {
	if comment == "" {
		return udata
	}
	v := append([]byte(comment), 0)
	return append(append(udata, udataComment, byte(len(v))), v...)
}

// readComment returns the comment of rule userdata, or "" if it has none. It
// is written here rather than taken from the library's userdata package because
// userdata comes from whoever last wrote the rule, and that package's parser
// slices past the end of a malformed TLV and would panic the daemon.
func readComment(udata []byte) string {
	for len(udata) >= 2 {
		typ, n := udata[0], int(udata[1])
		if len(udata) < 2+n {
			return ""
		}
		if typ == udataComment {
			v, _ := bytes.CutSuffix(udata[2:2+n], []byte{0})
			return string(v)
		}
		udata = udata[2+n:]
	}
	return ""
}
