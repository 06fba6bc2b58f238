package linux

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
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
	_, err = p.listNexthops(nil, 0)
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

// dumpNeighs dumps the neighbour entries of family on the interface link (AF_UNSPEC: ARP and
// NDP; AF_BRIDGE: the FDB), each as made by as while the dump is read. The kernel sends every
// interface's entries whatever the request's interface; the netlink library's NeighList
// filters them as this does, but only once it holds every message and a Neigh of each: at
// 65,000 peers, tens of megabytes at once for the neighbours and the FDB.
func dumpNeighs[T any](nl *rtnl, what string, family uint8, link, expect int, as func(dumpedNeigh) T) ([]T, error) {
	return dump(what, func() ([]T, error) {
		out := make([]T, 0, expect+dumpSlack)
		err := nl.dump(message{typ: unix.RTM_GETNEIGH, body: ndmsg(family, link, 0, 0, 0)}, unix.RTM_NEWNEIGH, func(b []byte) {
			if n, ok := parseNeigh(b); ok && n.link == link && (family == unix.AF_UNSPEC || n.family == family) {
				out = append(out, as(n))
			}
		})
		return out, err
	})
}

// dumpSlack is room in a dump for the entries that are not the peers': the main table's
// other routes, the device's link-local neighbour, the FDB's flooding entries.
const dumpSlack = 64

// snapshot is what a full Apply found of the interfaces; the entries went to its kernelSink.
type snapshot struct {
	index map[string]int // interface indexes by name
	vx    netlink.Link   // the overlay device; nil for host-gw or when it is missing
}

// dumpKernel reads what a full Apply diffs against: the interfaces, the main table's routes
// of family (AF_INET, AF_INET6: only the plane's own, so that a dual-stack node's two planes
// each read half), weft's nexthop objects, and the neighbours, FDB entries and addresses of
// the overlay device dev ("" for host-gw). With repair, as a full Apply reads it, a missing
// device is a MissingDeviceError and a device that is down is set up before the rest is
// read; without, as Diff reads it, the device is read as found, and a missing one has no
// entries. Each kind goes to sink as soon as it is read (none: a kind not read, as the
// device's without one), so that sink can let it go before the next is read. expect is how
// many entries of each kind are likely (the peers'): each dump is made at that size, not
// grown to it, which at 65,000 peers held twice the routes' 9 MiB while the last growth
// copied them.
func (p *Plane) dumpKernel(dev string, family uint8, repair bool, expect int, sink kernelSink) (snapshot, error) {
	links, names, err := p.interfaces()
	if err != nil {
		return snapshot{}, err
	}
	s := snapshot{index: make(map[string]int, len(links))}
	for _, l := range links {
		a := l.Attrs()
		s.index[a.Name] = a.Index
		if dev != "" && a.Name == dev {
			s.vx = l
		}
	}
	if repair && dev != "" {
		if s.vx == nil {
			return snapshot{}, &backend.MissingDeviceError{Name: dev}
		}
		if s.vx.Attrs().Flags&net.FlagUp == 0 {
			// Down, the kernel dropped every route through it and refuses onlink ones.
			p.log.Info("setting VXLAN device up", "dev", dev)
			if err := p.h.LinkSetUp(s.vx); err != nil {
				return snapshot{}, fmt.Errorf("setting VXLAN device %s up: %w", dev, err)
			}
		}
	}
	routes, err := p.dumpRoutes(family, names, expect+dumpSlack, nil)
	if err != nil {
		return s, err
	}
	sink.routes(routes)
	var nexthops []kernelNexthop
	if p.kernelNexthops {
		if nexthops, err = p.listNexthops(names, expect); err != nil {
			return s, err
		}
	}
	sink.nexthops(nexthops)
	if s.vx == nil {
		sink.neighbors(nil)
		sink.fdb(nil)
		sink.addrs(nil)
		return s, nil
	}
	name, idx := s.vx.Attrs().Name, s.vx.Attrs().Index
	// ARP and NDP come in one dump; the FDB (bridge family) only when asked for by family.
	neighs, err := dumpNeighs(p.nl, "neighbours of "+name, unix.AF_UNSPEC, idx, expect, func(n dumpedNeigh) kernelNeighbor {
		return kernelNeighbor{Neighbor: Neighbor{IP: n.ip, MAC: n.mac, Dev: name}, Permanent: n.state&unix.NUD_PERMANENT != 0}
	})
	if err != nil {
		return s, err
	}
	sink.neighbors(neighs)
	fdb, err := dumpNeighs(p.nl, "FDB of "+name, unix.AF_BRIDGE, idx, expect, func(n dumpedNeigh) kernelFDB {
		return kernelFDB{FDBEntry: FDBEntry{MAC: n.mac, Dst: n.ip, Dev: name}, Permanent: n.state&unix.NUD_PERMANENT != 0}
	})
	if err != nil {
		return s, err
	}
	sink.fdb(fdb)
	addrs, err := dump("addresses of "+name, func() ([]netlink.Addr, error) {
		return p.h.AddrList(s.vx, netlink.FAMILY_ALL)
	})
	if err != nil {
		return s, err
	}
	prefixes := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		prefixes = append(prefixes, prefixOf(a.IPNet))
	}
	sink.addrs(prefixes)
	return s, nil
}

// reconcile makes the kernel match st: the VXLAN device's addresses, the nexthop objects,
// routes, neighbours and FDB entries. It dumps the kernel state, diffs it against st and
// writes only the differences, with replace semantics so that a changed entry never
// disappears in between. Entries outside owned are never touched. It goes on past a failing
// entry, so one bad peer cannot hold back the others, and returns what it changed with the
// errors joined.
func (p *Plane) reconcile(st Want, owned Ownership) (Changes, error) {
	d := differ{want: st, own: owned}
	snap, err := p.dumpKernel(st.Device, owned.family(), true, st.peers.len(), &d)
	if err != nil {
		return Changes{}, err
	}
	p.model.setIndexes(snap.index)
	pl := d.plan
	if pl.empty() {
		return Changes{}, nil
	}
	return p.write(&pl, snap.vx)
}

// interfaces lists the namespace's interfaces, and their names by index.
func (p *Plane) interfaces() ([]netlink.Link, map[int]string, error) {
	links, err := dump("links", p.h.LinkList)
	if err != nil {
		return nil, nil, err
	}
	names := make(map[int]string, len(links))
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	return links, names, nil
}

// dumpRoutes dumps the main table's routes of family (AF_INET, AF_INET6), those keep takes
// (nil: all), into a slice made for size; names are the interfaces by index.
func (p *Plane) dumpRoutes(family uint8, names map[int]string, size int, keep func(kernelRoute) bool) ([]kernelRoute, error) {
	return dump("routes", func() ([]kernelRoute, error) {
		out := make([]kernelRoute, 0, size)
		err := p.nl.dump(message{typ: unix.RTM_GETROUTE, body: rtmsg(family, 0, 0, 0, 0, 0, 0, 0)}, unix.RTM_NEWROUTE, func(b []byte) {
			if r, ok := parseRoute(b, names); ok && (keep == nil || keep(r)) {
				out = append(out, r)
			}
		})
		return out, err
	})
}

func (p *Plane) listNexthops(names map[int]string, expect int) ([]kernelNexthop, error) {
	return dump("nexthops", func() ([]kernelNexthop, error) {
		out := make([]kernelNexthop, 0, expect+dumpSlack)
		err := p.nl.dump(message{typ: unix.RTM_GETNEXTHOP, body: nhmsg(unix.AF_UNSPEC, 0, 0)}, unix.RTM_NEWNEXTHOP, func(b []byte) {
			if n, ok := parseNexthop(b, names); ok {
				out = append(out, n)
			}
		})
		return out, err
	})
}

// write is the plane's one writer: it executes pl, full or incremental, in the order walk
// gives, sending the writes between two flushes in one batch. Devices are found by name
// among the interfaces of the last full Apply; vx is the overlay device, for its addresses
// (nil when pl has none). It goes on past a failing write, so one bad entry cannot hold back
// the others, and returns what it wrote with the errors joined. A delete of something
// already gone (by hand, or rewritten in place by a replace just before) counts nothing and
// is no error.
func (p *Plane) write(pl *plan, vx netlink.Link) (Changes, error) {
	var c Changes
	var errs []error
	var b batch
	index := p.model.links()
	pl.walk(func(o op) {
		if o.kind == kindAddress {
			p.writeAddr(pl, o, vx, &c, &errs)
			return
		}
		m, ok := pl.message(o, index, &errs)
		if !ok {
			return
		}
		b.add(m, o)
		if len(b.msgs) >= flushAt {
			// Sent in order all the same; built all before the first send, a cold start's
			// messages (240,000 at 65,000 peers) would be held at once, at its peak.
			p.flush(pl, &b, &c, &errs)
		}
	}, func() { p.flush(pl, &b, &c, &errs) })
	return c, errors.Join(errs...)
}

// message is the netlink message of o, whose device is found by name in index; false when
// there is none to send, its device missing (the error noted in errs). A route through a
// nexthop object is sent all the same: the object names the device.
func (pl *plan) message(o op, index map[string]int, errs *[]error) (message, bool) {
	link := func(dev string) (int, bool) {
		i, ok := index[dev]
		if !ok {
			*errs = append(*errs, fmt.Errorf("%s: device %q does not exist", pl.describe(o), dev))
		}
		return i, ok
	}
	i := o.i
	switch {
	case o.kind == kindRoute && o.del:
		r := pl.DelRoutes[i]
		if r.raw != (rawRoute{}) {
			return routeDel(r), true // as dumped: its device is named by index already
		}
		dev, ok := link(r.Dev)
		return routeDelOwn(r.Route, dev), ok || r.NH != 0
	case o.kind == kindRoute:
		r := pl.SetRoutes.get(i)
		if r.Blackhole {
			return blackholeAdd(r), true
		}
		dev, ok := link(r.Dev)
		return routeSet(r, dev), ok || r.NH != 0
	case o.kind == kindNexthop && o.del:
		return nexthopDel(pl.DelNexthops[i].ID), true // by ID alone: a group or blackhole has no device
	case o.kind == kindNexthop:
		n := pl.SetNexthops.get(i)
		dev, ok := link(n.Dev)
		return nexthopSet(n, dev), ok
	case o.kind == kindNeighbor && o.del:
		n := pl.DelNeighbors[i]
		dev, ok := link(n.Dev)
		return neighDel(n.IP, dev), ok
	case o.kind == kindNeighbor:
		n := pl.SetNeighbors.get(i)
		dev, ok := link(n.Dev)
		return neighSet(n, dev), ok
	case o.del:
		f := pl.DelFDB[i]
		dev, ok := link(f.Dev)
		return fdbDel(f, dev), ok
	}
	f := pl.SetFDB.get(i)
	dev, ok := link(f.Dev)
	return fdbSet(f, dev), ok
}

// writeAddr adds or deletes an address of the overlay device, at once: the netlink library
// writes them, outside the batches.
func (p *Plane) writeAddr(pl *plan, o op, vx netlink.Link, c *Changes, errs *[]error) {
	if vx == nil {
		*errs = append(*errs, fmt.Errorf("%s: no overlay device", pl.describe(o)))
		return
	}
	if !o.del {
		a := pl.AddAddrs[o.i]
		if err := p.h.AddrReplace(vx, &netlink.Addr{IPNet: ipNet(a)}); err != nil {
			*errs = append(*errs, fmt.Errorf("adding address %s to %s: %w", a, vx.Attrs().Name, err))
			return
		}
		*c.counter(o)++
		return
	}
	a := pl.DelAddrs[o.i]
	gone, err := deleted(p.h.AddrDel(vx, &netlink.Addr{IPNet: ipNet(a)}))
	if err != nil {
		*errs = append(*errs, fmt.Errorf("deleting address %s from %s: %w", a, vx.Attrs().Name, err))
		return
	}
	*c.counter(o) += gone
}

// flushAt is how many writes a batch holds at most before it is sent, with no flush of the
// plan's due: a multiple of the sends' batchSize, so that no send is the shorter for it.
const flushAt = 16 * batchSize

// batch is writes of a plan to send together, with the op each one is.
type batch struct {
	msgs []message
	ops  []op
}

func (b *batch) add(m message, o op) { b.msgs, b.ops = append(b.msgs, m), append(b.ops, o) }

// flush sends the batch and counts what it wrote into c. What a write was is spelled out
// only for an error or the debug log: a cold start makes tens of thousands.
func (p *Plane) flush(pl *plan, b *batch, c *Changes, errs *[]error) {
	if len(b.msgs) == 0 {
		return
	}
	debug := p.log.Enabled(context.Background(), slog.LevelDebug)
	for i, err := range p.nl.exec(b.msgs) {
		o, n := b.ops[i], 1
		if o.del {
			n, err = deleted(err)
		}
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %w", pl.describe(o), err))
			continue
		}
		*c.counter(o) += n
		if debug {
			p.log.Debug(pl.describe(o))
		}
	}
	b.msgs, b.ops = b.msgs[:0], b.ops[:0]
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
