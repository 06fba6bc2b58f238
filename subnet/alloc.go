package subnet

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
)

// ErrOutOfSubnets is returned when every subnet of the range is taken.
var ErrOutOfSubnets = errors.New("out of subnets")

// Range is the set of subnets that may be leased: every aligned /Len from Min to Max inclusive.
type Range struct {
	Min, Max netip.Addr
	Len      int
}

// IPv4Range is the range of IPv4 subnets the config allows; zero when IPv4 is disabled.
func (c *Config) IPv4Range() Range {
	if !c.EnableIPv4 {
		return Range{}
	}
	return Range{Min: c.SubnetMin, Max: c.SubnetMax, Len: c.SubnetLen}
}

// IPv6Range is the range of IPv6 subnets the config allows; zero when IPv6 is disabled.
func (c *Config) IPv6Range() Range {
	if !c.EnableIPv6 {
		return Range{}
	}
	return Range{Min: c.IPv6SubnetMin, Max: c.IPv6SubnetMax, Len: c.IPv6SubnetLen}
}

// Contains reports whether p is one of the range's subnets.
func (r Range) Contains(p netip.Prefix) bool {
	if !r.Min.IsValid() || !p.IsValid() || p.Bits() != r.Len || p.Addr().BitLen() != r.Min.BitLen() {
		return false
	}
	a := p.Addr()
	return p.Masked() == p && !a.Less(r.Min) && !r.Max.Less(a)
}

// maxRangeSize caps the subnets of a range that are considered: an IPv6 network can hold
// more than 64 bits of subnets, and 2^62 of them are plenty to pick from.
const maxRangeSize = 1 << 62

// Size is the number of subnets in the range, at most 2^62.
func (r Range) Size() uint64 {
	if !r.Min.IsValid() {
		return 0
	}
	return min(r.index(r.Max), maxRangeSize-1) + 1
}

// index is the position in the range of the subnet holding a (which must not be below Min),
// saturated at MaxUint64.
func (r Range) index(a netip.Addr) uint64 {
	d := toU128(a).sub(toU128(r.Min)).shr(uint(r.Min.BitLen() - r.Len))
	if d.hi != 0 {
		return math.MaxUint64
	}
	return d.lo
}

// Nth is the subnet at position i of the range.
func (r Range) Nth(i uint64) netip.Prefix {
	return netip.PrefixFrom(nthSubnet(r.Min, i, r.Len), r.Len)
}

// Allocate picks a free subnet of r uniformly at random. taken are the subnets in use, of any
// length and family (those outside r are ignored). prefer, when it is one of r's subnets and
// free, is returned as is: a node keeps its subnet across restarts. randN(n) must return a
// uniform number in [0, n).
func Allocate(r Range, taken []netip.Prefix, prefer netip.Prefix, randN func(n uint64) uint64) (netip.Prefix, error) {
	size := r.Size()
	if size == 0 {
		return netip.Prefix{}, fmt.Errorf("allocate: empty range")
	}
	used := r.takenIntervals(taken)
	if r.Contains(prefer) {
		i := r.index(prefer.Addr())
		_, hit := slices.BinarySearchFunc(used, i, func(iv interval, i uint64) int {
			switch {
			case iv.hi < i:
				return -1
			case iv.lo > i:
				return 1
			}
			return 0
		})
		if !hit {
			return prefer, nil
		}
	}
	inUse := count(used)
	if inUse >= size {
		return netip.Prefix{}, fmt.Errorf("%w: all %d subnets /%d from %s to %s are taken", ErrOutOfSubnets, size, r.Len, r.Min, r.Max)
	}
	// Pick the k-th free index: walk the gaps between taken intervals.
	k := randN(size - inUse)
	var next uint64 // first index not yet accounted for
	for _, iv := range used {
		if gap := iv.lo - next; k < gap {
			break
		} else {
			k -= gap
		}
		next = iv.hi + 1
	}
	return r.Nth(next + k), nil
}

type interval struct{ lo, hi uint64 } // inclusive indexes into a Range

// Leased is how many of the range's subnets the taken prefixes (of any length and family)
// cover: the allocator's view of what is in use.
func (r Range) Leased(taken []netip.Prefix) uint64 {
	if r.Size() == 0 {
		return 0
	}
	return count(r.takenIntervals(taken))
}

// count is how many indexes the intervals hold.
func count(ivs []interval) uint64 {
	var n uint64
	for _, iv := range ivs {
		n += iv.hi - iv.lo + 1
	}
	return n
}

// takenIntervals maps taken prefixes onto sorted, merged intervals of range indexes.
func (r Range) takenIntervals(taken []netip.Prefix) []interval {
	last := r.Size() - 1
	var ivs []interval
	for _, p := range taken {
		if !p.IsValid() || p.Addr().BitLen() != r.Min.BitLen() {
			continue
		}
		p = p.Masked()
		lo, hi := p.Addr(), LastAddr(p)
		if hi.Less(r.Min) {
			continue
		}
		var iv interval
		if r.Min.Less(lo) {
			iv.lo = r.index(lo)
		}
		if iv.lo > last {
			continue
		}
		iv.hi = min(r.index(hi), last)
		ivs = append(ivs, iv)
	}
	slices.SortFunc(ivs, func(a, b interval) int { return cmp.Compare(a.lo, b.lo) })
	merged := ivs[:0]
	for _, iv := range ivs {
		if n := len(merged); n > 0 && iv.lo <= merged[n-1].hi+1 {
			merged[n-1].hi = max(merged[n-1].hi, iv.hi)
			continue
		}
		merged = append(merged, iv)
	}
	return merged
}

// nthSubnet is base + i subnets of length l.
func nthSubnet(base netip.Addr, i uint64, l int) netip.Addr {
	return toU128(base).add(u128{lo: i}.shl(uint(base.BitLen() - l))).addr(base.BitLen())
}

// lastSubnet is the highest subnet of length l inside p.
func lastSubnet(p netip.Prefix, l int) netip.Addr {
	return netip.PrefixFrom(LastAddr(p), l).Masked().Addr()
}

// LastAddr is the highest address of p: an IPv4 subnet's broadcast address.
func LastAddr(p netip.Prefix) netip.Addr {
	bits := p.Addr().BitLen()
	host := u128{hi: math.MaxUint64, lo: math.MaxUint64}.shr(uint(128 - bits + p.Bits()))
	v := toU128(p.Masked().Addr())
	return u128{hi: v.hi | host.hi, lo: v.lo | host.lo}.addr(bits)
}

// u128 is a 128-bit unsigned number: IPv6 subnet arithmetic does not fit in 64 bits.
type u128 struct{ hi, lo uint64 }

func toU128(a netip.Addr) u128 {
	b := a.As16()
	var v u128
	for i := 0; i < 8; i++ {
		v.hi = v.hi<<8 | uint64(b[i])
		v.lo = v.lo<<8 | uint64(b[i+8])
	}
	if a.Is4() {
		v.hi, v.lo = 0, v.lo&math.MaxUint32
	}
	return v
}

func (v u128) addr(bits int) netip.Addr {
	if bits == 32 {
		x := uint32(v.lo)
		return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
	}
	var b [16]byte
	for i := 0; i < 8; i++ {
		b[7-i] = byte(v.hi >> (8 * i))
		b[15-i] = byte(v.lo >> (8 * i))
	}
	return netip.AddrFrom16(b)
}

func (v u128) add(w u128) u128 {
	lo := v.lo + w.lo
	carry := uint64(0)
	if lo < v.lo {
		carry = 1
	}
	return u128{hi: v.hi + w.hi + carry, lo: lo}
}

func (v u128) sub(w u128) u128 {
	lo := v.lo - w.lo
	borrow := uint64(0)
	if v.lo < w.lo {
		borrow = 1
	}
	return u128{hi: v.hi - w.hi - borrow, lo: lo}
}

func (v u128) shl(n uint) u128 {
	switch {
	case n >= 128:
		return u128{}
	case n >= 64:
		return u128{hi: v.lo << (n - 64)}
	case n == 0:
		return v
	}
	return u128{hi: v.hi<<n | v.lo>>(64-n), lo: v.lo << n}
}

func (v u128) shr(n uint) u128 {
	switch {
	case n >= 128:
		return u128{}
	case n >= 64:
		return u128{lo: v.hi >> (n - 64)}
	case n == 0:
		return v
	}
	return u128{hi: v.hi >> n, lo: v.lo>>n | v.hi<<(64-n)}
}

// Compatible reports whether a lease on sn and sn6 fits the config: each enabled family has a
// subnet of the configured length inside its Network, each disabled one has none. A lease
// made under another config (the Network changed) is not.
func (c *Config) Compatible(sn, sn6 netip.Prefix) bool {
	fits := func(on bool, network netip.Prefix, l int, p netip.Prefix) bool {
		if !on {
			return !p.IsValid()
		}
		return p.IsValid() && p.Bits() == l && p.Masked() == p && network.Contains(p.Addr())
	}
	return fits(c.EnableIPv4, c.Network, c.SubnetLen, sn) && fits(c.EnableIPv6, c.IPv6Network, c.IPv6SubnetLen, sn6)
}
