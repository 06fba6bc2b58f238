package daemon

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

func systemInterfaces() ([]Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	var out []Interface
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

// pickExternal chooses the external interface as flanneld does: the first of --iface that
// exists (by name or by one of its addresses), else the first interface whose name or an
// address matches an --iface-regex, else the interface of the default route.
func pickExternal(cfg Config, ifs []Interface, defaultIface func() (string, error)) (External, error) {
	usable := func(info Interface, want netip.Addr) (External, error) {
		ext := External{Name: info.Name, MTU: info.MTU}
		for _, p := range info.Prefix {
			if !p.Addr().Is4() || (want.IsValid() && p.Addr() != want) {
				continue
			}
			if !ext.Addr.IsValid() && (want.IsValid() || p.Addr().IsGlobalUnicast()) {
				ext.Addr = p.Addr()
			}
		}
		for _, p := range info.Prefix {
			if p.Addr().Is4() {
				ext.Connected = append(ext.Connected, p.Masked())
			}
		}
		if !ext.Addr.IsValid() {
			return ext, fmt.Errorf("interface %s has no IPv4 address", info.Name)
		}
		if !info.Up {
			return ext, fmt.Errorf("interface %s is down", info.Name)
		}
		return ext, nil
	}
	finish := func(ext External) (External, error) {
		ext.PublicIP = ext.Addr
		if cfg.PublicIP != "" {
			ext.PublicIP = netip.MustParseAddr(cfg.PublicIP) // checked by Validate
		}
		return ext, nil
	}

	var errs []error
	for _, want := range cfg.Ifaces {
		addr, _ := netip.ParseAddr(want)
		for _, info := range ifs {
			match := info.Name == want
			for _, p := range info.Prefix {
				match = match || p.Addr() == addr
			}
			if !match {
				continue
			}
			ext, err := usable(info, addr)
			if err == nil {
				return finish(ext)
			}
			errs = append(errs, err)
		}
	}
	for _, expr := range cfg.IfaceRegexs {
		re := regexp.MustCompile(expr) // checked by Validate
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
			ext, err := usable(info, addr)
			if err == nil {
				return finish(ext)
			}
			errs = append(errs, err)
		}
	}
	if len(cfg.Ifaces) > 0 || len(cfg.IfaceRegexs) > 0 {
		return External{}, fmt.Errorf("no usable interface among --iface=%v --iface-regex=%v: %v", cfg.Ifaces, cfg.IfaceRegexs, errs)
	}
	name, err := defaultIface()
	if err != nil {
		return External{}, fmt.Errorf("no --iface given and no default route: %w", err)
	}
	for _, info := range ifs {
		if info.Name == name {
			ext, err := usable(info, netip.Addr{})
			if err != nil {
				return External{}, fmt.Errorf("default route interface: %w", err)
			}
			return finish(ext)
		}
	}
	return External{}, fmt.Errorf("default route interface %s not found", name)
}
