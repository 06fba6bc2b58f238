package windows

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// Host is the host's IPv4 stack as host-gw needs it: interfaces, forwarding and the route
// table. On Windows it is the IP Helper API (host_windows.go); MemHost stands in for tests.
type Host interface {
	Interfaces() ([]Interface, error)
	// SetForwarding enables IPv4 forwarding on an interface.
	SetForwarding(index uint32) error
	// Routes lists the IPv4 routes.
	Routes() ([]HostRoute, error)
	AddRoute(r HostRoute) error
	// DeleteRoute deletes the route with r's destination, next hop and interface.
	DeleteRoute(r HostRoute) error
}

// Interface is one IPv4 interface of the host.
type Interface struct {
	Index      uint32
	Name       string
	Prefixes   []netip.Prefix // IPv4 addresses with their on-link prefix length
	Forwarding bool
}

// RouteProtocol says who made a route (MIB_IPFORWARD_ROW2's Protocol).
type RouteProtocol uint32

// ProtoNetMgmt is a static route: what CreateIpForwardEntry2 makes, and what weft owns.
const ProtoNetMgmt RouteProtocol = 3

// HostRoute is an IPv4 route of the host.
type HostRoute struct {
	Dst      netip.Prefix
	NextHop  netip.Addr // 0.0.0.0 for on-link routes
	IfIndex  uint32
	Metric   uint32
	Protocol RouteProtocol
}

func (r HostRoute) String() string {
	return fmt.Sprintf("%s via %s if %d", r.Dst, r.NextHop, r.IfIndex)
}

// same reports whether two routes are the same entry of the table (Windows keys routes by
// destination, next hop and interface).
func (r HostRoute) same(o HostRoute) bool {
	return r.Dst == o.Dst && r.NextHop == o.NextHop && r.IfIndex == o.IfIndex
}

// MemHost is an in-memory Host. With a MemHNS it also plays what HNS does to the host's
// interfaces (see MemOptions.Host).
type MemHost struct {
	mu     sync.Mutex
	ifs    []Interface
	routes []HostRoute
	next   uint32
}

var _ Host = (*MemHost)(nil)

// NewMemHost returns a host with the given interfaces (give each an Index).
func NewMemHost(ifs ...Interface) *MemHost {
	h := &MemHost{next: 100}
	for _, i := range ifs {
		h.ifs = append(h.ifs, cloneIf(i))
		h.next = max(h.next, i.Index+1)
	}
	return h
}

func cloneIf(i Interface) Interface {
	i.Prefixes = slices.Clone(i.Prefixes)
	return i
}

// Interfaces implements Host.
func (h *MemHost) Interfaces() ([]Interface, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Interface, 0, len(h.ifs))
	for _, i := range h.ifs {
		out = append(out, cloneIf(i))
	}
	return out, nil
}

func (h *MemHost) iface(index uint32) *Interface {
	for i := range h.ifs {
		if h.ifs[i].Index == index {
			return &h.ifs[i]
		}
	}
	return nil
}

// SetForwarding implements Host.
func (h *MemHost) SetForwarding(index uint32) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := h.iface(index)
	if i == nil {
		return fmt.Errorf("interface %d: %w", index, ErrNotFound)
	}
	i.Forwarding = true
	return nil
}

// Routes implements Host.
func (h *MemHost) Routes() ([]HostRoute, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.routes), nil
}

// AddRoute implements Host; like CreateIpForwardEntry2 it refuses an existing route and an
// unknown interface.
func (h *MemHost) AddRoute(r HostRoute) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.iface(r.IfIndex) == nil {
		return fmt.Errorf("add route %s: interface %d: %w", r, r.IfIndex, ErrNotFound)
	}
	if slices.ContainsFunc(h.routes, r.same) {
		return fmt.Errorf("add route %s: %w", r, ErrExists)
	}
	if r.Protocol == 0 {
		r.Protocol = ProtoNetMgmt
	}
	h.routes = append(h.routes, r)
	return nil
}

// DeleteRoute implements Host.
func (h *MemHost) DeleteRoute(r HostRoute) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := slices.IndexFunc(h.routes, r.same)
	if i < 0 {
		return fmt.Errorf("delete route %s: %w", r, ErrNotFound)
	}
	h.routes = slices.Delete(h.routes, i, i+1)
	return nil
}

// hasAdapter reports whether a physical adapter of that name exists.
func (h *MemHost) hasAdapter(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !strings.HasPrefix(name, "vEthernet (") && slices.ContainsFunc(h.ifs, func(i Interface) bool { return i.Name == name })
}

// vSwitch is what creating the first network on an adapter does: the adapter's addresses
// move to a new vNIC, "vEthernet (<adapter>)", with a new index; routes through the
// adapter are gone with them.
func (h *MemHost) vSwitch(adapter string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var phys *Interface
	for i := range h.ifs {
		if h.ifs[i].Name == adapter {
			phys = &h.ifs[i]
		}
		if h.ifs[i].Name == vnicName(adapter) {
			return // already switched
		}
	}
	if phys == nil {
		return
	}
	vnic := Interface{Index: h.next, Name: vnicName(adapter), Prefixes: phys.Prefixes}
	h.next++
	phys.Prefixes, phys.Forwarding = nil, false
	h.dropRoutes(phys.Index)
	h.ifs = append(h.ifs, vnic)
}

func (h *MemHost) dropRoutes(index uint32) {
	h.routes = slices.DeleteFunc(h.routes, func(r HostRoute) bool { return r.IfIndex == index })
}

func (h *MemHost) addVNIC(name string, p netip.Prefix) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ifs = append(h.ifs, Interface{Index: h.next, Name: name, Prefixes: []netip.Prefix{p}})
	h.next++
}

func (h *MemHost) dropVNIC(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, i := range h.ifs {
		if i.Name == name {
			h.dropRoutes(i.Index)
		}
	}
	h.ifs = slices.DeleteFunc(h.ifs, func(i Interface) bool { return i.Name == name })
}

// unSwitch undoes vSwitch: the vNIC's addresses go back to the adapter, its routes are gone.
func (h *MemHost) unSwitch(adapter string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unSwitchLocked(adapter)
}

func (h *MemHost) unSwitchLocked(adapter string) {
	i := slices.IndexFunc(h.ifs, func(i Interface) bool { return i.Name == vnicName(adapter) })
	if i < 0 {
		return
	}
	vnic := h.ifs[i]
	for j := range h.ifs {
		if h.ifs[j].Name == adapter {
			h.ifs[j].Prefixes = vnic.Prefixes
		}
	}
	h.dropRoutes(vnic.Index)
	h.ifs = slices.Delete(h.ifs, i, i+1)
}

// reboot drops every vNIC (their addresses go back to the adapters they came from) and
// every route through one.
func (h *MemHost) reboot() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, i := range slices.Clone(h.ifs) {
		if !strings.HasPrefix(i.Name, "vEthernet (") {
			continue
		}
		if slices.ContainsFunc(h.ifs, func(x Interface) bool { return vnicName(x.Name) == i.Name }) {
			h.unSwitchLocked(strings.TrimSuffix(strings.TrimPrefix(i.Name, "vEthernet ("), ")"))
			continue
		}
		h.dropRoutes(i.Index)
		h.ifs = slices.DeleteFunc(h.ifs, func(x Interface) bool { return x.Name == i.Name })
	}
}

// Render describes interfaces and routes, one per line, sorted.
func (h *MemHost) Render() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var lines []string
	for _, i := range h.ifs {
		l := fmt.Sprintf("if %d %q", i.Index, i.Name)
		for _, p := range i.Prefixes {
			l += " " + p.String()
		}
		if i.Forwarding {
			l += " forwarding"
		}
		lines = append(lines, l)
	}
	for _, r := range h.routes {
		lines = append(lines, fmt.Sprintf("route %s via %s if %d proto %d", r.Dst, r.NextHop, r.IfIndex, r.Protocol))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

// defaultRoute is the IPv4 default route with the lowest metric.
func defaultRoute(routes []HostRoute) (HostRoute, bool) {
	var best HostRoute
	found := false
	for _, r := range routes {
		if r.Dst.Bits() == 0 && r.Dst.Addr().Is4() && (!found || r.Metric < best.Metric) {
			best, found = r, true
		}
	}
	return best, found
}
