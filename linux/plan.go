package linux

import (
	"fmt"
	"net/netip"

	"github.com/weftnet/weft/backend"
)

// plan is what one Apply writes, full or incremental: the entries of each kind to set (add,
// or replace in place) and to delete. A full Apply's comes from the diff of a dump
// (diff), an incremental one's from the model before and after the peers changed
// (model.change); the one writer executes either in the order walk gives.
type plan struct {
	AddAddrs     []netip.Prefix // of the overlay device
	SetFDB       list[FDBEntry]
	SetNeighbors list[Neighbor]
	SetNexthops  list[Nexthop]
	SetRoutes    list[Route]
	// DelRoutes are routes as dumped, deleted exactly as the kernel holds them (metric,
	// protocol, scope), or routes the plane wrote itself (a zero raw), deleted as it wrote
	// them.
	DelRoutes    []kernelRoute
	DelNexthops  []Nexthop
	DelNeighbors []Neighbor
	DelFDB       []FDBEntry
	DelAddrs     []netip.Prefix
}

func (p *plan) empty() bool {
	return p.SetNexthops.Len()+len(p.DelNexthops)+p.SetRoutes.Len()+len(p.DelRoutes)+p.SetNeighbors.Len()+len(p.DelNeighbors)+
		p.SetFDB.Len()+len(p.DelFDB)+len(p.AddAddrs)+len(p.DelAddrs) == 0
}

// kind is a kind of kernel entry, as Changes and the dataplane_changes metric count them.
type kind uint8

const (
	kindAddress kind = iota
	kindFDB
	kindNeighbor
	kindNexthop
	kindRoute
)

var kindNames = [...]string{kindAddress: "address", kindFDB: "fdb", kindNeighbor: "neighbor", kindNexthop: "nexthop", kindRoute: "route"}

func (k kind) String() string { return kindNames[k] }

// op is one write of a plan: the i-th entry of the plan's slice of its kind, set or deleted.
type op struct {
	kind kind
	del  bool
	i    int
}

// walk calls write with each of the plan's writes in the order they must be made, and
// flush where the writes so far must be done before the next are sent. Additions come first
// and each before what relies on it (the device's addresses; FDB entries and neighbours,
// which an onlink route through the device needs resolved; nexthop objects; routes), then
// deletions in the reverse order (routes, then what no route uses any more; addresses
// last), so that a changed peer is never unreachable in between and a peer that comes or
// goes never has a route without its neighbour.
func (p *plan) walk(write func(op), flush func()) {
	each := func(k kind, del bool, n int) {
		for i := range n {
			write(op{kind: k, del: del, i: i})
		}
	}
	each(kindAddress, false, len(p.AddAddrs))
	each(kindFDB, false, p.SetFDB.Len())
	each(kindNeighbor, false, p.SetNeighbors.Len())
	flush()
	each(kindNexthop, false, p.SetNexthops.Len())
	flush()
	each(kindRoute, false, p.SetRoutes.Len())
	flush()
	each(kindRoute, true, len(p.DelRoutes))
	flush()
	each(kindNexthop, true, len(p.DelNexthops))
	each(kindNeighbor, true, len(p.DelNeighbors))
	each(kindFDB, true, len(p.DelFDB))
	flush()
	each(kindAddress, true, len(p.DelAddrs))
}

// describe says what o does, for the log and its error.
func (p *plan) describe(o op) string {
	switch k, del, i := o.kind, o.del, o.i; {
	case k == kindAddress && del:
		return "deleting address " + p.DelAddrs[i].String()
	case k == kindAddress:
		return "adding address " + p.AddAddrs[i].String()
	case k == kindFDB && del:
		f := p.DelFDB[i]
		return fmt.Sprintf("deleting FDB entry %s dst %s dev %s", f.MAC, f.Dst, f.Dev)
	case k == kindFDB:
		f := p.SetFDB.get(i)
		return fmt.Sprintf("setting FDB entry %s dst %s dev %s", f.MAC, f.Dst, f.Dev)
	case k == kindNeighbor && del:
		n := p.DelNeighbors[i]
		return fmt.Sprintf("deleting neighbour %s dev %s", n.IP, n.Dev)
	case k == kindNeighbor:
		n := p.SetNeighbors.get(i)
		return fmt.Sprintf("setting neighbour %s lladdr %s dev %s", n.IP, n.MAC, n.Dev)
	case k == kindNexthop && del:
		return "deleting nexthop " + p.DelNexthops[i].String()
	case k == kindNexthop:
		return "replacing nexthop " + p.SetNexthops.get(i).String()
	case k == kindRoute && del:
		return "deleting route " + routeString(p.DelRoutes[i].Route)
	case p.SetRoutes.get(i).Blackhole:
		return "adding route " + routeString(p.SetRoutes.get(i))
	default:
		return "replacing route " + routeString(p.SetRoutes.get(i))
	}
}

func routeString(r Route) string {
	if r.Blackhole {
		return "blackhole " + r.Dst.String()
	}
	s := r.Dst.String()
	if r.NH != 0 {
		s += fmt.Sprintf(" nhid %d", r.NH)
	}
	if r.Gw.IsValid() {
		s += " via " + r.Gw.String()
	}
	s += " dev " + r.Dev
	if r.Onlink {
		s += " onlink"
	}
	return s
}

// counter is the count a successful o adds to.
func (c *Changes) counter(o op) *int {
	counters := [...][2]*int{
		kindAddress:  {&c.AddrsAdded, &c.AddrsRemoved},
		kindFDB:      {&c.FDBAdded, &c.FDBRemoved},
		kindNeighbor: {&c.NeighborsAdded, &c.NeighborsRemoved},
		kindNexthop:  {&c.NexthopsAdded, &c.NexthopsRemoved},
		kindRoute:    {&c.RoutesAdded, &c.RoutesRemoved},
	}
	if o.del {
		return counters[o.kind][1]
	}
	return counters[o.kind][0]
}

// counts renders Changes as the backend counts them, every kind present.
func (c Changes) counts() backend.Changes {
	return backend.Changes{
		kindNexthop.String():  c.NexthopsAdded + c.NexthopsRemoved,
		kindRoute.String():    c.RoutesAdded + c.RoutesRemoved,
		kindNeighbor.String(): c.NeighborsAdded + c.NeighborsRemoved,
		kindFDB.String():      c.FDBAdded + c.FDBRemoved,
		kindAddress.String():  c.AddrsAdded + c.AddrsRemoved,
	}
}

// entryKey identifies a kernel entry of a peer: a route by destination, a nexthop object by
// ID, a neighbour by address, an FDB entry by MAC.
type entryKey struct {
	kind kind
	dst  netip.Prefix
	ip   netip.Addr
	id   uint32
	mac  backend.MAC
}

// entryKeys indexes the entries es by key: the index of the peer each belongs to.
func entryKeys(es []peerEntries) map[entryKey]int {
	k := make(map[entryKey]int, 4*len(es))
	for i, e := range es {
		if !e.route.Dst.IsValid() {
			continue // no peer
		}
		k[entryKey{kind: kindRoute, dst: e.route.Dst}] = i
		if e.hasNH {
			k[entryKey{kind: kindNexthop, id: e.nh.ID}] = i
		}
		if e.overlay {
			k[entryKey{kind: kindNeighbor, ip: e.neigh.IP}] = i
			k[entryKey{kind: kindFDB, mac: e.fdb.MAC}] = i
		}
	}
	return k
}

// planPeers is the plan that takes the kernel from the entries of before to those of after:
// the peers programmed and to program at the subnets a change touched (zero Peers where
// none). An entry both have alike is left alone, one that only changed is replaced in
// place, and only what after no longer has is deleted, so that no deletion takes away an
// entry a peer of after has just written (a MAC or a subnet that moved between keys).
func (l layout) planPeers(before, after []backend.Peer) plan {
	entries := func(peers []backend.Peer) []peerEntries {
		es := make([]peerEntries, len(peers))
		for i, p := range peers {
			if p.IsValid() {
				es[i] = l.entriesOf(p)
			}
		}
		return es
	}
	eb, ea := entries(before), entries(after)
	was, now := entryKeys(eb), entryKeys(ea)
	// changed: the entry of key k in after is not the one before has.
	changed := func(k entryKey, same func(w peerEntries) bool) bool {
		i, ok := was[k]
		return !ok || !same(eb[i])
	}
	var pl plan
	for _, e := range ea {
		if !e.route.Dst.IsValid() {
			continue
		}
		if f := e.fdb; e.overlay {
			if changed(entryKey{kind: kindFDB, mac: f.MAC}, func(w peerEntries) bool { return w.fdb == f }) {
				pl.SetFDB.add(f)
			}
			if n := e.neigh; changed(entryKey{kind: kindNeighbor, ip: n.IP}, func(w peerEntries) bool { return w.neigh == n }) {
				pl.SetNeighbors.add(n)
			}
		}
		if n := e.nh; e.hasNH && changed(entryKey{kind: kindNexthop, id: n.ID}, func(w peerEntries) bool { return w.nh == n }) {
			pl.SetNexthops.add(n)
		}
		if changed(entryKey{kind: kindRoute, dst: e.route.Dst}, func(w peerEntries) bool { return w.route == e.route }) {
			pl.SetRoutes.add(e.route)
		}
	}
	for _, e := range eb {
		if !e.route.Dst.IsValid() {
			continue
		}
		gone := func(k entryKey) bool { _, ok := now[k]; return !ok }
		if gone(entryKey{kind: kindRoute, dst: e.route.Dst}) {
			pl.DelRoutes = append(pl.DelRoutes, kernelRoute{Route: e.route, Metric: defaultMetric(e.route.Dst)})
		}
		if n := e.nh; e.hasNH && gone(entryKey{kind: kindNexthop, id: n.ID}) {
			pl.DelNexthops = append(pl.DelNexthops, n)
		}
		if e.overlay {
			if gone(entryKey{kind: kindNeighbor, ip: e.neigh.IP}) {
				pl.DelNeighbors = append(pl.DelNeighbors, e.neigh)
			}
			if gone(entryKey{kind: kindFDB, mac: e.fdb.MAC}) {
				pl.DelFDB = append(pl.DelFDB, e.fdb)
			}
		}
	}
	return pl
}
