package backend

import (
	"net/netip"

	"github.com/weftnet/weft/subnet"
)

// Family is an IP family. A dual-stack node runs one Backend, Set and Plane per family: each
// family has its own network, subnets, public addresses and (vxlan) device, and a lease's
// halves are programmed, or skipped, independently.
type Family uint8

// The families, numbered as IPv4 and IPv6 are.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

// Families are the families cfg enables, IPv4 first.
func Families(cfg *subnet.Config) []Family {
	var out []Family
	if cfg.EnableIPv4 {
		out = append(out, IPv4)
	}
	if cfg.EnableIPv6 {
		out = append(out, IPv6)
	}
	return out
}

// Other is the other family.
func (f Family) Other() Family {
	if f == IPv6 {
		return IPv4
	}
	return IPv6
}

// Network is the family's cluster network in cfg.
func (f Family) Network(cfg *subnet.Config) netip.Prefix {
	if f == IPv6 {
		return cfg.IPv6Network
	}
	return cfg.Network
}

// SubnetLen is the length of the family's node subnets in cfg.
func (f Family) SubnetLen(cfg *subnet.Config) int {
	if f == IPv6 {
		return cfg.IPv6SubnetLen
	}
	return cfg.SubnetLen
}

// Of reports whether a is an address of the family (an IPv4-mapped IPv6 address is not).
func (f Family) Of(a netip.Addr) bool {
	if f == IPv6 {
		return a.Is6() && !a.Is4In6()
	}
	return a.Is4()
}

// MinMTU is the smallest MTU the family's links may have: 68 for IPv4 (RFC 791), 1280 for
// IPv6 (RFC 8200).
func (f Family) MinMTU() int {
	if f == IPv6 {
		return 1280
	}
	return 68
}

// Subnet is the family's subnet of a lease.
func (f Family) Subnet(l subnet.Lease) netip.Prefix { return Subnet(f, l.Subnet, l.IPv6Subnet) }

// Subnet is the one of sn (IPv4) and sn6 (IPv6) that is of family f.
func Subnet(f Family, sn, sn6 netip.Prefix) netip.Prefix {
	if f == IPv6 {
		return sn6
	}
	return sn
}
