package backend

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/weftnet/weft/subnet"
)

// Peers is the peer leases a backend may program, each checked against the config and the
// node's own lease, and the ones left out with the reason. The checks every backend shares
// are made here; a backend adds its own (VTEP MAC, reachability) on top.
type Peers struct {
	Usable  []subnet.Lease
	Skipped []Skipped
}

// SelectPeers keeps the IPv4 leases of backendType that a node holding own may route to:
// a subnet of the configured length inside the Network, not overlapping the node's own or
// an earlier peer's, from a plausible public IP of its own. Leases are considered in subnet
// order, so the choice between two that clash is the same on every node.
func SelectPeers(cfg *subnet.Config, backendType string, own subnet.Lease, leases []subnet.Lease) Peers {
	sorted := slices.Clone(leases)
	slices.SortFunc(sorted, func(a, b subnet.Lease) int {
		if c := a.Subnet.Addr().Compare(b.Subnet.Addr()); c != 0 {
			return c
		}
		return strings.Compare(a.Key(), b.Key())
	})
	var p Peers
	var taken []netip.Prefix
	seenIP := map[netip.Addr]string{}
	for _, l := range sorted {
		if l.Key() == own.Key() {
			continue
		}
		code, reason := "", ""
		switch {
		case l.Attrs.BackendType != backendType:
			code, reason = SkipBackendType, fmt.Sprintf("backend type %q, this node runs %q", l.Attrs.BackendType, backendType)
		case !l.Subnet.IsValid():
			code, reason = SkipNoSubnet, "no IPv4 subnet"
		case l.Subnet.Bits() != cfg.SubnetLen || !cfg.Network.Contains(l.Subnet.Addr()):
			code, reason = SkipOutside, fmt.Sprintf("subnet %s is not a /%d of the network %s", l.Subnet, cfg.SubnetLen, cfg.Network)
		case own.Subnet.IsValid() && l.Subnet.Overlaps(own.Subnet):
			code, reason = SkipOverlapsOwn, fmt.Sprintf("subnet %s overlaps this node's %s", l.Subnet, own.Subnet)
		case !PlausibleUnicast(l.Attrs.PublicIP) || !l.Attrs.PublicIP.Is4():
			code, reason = SkipBadPublicIP, fmt.Sprintf("public IP %q is not a unicast IPv4 address", l.Attrs.PublicIP)
		case l.Attrs.PublicIP == own.Attrs.PublicIP:
			code, reason = SkipDuplicateIP, fmt.Sprintf("public IP %s is this node's", l.Attrs.PublicIP)
		case seenIP[l.Attrs.PublicIP] != "":
			code, reason = SkipDuplicateIP, fmt.Sprintf("public IP %s is also claimed by %s", l.Attrs.PublicIP, seenIP[l.Attrs.PublicIP])
		}
		if reason == "" {
			for _, t := range taken {
				if t.Overlaps(l.Subnet) {
					code, reason = SkipOverlapsPeer, fmt.Sprintf("subnet %s overlaps another peer's %s", l.Subnet, t)
					break
				}
			}
		}
		if reason != "" {
			p.Skipped = append(p.Skipped, Skipped{Key: l.Key(), Code: code, Reason: reason})
			continue
		}
		taken = append(taken, l.Subnet)
		seenIP[l.Attrs.PublicIP] = l.Key()
		p.Usable = append(p.Usable, l)
	}
	return p
}

// PlausibleUnicast reports whether a can be a node's address: a valid unicast address that
// is not loopback, multicast, link-local, unspecified or the IPv4 broadcast address.
func PlausibleUnicast(a netip.Addr) bool {
	return a.IsValid() && a.Zone() == "" && !a.IsUnspecified() && !a.IsLoopback() && !a.IsMulticast() &&
		!a.IsLinkLocalUnicast() && !a.IsLinkLocalMulticast() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// Sort puts a State's lists in a canonical order.
func (s *State) Sort() {
	slices.SortFunc(s.Routes, func(a, b Route) int {
		if c := a.Dst.Addr().Compare(b.Dst.Addr()); c != 0 {
			return c
		}
		return a.Dst.Bits() - b.Dst.Bits()
	})
	slices.SortFunc(s.Neighbors, func(a, b Neighbor) int { return a.IP.Compare(b.IP) })
	slices.SortFunc(s.FDB, func(a, b FDBEntry) int { return strings.Compare(a.MAC.String(), b.MAC.String()) })
}

// OnLink reports whether a lies in one of the directly connected networks nets.
func OnLink(nets []netip.Prefix, a netip.Addr) bool {
	for _, p := range nets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
