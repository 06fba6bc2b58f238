package subnet

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// noIPv4Key stands for the IPv4 part of the key of an IPv6-only lease, as flannel writes it.
const noIPv4Key = "0.0.0.0-0"

// Key is the datastore key of a lease: "10.5.52.0-24", or "10.12.13.0-24&fd00:12:13::-56"
// for a dual-stack one ("0.0.0.0-0&fd00:12:13::-56" when only IPv6 is leased).
func Key(sn, sn6 netip.Prefix) string {
	k := noIPv4Key
	if sn.IsValid() {
		k = sn.Addr().String() + "-" + strconv.Itoa(sn.Bits())
	}
	if sn6.IsValid() {
		k += "&" + sn6.Addr().String() + "-" + strconv.Itoa(sn6.Bits())
	}
	return k
}

// ParseKey parses a lease key (the last element of the datastore path). It accepts only the
// canonical form that Key writes, so that one subnet never has two keys.
func ParseKey(key string) (sn, sn6 netip.Prefix, err error) {
	v4, v6, dual := strings.Cut(key, "&")
	if v4 != noIPv4Key || !dual {
		if sn, err = parseKeyPart(v4, 32); err != nil {
			return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("subnet key %q: %w", key, err)
		}
	}
	if dual {
		if sn6, err = parseKeyPart(v6, 128); err != nil {
			return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("subnet key %q: %w", key, err)
		}
	}
	return sn, sn6, nil
}

func parseKeyPart(s string, bits int) (netip.Prefix, error) {
	i := strings.LastIndexByte(s, '-')
	if i < 0 {
		return netip.Prefix{}, fmt.Errorf("%q has no '-<prefix length>'", s)
	}
	a, err := netip.ParseAddr(s[:i])
	if err != nil || a.BitLen() != bits || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q is not an IPv%d address", s[:i], map[int]int{32: 4, 128: 6}[bits])
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n < 1 || n > bits || strconv.Itoa(n) != s[i+1:] {
		return netip.Prefix{}, fmt.Errorf("%q is not a prefix length from 1 to %d", s[i+1:], bits)
	}
	p := netip.PrefixFrom(a, n)
	if p.Masked() != p || a.String() != s[:i] {
		return netip.Prefix{}, fmt.Errorf("%q is not in canonical form (%s-%d)", s, p.Masked().Addr(), n)
	}
	return p, nil
}
