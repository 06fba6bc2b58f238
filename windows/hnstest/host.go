package hnstest

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/weftnet/weft/windows"
)

// Host is an in-memory windows.Host. With an HNS it also plays what HNS does to the host's
// interfaces (see Options.Host). It counts every call, reads too (Calls).
type Host struct {
	mu     sync.Mutex
	ifs    []windows.Interface
	routes []windows.HostRoute
	next   uint32
	calls
}

var _ windows.Host = (*Host)(nil)

// NewHost returns a host with the given interfaces (give each an Index).
func NewHost(ifs ...windows.Interface) *Host {
	h := &Host{next: 100}
	for _, i := range ifs {
		h.ifs = append(h.ifs, cloneIf(i))
		h.next = max(h.next, i.Index+1)
	}
	return h
}

// sameRoute matches the routes Windows takes for r: it keys routes by destination, next
// hop and interface.
func sameRoute(r windows.HostRoute) func(windows.HostRoute) bool {
	return func(o windows.HostRoute) bool {
		return r.Dst == o.Dst && r.NextHop == o.NextHop && r.IfIndex == o.IfIndex
	}
}

func cloneIf(i windows.Interface) windows.Interface {
	i.Prefixes = slices.Clone(i.Prefixes)
	return i
}

// Interfaces implements windows.Host.
func (h *Host) Interfaces() ([]windows.Interface, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("Interfaces")
	out := make([]windows.Interface, 0, len(h.ifs))
	for _, i := range h.ifs {
		out = append(out, cloneIf(i))
	}
	return out, nil
}

func (h *Host) iface(index uint32) *windows.Interface {
	for i := range h.ifs {
		if h.ifs[i].Index == index {
			return &h.ifs[i]
		}
	}
	return nil
}

// SetForwarding implements windows.Host.
func (h *Host) SetForwarding(index uint32, v6 bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("SetForwarding")
	return h.forward(index, v6, true)
}

// Forward turns forwarding of a family (IPv6 if v6) on or off on an interface, as
// SetIpInterfaceEntry does (counted as SetForwarding).
func (h *Host) Forward(index uint32, v6, on bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("SetForwarding")
	return h.forward(index, v6, on)
}

func (h *Host) forward(index uint32, v6, on bool) error {
	i := h.iface(index)
	if i == nil {
		return fmt.Errorf("interface %d: %w", index, windows.ErrNotFound)
	}
	if v6 {
		i.Forwarding6 = on
	} else {
		i.Forwarding = on
	}
	return nil
}

// Routes implements windows.Host.
func (h *Host) Routes() ([]windows.HostRoute, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("Routes")
	return slices.Clone(h.routes), nil
}

// AddRoute implements windows.Host; like CreateIpForwardEntry2 it refuses an existing route and an
// unknown interface.
func (h *Host) AddRoute(r windows.HostRoute) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("AddRoute")
	if h.iface(r.IfIndex) == nil {
		return fmt.Errorf("add route %s: interface %d: %w", r, r.IfIndex, windows.ErrNotFound)
	}
	if slices.ContainsFunc(h.routes, sameRoute(r)) {
		return fmt.Errorf("add route %s: %w", r, windows.ErrExists)
	}
	if r.Protocol == 0 {
		r.Protocol = windows.ProtoNetMgmt
	}
	h.routes = append(h.routes, r)
	return nil
}

// DeleteRoute implements windows.Host.
func (h *Host) DeleteRoute(r windows.HostRoute) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count("DeleteRoute")
	i := slices.IndexFunc(h.routes, sameRoute(r))
	if i < 0 {
		return fmt.Errorf("delete route %s: %w", r, windows.ErrNotFound)
	}
	h.routes = slices.Delete(h.routes, i, i+1)
	return nil
}

// Host is the host h plays on (Options.Host), nil if none: the simulated HNS service
// (hnssim) answers IP Helper calls from it.
func (h *HNS) Host() *Host { return h.opts.Host }

// hasAdapter reports whether a physical adapter of that name exists.
func (h *Host) hasAdapter(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !strings.HasPrefix(name, "vEthernet (") && slices.ContainsFunc(h.ifs, func(i windows.Interface) bool { return i.Name == name })
}

// vSwitch is what creating the first network on an adapter does: the adapter's addresses
// move to a new vNIC, "vEthernet (<adapter>)", with a new index; routes through the
// adapter are gone with them.
func (h *Host) vSwitch(adapter string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var phys *windows.Interface
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
	vnic := windows.Interface{Index: h.next, Name: vnicName(adapter), Prefixes: phys.Prefixes}
	h.next++
	phys.Prefixes, phys.Forwarding, phys.Forwarding6 = nil, false, false
	h.dropRoutes(phys.Index)
	h.ifs = append(h.ifs, vnic)
}

func (h *Host) dropRoutes(index uint32) {
	h.routes = slices.DeleteFunc(h.routes, func(r windows.HostRoute) bool { return r.IfIndex == index })
}

func (h *Host) addVNIC(name string, ps ...netip.Prefix) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ifs = append(h.ifs, windows.Interface{Index: h.next, Name: name, Prefixes: slices.Clone(ps)})
	h.next++
}

func (h *Host) dropVNIC(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, i := range h.ifs {
		if i.Name == name {
			h.dropRoutes(i.Index)
		}
	}
	h.ifs = slices.DeleteFunc(h.ifs, func(i windows.Interface) bool { return i.Name == name })
}

// unSwitch undoes vSwitch: the vNIC's addresses go back to the adapter, its routes are gone.
func (h *Host) unSwitch(adapter string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unSwitchLocked(adapter)
}

func (h *Host) unSwitchLocked(adapter string) {
	i := slices.IndexFunc(h.ifs, func(i windows.Interface) bool { return i.Name == vnicName(adapter) })
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
func (h *Host) reboot() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, i := range slices.Clone(h.ifs) {
		if !strings.HasPrefix(i.Name, "vEthernet (") {
			continue
		}
		if slices.ContainsFunc(h.ifs, func(x windows.Interface) bool { return vnicName(x.Name) == i.Name }) {
			h.unSwitchLocked(strings.TrimSuffix(strings.TrimPrefix(i.Name, "vEthernet ("), ")"))
			continue
		}
		h.dropRoutes(i.Index)
		h.ifs = slices.DeleteFunc(h.ifs, func(x windows.Interface) bool { return x.Name == i.Name })
	}
}

// Render describes interfaces and routes, one per line, sorted.
func (h *Host) Render() string {
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
