// Package netif models a node's network interfaces and chooses, as flanneld does, the one
// other nodes reach this node through. weftd makes the choice; weftctl doctor lists the same
// interfaces to find the one weftd chose.
package netif

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
)

// External is the interface other nodes are reached through.
type External struct {
	Name       string
	MTU        int
	Addr       netip.Addr     // its IPv4 address: the IPv4 tunnel's source; invalid when IPv4 is off
	PublicIP   netip.Addr     // the IPv4 address published in the lease (--public-ip, else Addr)
	Addr6      netip.Addr     // its global IPv6 address, when IPv6 is on
	PublicIPv6 netip.Addr     // the IPv6 address published in the lease (--public-ipv6, else Addr6)
	Connected  []netip.Prefix // networks of both families directly attached to it
}

// Interface is one network interface as the OS reports it.
type Interface struct {
	Name   string
	MTU    int
	Up     bool
	Prefix []netip.Prefix // addresses with their prefix lengths
}

// List returns the system's interfaces with their addresses.
func List() ([]Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	out := make([]Interface, 0, len(ifs))
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", ifc.Name, err)
		}
		info := Interface{Name: ifc.Name, MTU: ifc.MTU, Up: ifc.Flags&net.FlagUp != 0}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ones, _ := ipn.Mask.Size()
			info.Prefix = append(info.Prefix, netip.PrefixFrom(ip.Unmap(), ones))
		}
		out = append(out, info)
	}
	return out, nil
}

// Choice is what the operator asked for: weftd's --iface, --iface-regex, --iface-can-reach,
// --public-ip and --public-ipv6, and the families the network config enables.
type Choice struct {
	Ifaces  []string // names or addresses, tried in order
	Regexps []string // matched against names and addresses, tried in order
	// CanReach is an address of either family: the interface is the one the kernel's route
	// to it leaves by (`ip route get`), tried after Ifaces and Regexps, as flanneld does.
	CanReach string
	// RouteTo names the interface the route to an address leaves by, and the source address
	// the kernel picks for it (invalid when the route has none); nil: the OS has no such
	// lookup, and CanReach is refused.
	RouteTo    func(netip.Addr) (iface string, src netip.Addr, err error)
	PublicIP   string // the IPv4 address to publish instead of the interface's; empty: its own
	PublicIPv6 string // the same for IPv6
	// IPv4 and IPv6 are the families the interface must carry: it needs an address of each.
	// Both false means IPv4 alone.
	IPv4, IPv6 bool
}

// families are the families c asks for.
func (c Choice) families() (v4, v6 bool) {
	if !c.IPv4 && !c.IPv6 {
		return true, false
	}
	return c.IPv4, c.IPv6
}

// publicAddr parses the value of a --public-ip flag of the family v6.
func publicAddr(flag, s string, v6 bool) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || v6 != (a.Is6() && !a.Is4In6()) || a.Zone() != "" {
		fam := "IPv4"
		if v6 {
			fam = "IPv6"
		}
		return netip.Addr{}, fmt.Errorf("%s=%q: not an %s address", flag, s, fam)
	}
	return a, nil
}

// Pick chooses the external interface among ifs as flanneld does: the first of c.Ifaces
// that exists (by name or by one of its addresses) and is usable, else the first interface
// whose name or an address matches one of c.Regexps, else the interface of the route to
// c.CanReach (with the route's source address as its address of that family), else the
// interface of the default route, which defaultIface names.
func Pick(c Choice, ifs []Interface, defaultIface func() (string, error)) (External, error) {
	public, err := publicAddr("--public-ip", c.PublicIP, false)
	if err != nil {
		return External{}, err
	}
	public6, err := publicAddr("--public-ipv6", c.PublicIPv6, true)
	if err != nil {
		return External{}, err
	}
	v4, v6 := c.families()
	regexps := make([]*regexp.Regexp, 0, len(c.Regexps))
	for _, expr := range c.Regexps {
		re, err := regexp.Compile(expr)
		if err != nil {
			return External{}, fmt.Errorf("--iface-regex=%q: %w", expr, err)
		}
		regexps = append(regexps, re)
	}
	var reach netip.Addr
	if c.CanReach != "" {
		if reach, err = netip.ParseAddr(c.CanReach); err != nil || reach.Zone() != "" {
			return External{}, fmt.Errorf("--iface-can-reach=%q: not an IP address", c.CanReach)
		}
		if c.RouteTo == nil {
			return External{}, fmt.Errorf("--iface-can-reach=%q: this OS's data plane has no route lookup (flanneld has none on Windows either)", c.CanReach)
		}
		reach = reach.Unmap()
	}
	var errs []error
	// try returns info as the external interface if it is usable, else keeps why not.
	try := func(info Interface, addr netip.Addr) (External, bool) {
		ext, err := usable(info, addr, v4, v6)
		if err != nil {
			errs = append(errs, err)
			return ext, false
		}
		ext.PublicIP, ext.PublicIPv6 = ext.Addr, ext.Addr6
		if public.IsValid() && v4 {
			ext.PublicIP = public
		}
		if public6.IsValid() && v6 {
			ext.PublicIPv6 = public6
		}
		return ext, true
	}

	for _, want := range c.Ifaces {
		addr, _ := netip.ParseAddr(want)
		for _, info := range ifs {
			match := info.Name == want
			for _, p := range info.Prefix {
				match = match || p.Addr() == addr
			}
			if !match {
				continue
			}
			if ext, ok := try(info, addr); ok {
				return ext, nil
			}
		}
	}
	for _, re := range regexps {
		for _, info := range ifs {
			var addr netip.Addr
			match := re.MatchString(info.Name)
			for _, p := range info.Prefix {
				if !match && (p.Addr().Is4() && v4 || p.Addr().Is6() && v6) && re.MatchString(p.Addr().String()) {
					match, addr = true, p.Addr()
				}
			}
			if !match {
				continue
			}
			if ext, ok := try(info, addr); ok {
				return ext, nil
			}
		}
	}
	if reach.IsValid() {
		name, src, err := c.RouteTo(reach)
		if err != nil {
			errs = append(errs, fmt.Errorf("route to --iface-can-reach=%s: %w", reach, err))
		}
		for _, info := range ifs {
			if err != nil || info.Name != name {
				continue
			}
			if ext, ok := try(info, src); ok {
				return ext, nil
			}
		}
		if err == nil && !slices.ContainsFunc(ifs, func(i Interface) bool { return i.Name == name }) {
			errs = append(errs, fmt.Errorf("interface %s of the route to --iface-can-reach=%s not found", name, reach))
		}
	}
	if len(c.Ifaces) > 0 || len(c.Regexps) > 0 || reach.IsValid() {
		return External{}, fmt.Errorf("no usable interface among --iface=%v --iface-regex=%v --iface-can-reach=%q: %v", c.Ifaces, c.Regexps, c.CanReach, errs)
	}
	name, err := defaultIface()
	if err != nil {
		return External{}, fmt.Errorf("no --iface given and no default route: %w", err)
	}
	for _, info := range ifs {
		if info.Name == name {
			if ext, ok := try(info, netip.Addr{}); ok {
				return ext, nil
			}
			return External{}, fmt.Errorf("default route interface: %w", errs[len(errs)-1])
		}
	}
	return External{}, fmt.Errorf("default route interface %s not found", name)
}

// usable makes info the external interface for the families v4 and v6, with want as its
// address of want's family when valid (else its first global unicast address of the
// family); an interface that is down or lacks an address of a family asked for is not
// usable.
func usable(info Interface, want netip.Addr, v4, v6 bool) (External, error) {
	ext := External{Name: info.Name, MTU: info.MTU}
	pick := func(dst *netip.Addr, of func(netip.Addr) bool) {
		wanted := want.IsValid() && of(want)
		for _, p := range info.Prefix {
			a := p.Addr()
			if !of(a) || wanted && a != want {
				continue
			}
			if !dst.IsValid() && (wanted || a.IsGlobalUnicast()) {
				*dst = a
			}
		}
	}
	if v4 {
		pick(&ext.Addr, netip.Addr.Is4)
	}
	if v6 {
		pick(&ext.Addr6, func(a netip.Addr) bool { return a.Is6() && !a.Is4In6() })
	}
	ext.Connected = Connected(info)
	switch {
	case v4 && !ext.Addr.IsValid():
		return ext, fmt.Errorf("interface %s has no IPv4 address", info.Name)
	case v6 && !ext.Addr6.IsValid():
		return ext, fmt.Errorf("interface %s has no global IPv6 address, and the network config enables IPv6 (EnableIPv6)", info.Name)
	case !info.Up:
		return ext, fmt.Errorf("interface %s is down", info.Name)
	}
	return ext, nil
}

// Connected is the networks directly attached to info, of both families (IPv6 link-local
// ones aside).
func Connected(info Interface) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range info.Prefix {
		if a := p.Addr(); a.Is4() || !a.IsLinkLocalUnicast() {
			out = append(out, p.Masked())
		}
	}
	return out
}
