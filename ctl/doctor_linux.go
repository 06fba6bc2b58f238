package ctl

import (
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/linux"
	"github.com/weftnet/weft/netif"
)

// thisSystem is the Linux node as weftd's main hands it to weftd: the netlink data plane,
// the kernel's default route and route lookup.
func thisSystem() (system, error) {
	return system{caps: linux.Capabilities(), interfaces: netif.List, defaultIf: linux.DefaultRouteInterface,
		routeTo: linux.RouteTo, inspect: inspectKernel}, nil
}

// inspectKernel compares this network namespace with st, read-only, through the same dump
// and diff as weftd's full Apply; blackhole is --ip-blackhole-route.
func inspectKernel(st *backend.State, blackhole bool) (*Kernel, error) {
	p, err := linux.New(slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	defer p.Close()
	p.SetBlackholeRoute(blackhole)
	r, err := p.Diff(st)
	if err != nil {
		return nil, fmt.Errorf("comparing the kernel with the leases: %w", err)
	}
	k := &Kernel{}
	if d := r.Device; d != nil {
		k.Device = &Device{Name: d.Name, Missing: d.Missing, Up: d.Up, MTU: d.MTU, Incompatible: d.Incompatible}
		if !d.Missing {
			k.Device.MAC = d.MAC.String()
		}
	}
	k.Drift = append(k.Drift, drifts("nexthop", r.Nexthops, linux.Nexthop.String)...)
	k.Drift = append(k.Drift, drifts("route", r.Routes, routeText)...)
	k.Drift = append(k.Drift, drifts("neighbor", r.Neighbors, neighborText)...)
	k.Drift = append(k.Drift, drifts("fdb", r.FDB, fdbText)...)
	dev := ""
	if st.Device != nil {
		dev = st.Device.Name
	}
	k.Drift = append(k.Drift, drifts("address", r.Addrs, func(p netip.Prefix) string { return addressText(dev, p) })...)
	return k, nil
}

func drifts[T comparable](kind string, changes []linux.Change[T], text func(T) string) []Drift {
	var zero T
	out := make([]Drift, 0, len(changes))
	for _, c := range changes {
		d := Drift{Kind: kind}
		if c.Want != zero {
			d.Want = text(c.Want)
		}
		if c.Have != zero {
			d.Have = text(c.Have)
		}
		out = append(out, d)
	}
	return out
}

// The entries of a Drift, as ip(8) and bridge(8) write them.

// routeText is a route as ip-route writes it: through its nexthop object, or with its
// gateway.
func routeText(r linux.Route) string {
	s := r.Dst.String()
	if r.NH != 0 {
		return s + fmt.Sprintf(" nhid %d", r.NH)
	}
	if r.Gw.IsValid() {
		s += " via " + r.Gw.String()
	}
	if r.Dev != "" {
		s += " dev " + r.Dev
	}
	if r.Onlink {
		s += " onlink"
	}
	return s
}

func neighborText(n linux.Neighbor) string {
	return fmt.Sprintf("%s lladdr %s dev %s", n.IP, n.MAC, n.Dev)
}

func fdbText(f linux.FDBEntry) string {
	return fmt.Sprintf("%s dev %s dst %s", f.MAC, f.Dev, f.Dst)
}
