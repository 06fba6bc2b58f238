package linux

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/linux/masq"
)

// Plane programs one network namespace, the one the calling thread was in when New ran,
// over a single reused netlink handle.
type Plane struct {
	log *slog.Logger
	ns  netns.NsHandle // kept so Watch can subscribe in the same namespace from any thread
	h   *netlink.Handle

	// mu serialises writers: a reconcile diffing against a dump taken before an EnsureVXLAN
	// replaced the device would write to a stale ifindex.
	mu    sync.Mutex
	model model
	masq  *masq.Manager // made on the first Apply that masquerades
}

// New opens a Plane on the current thread's network namespace. A daemon in the host
// namespace needs nothing special; a caller that switched namespaces must have locked its OS
// thread.
func New(log *slog.Logger) (*Plane, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("opening the current network namespace: %w", err)
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("opening a netlink socket in network namespace %s: %w", ns, err)
	}
	return &Plane{log: log, ns: ns, h: h}, nil
}

// Close releases the netlink socket and the namespace handle. The kernel state stays.
func (p *Plane) Close() error {
	p.h.Close()
	return p.ns.Close()
}

const dumpAttempts = 5

// dump runs a netlink dump, again when the kernel interrupted it because the table changed
// under it: the library then returns partial results, and diffing those would re-add (or, worse,
// miss) entries.
func dump[T any](what string, list func() ([]T, error)) ([]T, error) {
	var err error
	for range dumpAttempts {
		var v []T
		if v, err = list(); err == nil {
			return v, nil
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	return nil, fmt.Errorf("listing %s: %w", what, err)
}

// snapshot is a dump in both forms: portable for the diff, raw for exact deletes.
type snapshot struct {
	state  kernelState
	vx     netlink.Link // nil for host-gw
	routes []netlink.Route
	neighs []netlink.Neigh
	fdb    []netlink.Neigh
	addrs  []netlink.Addr
}

// reconcile makes the kernel match st: the VXLAN device's addresses, the routes, neighbours
// and FDB entries. It dumps the kernel state, diffs it against st and writes only the
// differences, with replace semantics so that a changed entry never disappears in between.
// Entries outside owned are never touched. It goes on past a failing entry, so one bad peer
// cannot hold back the others, and returns what it changed with the errors joined.
func (p *Plane) reconcile(st Want, owned Ownership) (Changes, error) {
	links, err := dump("links", p.h.LinkList)
	if err != nil {
		return Changes{}, err
	}
	index := make(map[string]int, len(links))
	names := make(map[int]string, len(links))
	var vx netlink.Link
	for _, l := range links {
		a := l.Attrs()
		index[a.Name] = a.Index
		names[a.Index] = a.Name
		if st.Device != "" && a.Name == st.Device {
			vx = l
		}
	}
	p.model.setIndexes(index)
	if st.Device != "" {
		if vx == nil {
			return Changes{}, &backend.MissingDeviceError{Name: st.Device}
		}
		if vx.Attrs().Flags&net.FlagUp == 0 {
			// Down, the kernel dropped every route through it and refuses onlink ones.
			p.log.Info("setting VXLAN device up", "dev", st.Device)
			if err := p.h.LinkSetUp(vx); err != nil {
				return Changes{}, fmt.Errorf("setting VXLAN device %s up: %w", st.Device, err)
			}
		}
	}
	snap, err := p.read(vx, names)
	if err != nil {
		return Changes{}, err
	}
	pl := diff(st, snap.state, owned)
	if pl.empty() {
		return Changes{}, nil
	}
	return p.apply(pl, snap, index)
}

// read dumps the main routing table, and the neighbours, FDB entries and addresses of vx
// (nil for host-gw).
func (p *Plane) read(vx netlink.Link, names map[int]string) (snapshot, error) {
	s := snapshot{vx: vx}
	var err error
	if s.routes, err = dump("routes", func() ([]netlink.Route, error) {
		return p.h.RouteList(nil, netlink.FAMILY_ALL) // main table only
	}); err != nil {
		return s, err
	}
	s.state.Routes = make([]kernelRoute, 0, len(s.routes))
	for _, r := range s.routes {
		s.state.Routes = append(s.state.Routes, fromRoute(r, names))
	}
	if vx == nil {
		return s, nil
	}
	name, idx := vx.Attrs().Name, vx.Attrs().Index
	// ARP and NDP come in one dump; the FDB (bridge family) only when asked for by family.
	if s.neighs, err = dump("neighbours of "+name, func() ([]netlink.Neigh, error) {
		return p.h.NeighList(idx, netlink.FAMILY_ALL)
	}); err != nil {
		return s, err
	}
	s.state.Neighbors = make([]kernelNeighbor, 0, len(s.neighs))
	for _, n := range s.neighs {
		s.state.Neighbors = append(s.state.Neighbors, kernelNeighbor{
			Neighbor:  Neighbor{IP: addrOf(n.IP), MAC: macOf(n.HardwareAddr), Dev: name},
			Permanent: n.State&netlink.NUD_PERMANENT != 0,
		})
	}
	if s.fdb, err = dump("FDB of "+name, func() ([]netlink.Neigh, error) {
		return p.h.NeighList(idx, unix.AF_BRIDGE)
	}); err != nil {
		return s, err
	}
	s.state.FDB = make([]kernelFDB, 0, len(s.fdb))
	for _, n := range s.fdb {
		s.state.FDB = append(s.state.FDB, kernelFDB{
			FDBEntry:  FDBEntry{MAC: macOf(n.HardwareAddr), Dst: addrOf(n.IP), Dev: name},
			Permanent: n.State&netlink.NUD_PERMANENT != 0,
		})
	}
	if s.addrs, err = dump("addresses of "+name, func() ([]netlink.Addr, error) {
		return p.h.AddrList(vx, netlink.FAMILY_ALL)
	}); err != nil {
		return s, err
	}
	for _, a := range s.addrs {
		s.state.Addrs = append(s.state.Addrs, prefixOf(a.IPNet))
	}
	return s, nil
}

// apply writes pl: additions first (addresses, then FDB and neighbours, then the routes that
// rely on them), deletions after, so that a changed peer is never unreachable in between.
func (p *Plane) apply(pl plan, s snapshot, index map[string]int) (Changes, error) {
	var c Changes
	var errs []error
	// done counts one write, or keeps its error: one bad entry must not stop the others.
	done := func(counter *int, n int, err error, what string) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			return
		}
		*counter += n
		p.log.Debug(what)
	}
	on := func(dev string, write func(link int) error) error {
		i, ok := index[dev]
		if !ok {
			return fmt.Errorf("device %q does not exist", dev)
		}
		return write(i)
	}

	for _, a := range pl.AddAddrs {
		done(&c.AddrsAdded, 1, p.h.AddrReplace(s.vx, &netlink.Addr{IPNet: ipNet(a)}),
			fmt.Sprintf("adding address %s to %s", a, s.vx.Attrs().Name))
	}
	for _, f := range pl.SetFDB {
		done(&c.FDBAdded, 1, on(f.Dev, func(i int) error { return p.h.NeighSet(fdbNeigh(f, i)) }),
			fmt.Sprintf("setting FDB entry %s dst %s dev %s", f.MAC, f.Dst, f.Dev))
	}
	for _, n := range pl.SetNeighbors {
		done(&c.NeighborsAdded, 1, on(n.Dev, func(i int) error { return p.h.NeighSet(ipNeigh(n, i)) }),
			fmt.Sprintf("setting neighbour %s lladdr %s dev %s", n.IP, n.MAC, n.Dev))
	}
	for _, r := range pl.SetRoutes {
		done(&c.RoutesAdded, 1, on(r.Dev, func(i int) error { return p.h.RouteReplace(toRoute(r, i)) }),
			"replacing route "+routeString(r))
	}

	for _, i := range pl.DelRoutes {
		gone, err := deleted(p.h.RouteDel(exactRoute(s.routes[i])))
		done(&c.RoutesRemoved, gone, err, "deleting route "+routeString(s.state.Routes[i].Route))
	}
	for _, i := range pl.DelNeighbors {
		n := s.neighs[i]
		gone, err := deleted(p.h.NeighDel(&netlink.Neigh{LinkIndex: n.LinkIndex, Family: n.Family, IP: n.IP}))
		done(&c.NeighborsRemoved, gone, err, fmt.Sprintf("deleting neighbour %s dev %s", n.IP, s.vx.Attrs().Name))
	}
	for _, i := range pl.DelFDB {
		n := s.fdb[i]
		gone, err := deleted(p.h.NeighDel(&netlink.Neigh{
			LinkIndex: n.LinkIndex, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
			IP: n.IP, HardwareAddr: n.HardwareAddr, VNI: n.VNI,
		}))
		done(&c.FDBRemoved, gone, err, fmt.Sprintf("deleting FDB entry %s dst %s dev %s", n.HardwareAddr, n.IP, s.vx.Attrs().Name))
	}
	for _, i := range pl.DelAddrs {
		a := s.addrs[i]
		gone, err := deleted(p.h.AddrDel(s.vx, &a))
		done(&c.AddrsRemoved, gone, err, fmt.Sprintf("deleting address %s from %s", a.IPNet, s.vx.Attrs().Name))
	}
	return c, errors.Join(errs...)
}
