// Package netif models a node's network interfaces and chooses, as flanneld does, the one
// other nodes reach this node through. weftd makes the choice; weftctl doctor lists the same
// interfaces to find the one weftd chose.
package netif

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
)

// External is the interface other nodes are reached through.
type External struct {
	Name      string
	MTU       int
	Addr      netip.Addr     // its IPv4 address: the tunnel's source
	PublicIP  netip.Addr     // the address published in the lease (--public-ip, else Addr)
	Connected []netip.Prefix // networks directly attached to it
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

// Choice is what the operator asked for: weftd's --iface, --iface-regex and --public-ip.
type Choice struct {
	Ifaces   []string // names or addresses, tried in order
	Regexps  []string // matched against names and IPv4 addresses, tried in order
	PublicIP string   // the address to publish instead of the interface's; empty: its own
}

// Pick chooses the external interface among ifs as flanneld does: the first of c.Ifaces
// that exists (by name or by one of its addresses) and is usable, else the first interface
// whose name or an address matches one of c.Regexps, else the interface of the default
// route, which defaultIface names.
func Pick(c Choice, ifs []Interface, defaultIface func() (string, error)) (External, error) {
	var public netip.Addr
	if c.PublicIP != "" {
		a, err := netip.ParseAddr(c.PublicIP)
		if err != nil || !a.Is4() {
			return External{}, fmt.Errorf("--public-ip=%q: not an IPv4 address", c.PublicIP)
		}
		public = a
	}
	regexps := make([]*regexp.Regexp, 0, len(c.Regexps))
	for _, expr := range c.Regexps {
		re, err := regexp.Compile(expr)
		if err != nil {
			return External{}, fmt.Errorf("--iface-regex=%q: %w", expr, err)
		}
		regexps = append(regexps, re)
	}
	var errs []error
	// try returns info as the external interface if it is usable, else keeps why not.
	try := func(info Interface, addr netip.Addr) (External, bool) {
		ext, err := usable(info, addr)
		if err != nil {
			errs = append(errs, err)
			return ext, false
		}
		ext.PublicIP = ext.Addr
		if public.IsValid() {
			ext.PublicIP = public
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
				if !match && p.Addr().Is4() && re.MatchString(p.Addr().String()) {
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
	if len(c.Ifaces) > 0 || len(c.Regexps) > 0 {
		return External{}, fmt.Errorf("no usable interface among --iface=%v --iface-regex=%v: %v", c.Ifaces, c.Regexps, errs)
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

// usable makes info the external interface, with want as its address when valid (else its
// first global unicast IPv4 address); an interface that is down or has no such address is
// not usable.
func usable(info Interface, want netip.Addr) (External, error) {
	ext := External{Name: info.Name, MTU: info.MTU}
	for _, p := range info.Prefix {
		if !p.Addr().Is4() || (want.IsValid() && p.Addr() != want) {
			continue
		}
		if !ext.Addr.IsValid() && (want.IsValid() || p.Addr().IsGlobalUnicast()) {
			ext.Addr = p.Addr()
		}
	}
	ext.Connected = Connected(info)
	if !ext.Addr.IsValid() {
		return ext, fmt.Errorf("interface %s has no IPv4 address", info.Name)
	}
	if !info.Up {
		return ext, fmt.Errorf("interface %s is down", info.Name)
	}
	return ext, nil
}

// Connected is the IPv4 networks directly attached to info.
func Connected(info Interface) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range info.Prefix {
		if p.Addr().Is4() {
			out = append(out, p.Masked())
		}
	}
	return out
}
