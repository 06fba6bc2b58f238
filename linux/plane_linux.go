package linux

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/linux/masq"
)

// Plane programs one network namespace, the one the calling thread was in when New ran,
// over a reused netlink handle (links, addresses, dumps of neighbours) and a raw rtnetlink
// socket (routes, nexthop objects, and every write, in batches).
type Plane struct {
	log *slog.Logger
	ns  netns.NsHandle // kept so Watch can subscribe in the same namespace from any thread
	h   *netlink.Handle
	nl  *rtnl
	// ethtool is a socket of the namespace for the SIOCETHTOOL ioctl, which acts on the
	// devices of the socket's namespace, whatever the calling thread's.
	ethtool *ethtool.Ethtool
	// kernelNexthops: the kernel has nexthop objects (Linux 5.3 and later); nexthops: the
	// routes to peers go through them (always where the kernel has them; tests switch it).
	kernelNexthops, nexthops bool

	// mu serialises writers: a reconcile diffing against a dump taken before an EnsureVXLAN
	// replaced the device would write to a stale ifindex.
	mu    sync.Mutex
	model model
	masq  *masq.Manager // made on the first Apply that needs weft's nftables table
	// notFullyRandom masquerades without fully-random (--ip-masq-fully-random-disable).
	notFullyRandom bool
	// blackhole: the node's own subnet has a blackhole route (--ip-blackhole-route).
	blackhole bool
	// forwardAccept: weft's forward chain accepts the pod network's forwarded traffic
	// (--iptables-forward-rules).
	forwardAccept bool
}

// New opens a Plane on the current thread's network namespace. A daemon in the host
// namespace needs nothing special; a caller that switched namespaces must have locked its OS
// thread.
func New(log *slog.Logger) (*Plane, error) {
	ns, err := thisNetns()
	if err != nil {
		return nil, err
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("opening a netlink socket in network namespace %s: %w", ns, err)
	}
	r, err := openRtnl(ns)
	if err != nil {
		h.Close()
		ns.Close()
		return nil, err
	}
	et, err := ethtool.NewEthtool()
	if err != nil {
		r.close()
		h.Close()
		ns.Close()
		return nil, fmt.Errorf("opening an ethtool socket in network namespace %s: %w", ns, err)
	}
	p := &Plane{log: log, ns: ns, h: h, nl: r, ethtool: et}
	// A kernel without nexthop objects refuses to list them.
	_, err = p.listNexthops(nil)
	p.kernelNexthops = err == nil
	p.nexthops = p.kernelNexthops
	if err != nil {
		log.Info("the kernel has no nexthop objects: routing peers through plain routes", "err", err)
	}
	return p, nil
}

// Capabilities implements backend.Plane: see the package's Capabilities.
func (p *Plane) Capabilities() backend.Capabilities { return Capabilities() }

// Close releases the netlink sockets and the namespace handle. The kernel state stays.
func (p *Plane) Close() error {
	p.h.Close()
	p.nl.close()
	p.ethtool.Close()
	if !p.ns.IsOpen() {
		return nil
	}
	return p.ns.Close()
}

// thisNetns is the handle the Plane's sockets are opened through: netns.None() when the
// current thread shares its network namespace with the process's other threads, as weftd's
// does, so that no socket is opened by entering a namespace (setns needs CAP_SYS_ADMIN, which
// the DaemonSet does not grant); the current thread's namespace otherwise (a caller that
// switched a locked thread into a namespace of its own), so that watches and nftables, which
// open their sockets from other threads, find it.
func thisNetns() (netns.NsHandle, error) {
	ns, err := netns.Get()
	if err != nil {
		return netns.None(), fmt.Errorf("opening the current network namespace: %w", err)
	}
	// Another goroutine runs on another thread when this one is locked to its own; when it is
	// not, both threads are in the process's namespace anyway.
	type handle struct {
		ns  netns.NsHandle
		err error
	}
	c := make(chan handle, 1)
	go func() {
		h, err := netns.Get()
		c <- handle{h, err}
	}()
	other := <-c
	if other.err != nil {
		ns.Close()
		return netns.None(), fmt.Errorf("opening the network namespace of the process's threads: %w", other.err)
	}
	defer other.ns.Close()
	if ns.Equal(other.ns) {
		ns.Close()
		return netns.None(), nil
	}
	return ns, nil
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
	neighs []netlink.Neigh
	addrs  []netlink.Addr
}

// reconcile makes the kernel match st: the VXLAN device's addresses, the nexthop objects,
// routes, neighbours and FDB entries. It dumps the kernel state, diffs it against st and
// writes only the differences, with replace semantics so that a changed entry never
// disappears in between. Entries outside owned are never touched. It goes on past a failing
// entry, so one bad peer cannot hold back the others, and returns what it changed with the
// errors joined.
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
	snap, err := p.read(vx, names, owned.family())
	if err != nil {
		return Changes{}, err
	}
	pl := diff(st, snap.state, owned)
	if pl.empty() {
		return Changes{}, nil
	}
	return p.apply(pl, snap, index)
}

func (p *Plane) listNexthops(names map[int]string) ([]kernelNexthop, error) {
	return dump("nexthops", func() ([]kernelNexthop, error) {
		var out []kernelNexthop
		err := p.nl.dump(message{typ: unix.RTM_GETNEXTHOP, body: nhmsg(unix.AF_UNSPEC, 0, 0)}, unix.RTM_NEWNEXTHOP, func(b []byte) {
			if n, ok := parseNexthop(b, names); ok {
				out = append(out, n)
			}
		})
		return out, err
	})
}

// read dumps the routes of family (AF_INET, AF_INET6: only the plane's own, so that a
// dual-stack node's two planes each read half) and weft's nexthop objects, and the
// neighbours, FDB entries and addresses of vx (nil for host-gw).
func (p *Plane) read(vx netlink.Link, names map[int]string, family uint8) (snapshot, error) {
	s := snapshot{vx: vx}
	var err error
	if s.state.Routes, err = dump("routes", func() ([]kernelRoute, error) {
		var out []kernelRoute
		err := p.nl.dump(message{typ: unix.RTM_GETROUTE, body: rtmsg(family, 0, 0, 0, 0, 0, 0, 0)}, unix.RTM_NEWROUTE, func(b []byte) {
			if r, ok := parseRoute(b, names); ok {
				out = append(out, r)
			}
		})
		return out, err
	}); err != nil {
		return s, err
	}
	if p.kernelNexthops {
		if s.state.Nexthops, err = p.listNexthops(names); err != nil {
			return s, err
		}
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
	fdb, err := dump("FDB of "+name, func() ([]netlink.Neigh, error) {
		return p.h.NeighList(idx, unix.AF_BRIDGE)
	})
	if err != nil {
		return s, err
	}
	s.state.FDB = make([]kernelFDB, 0, len(fdb))
	for _, n := range fdb {
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

// batch is writes to send together: each with the counter its success adds to, and what it
// is for the log and errors.
type batch struct {
	msgs []message
	what []string
	cnt  []*int
	del  []bool
}

func (b *batch) add(m message, counter *int, del bool, what string) {
	b.msgs, b.cnt, b.del, b.what = append(b.msgs, m), append(b.cnt, counter), append(b.del, del), append(b.what, what)
}

// flush sends the batch and counts what it wrote: a delete of something already gone (by
// hand, or rewritten in place by a replace just before) counts nothing and is no error.
func (p *Plane) flush(b *batch, errs *[]error) {
	for i, err := range p.nl.exec(b.msgs) {
		n := 1
		if b.del[i] {
			n, err = deleted(err)
		}
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %w", b.what[i], err))
			continue
		}
		*b.cnt[i] += n
		p.log.Debug(b.what[i])
	}
	*b = batch{}
}

// apply writes pl: additions first (addresses, then FDB and neighbours, then the nexthop
// objects and routes that rely on them), deletions after, so that a changed peer is never
// unreachable in between.
func (p *Plane) apply(pl plan, s snapshot, index map[string]int) (Changes, error) {
	var c Changes
	var errs []error
	var b batch
	// on resolves the device of an entry, or keeps the error: one bad entry must not stop
	// the others.
	on := func(dev, what string) (int, bool) {
		i, ok := index[dev]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: device %q does not exist", what, dev))
		}
		return i, ok
	}

	for _, a := range pl.AddAddrs {
		if err := p.h.AddrReplace(s.vx, &netlink.Addr{IPNet: ipNet(a)}); err != nil {
			errs = append(errs, fmt.Errorf("adding address %s to %s: %w", a, s.vx.Attrs().Name, err))
			continue
		}
		c.AddrsAdded++
	}
	for _, f := range pl.SetFDB {
		what := fmt.Sprintf("setting FDB entry %s dst %s dev %s", f.MAC, f.Dst, f.Dev)
		if i, ok := on(f.Dev, what); ok {
			b.add(fdbSet(f, i), &c.FDBAdded, false, what)
		}
	}
	for _, n := range pl.SetNeighbors {
		what := fmt.Sprintf("setting neighbour %s lladdr %s dev %s", n.IP, n.MAC, n.Dev)
		if i, ok := on(n.Dev, what); ok {
			b.add(neighSet(n, i), &c.NeighborsAdded, false, what)
		}
	}
	p.flush(&b, &errs)
	for _, n := range pl.SetNexthops {
		what := "replacing nexthop " + n.String()
		if i, ok := on(n.Dev, what); ok {
			b.add(nexthopSet(n, i), &c.NexthopsAdded, false, what)
		}
	}
	p.flush(&b, &errs)
	for _, r := range pl.SetRoutes {
		if r.Blackhole {
			b.add(blackholeAdd(r), &c.RoutesAdded, false, "adding route "+routeString(r))
			continue
		}
		what := "replacing route " + routeString(r)
		if i, ok := on(r.Dev, what); ok || r.NH != 0 {
			b.add(routeSet(r, i), &c.RoutesAdded, false, what)
		}
	}
	p.flush(&b, &errs)

	for _, i := range pl.DelRoutes {
		b.add(routeDel(s.state.Routes[i]), &c.RoutesRemoved, true, "deleting route "+routeString(s.state.Routes[i].Route))
	}
	p.flush(&b, &errs)
	for _, i := range pl.DelNexthops {
		n := s.state.Nexthops[i]
		b.add(nexthopDel(n.ID), &c.NexthopsRemoved, true, "deleting nexthop "+n.Nexthop.String())
	}
	for _, i := range pl.DelNeighbors {
		n := s.neighs[i]
		b.add(neighDel(addrOf(n.IP), n.LinkIndex), &c.NeighborsRemoved, true, fmt.Sprintf("deleting neighbour %s dev %s", n.IP, s.vx.Attrs().Name))
	}
	for _, i := range pl.DelFDB {
		f := s.state.FDB[i].FDBEntry
		b.add(fdbDel(f, s.vx.Attrs().Index), &c.FDBRemoved, true, fmt.Sprintf("deleting FDB entry %s dst %s dev %s", f.MAC, f.Dst, f.Dev))
	}
	p.flush(&b, &errs)
	for _, i := range pl.DelAddrs {
		a := s.addrs[i]
		gone, err := deleted(p.h.AddrDel(s.vx, &a))
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting address %s from %s: %w", a.IPNet, s.vx.Attrs().Name, err))
			continue
		}
		c.AddrsRemoved += gone
	}
	return c, errors.Join(errs...)
}

// SetMasqueradeFullyRandom says whether the masquerade picks source ports fully at random
// (the default, as flanneld's); false is flanneld's --ip-masq-fully-random-disable. It takes
// effect at the next full Apply.
func (p *Plane) SetMasqueradeFullyRandom(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notFullyRandom = !on
}

// SetForwardRules says whether weft's nftables table accepts what the host forwards from or
// to the pod network of the plane's family (flanneld's --iptables-forward-rules); false
// removes that chain, leaving forwarding to the host's rules. It takes effect at the next
// full Apply.
func (p *Plane) SetForwardRules(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forwardAccept = on
}

// SetBlackholeRoute says whether the node's own subnet gets a blackhole route, kept like the
// routes to peers (flanneld's --ip-blackhole-route). It takes effect at the next full Apply;
// turned off, a blackhole route already there is left alone, as flanneld leaves it.
func (p *Plane) SetBlackholeRoute(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole = on
}

// want is WantOf(st) with what the plane adds of its own: the blackhole route.
func (p *Plane) want(st *backend.State) (Want, Ownership) {
	w, own := WantOf(st, p.nexthops)
	if p.blackhole {
		AddBlackhole(&w, &own, st.Own)
	}
	return w, own
}
