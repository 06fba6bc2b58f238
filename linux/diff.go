package linux

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/weftnet/weft/backend"
)

// Changes counts what an Apply wrote. A changed entry (same destination, new gateway or
// MAC) is replaced in place and counts as one addition.
type Changes struct {
	NexthopsAdded, NexthopsRemoved   int
	RoutesAdded, RoutesRemoved       int
	NeighborsAdded, NeighborsRemoved int
	FDBAdded, FDBRemoved             int
	AddrsAdded, AddrsRemoved         int
}

func (c Changes) String() string {
	return fmt.Sprintf("nexthops +%d -%d, routes +%d -%d, neighbours +%d -%d, fdb +%d -%d, addresses +%d -%d",
		c.NexthopsAdded, c.NexthopsRemoved, c.RoutesAdded, c.RoutesRemoved, c.NeighborsAdded, c.NeighborsRemoved,
		c.FDBAdded, c.FDBRemoved, c.AddrsAdded, c.AddrsRemoved)
}

// Route is a route to a peer's subnet.
type Route struct {
	Dst netip.Prefix
	Gw  netip.Addr
	Dev string // outgoing interface by name
	// NH is the nexthop object the route goes through (Gw on Dev, see Nexthop); 0 for a
	// plain route.
	NH     uint32
	Onlink bool // the gateway is reachable on Dev without a route to it (VXLAN)
	// Blackhole: a route of type blackhole, with no device or gateway (--ip-blackhole-route's
	// to the node's own subnet).
	Blackhole bool
}

// sameHop reports whether two routes send Dst the same way, whether or not through a
// nexthop object (the kernel's notifications do not say).
func sameHop(a, b Route) bool {
	return a.Dst == b.Dst && a.Gw == b.Gw && a.Dev == b.Dev && a.Onlink == b.Onlink
}

// Nexthop is a nexthop object: the kernel inserts routes that share their gateway through one
// in constant time, where routes each with a gateway of their own cost more with every one.
type Nexthop struct {
	ID     uint32
	Gw     netip.Addr
	Dev    string
	Onlink bool
}

// String writes n as ip-nexthop does.
func (n Nexthop) String() string {
	s := fmt.Sprintf("id %d via %s dev %s", n.ID, n.Gw, n.Dev)
	if n.Onlink {
		s += " onlink"
	}
	return s
}

// nexthopTag marks weft's nexthop objects: IDs 0x57000000 (W) plus the index of the peer's
// subnet in the network, so that an ID names its peer on every restart and weft never
// touches another program's nexthops.
const (
	nexthopTag  = 0x57 << 24
	nexthopMask = 0xff << 24
)

// nexthopID is the ID of the nexthop object for routes to sn, or 0 when sn has none (an IPv6
// subnet, or a network with more than 2^24 subnets).
func nexthopID(sn, network netip.Prefix) uint32 {
	if !sn.Addr().Is4() || !network.Addr().Is4() || sn.Bits()-network.Bits() > 24 || sn.Bits() < network.Bits() {
		return 0
	}
	a, n := sn.Masked().Addr().As4(), network.Masked().Addr().As4()
	idx := (binary.BigEndian.Uint32(a[:]) - binary.BigEndian.Uint32(n[:])) >> (32 - sn.Bits())
	return nexthopTag | idx
}

// ownsNexthop reports whether id is one of weft's.
func ownsNexthop(id uint32) bool { return id&nexthopMask == nexthopTag }

// Neighbor maps an address on Dev to a link-layer address, permanently.
type Neighbor struct {
	IP  netip.Addr
	MAC backend.MAC
	Dev string
}

// FDBEntry tells Dev where (the remote public IP) to send frames for MAC.
type FDBEntry struct {
	MAC backend.MAC
	Dst netip.Addr
	Dev string
}

// Want is a State in the kernel's terms: what flannel programs for each peer. The entries
// given are followed, kind by kind, by those of the peers of the State it was made of
// (WantOf), which are made when a diff or a write reads them, never all at once.
type Want struct {
	Device    string         // the VXLAN device; "" for host-gw
	Addrs     []netip.Prefix // the VXLAN device's
	Nexthops  []Nexthop
	Routes    []Route
	Neighbors []Neighbor
	FDB       []FDBEntry
	peers     *peerTable
}

func (w Want) nexthops() list[Nexthop] {
	return list[Nexthop]{given: w.Nexthops, peers: w.peers, of: nexthopOf}
}
func (w Want) routes() list[Route] { return list[Route]{given: w.Routes, peers: w.peers, of: routeOf} }
func (w Want) neighbors() list[Neighbor] {
	return list[Neighbor]{given: w.Neighbors, peers: w.peers, of: neighborOf}
}
func (w Want) fdb() list[FDBEntry] { return list[FDBEntry]{given: w.FDB, peers: w.peers, of: fdbOf} }

// Entries are every entry of w, the given and its peers', in lists of their own: for a tool
// that shows or counts them.
func (w Want) Entries() (nexthops []Nexthop, routes []Route, neighbors []Neighbor, fdb []FDBEntry) {
	return w.nexthops().slice(), w.routes().slice(), w.neighbors().slice(), w.fdb().slice()
}

// Ownership says which kernel entries are the daemon's, so which ones a full Apply may
// delete. Anything else is left alone, however stale it looks: it may belong to an
// administrator, the CNI bridge or another daemon.
type Ownership struct {
	// Networks are the cluster networks: only routes whose Dst lies inside one of them can
	// be ours.
	Networks []netip.Prefix
	// Own are the node's own subnets: routes to them belong to the CNI bridge, never to us.
	Own []netip.Prefix
	// Devices are devices whose gatewayed routes into Networks are ours even when no wanted
	// route goes through them: the external interface of host-gw and DirectRouting. Without
	// it the route of the last host-gw peer could never be removed.
	Devices []string
	// Blackhole, when valid, is the one destination whose blackhole route (default metric)
	// is ours: the node's own subnet under --ip-blackhole-route. Every other blackhole route
	// is someone else's (Calico's IPAM blocks, an administrator's), and so is this one
	// without the flag.
	Blackhole netip.Prefix
}

// family is the address family of the routes own allows, for the dump: AF_INET or AF_INET6
// when its networks are all of one family (a plane's are), else AF_UNSPEC. Linux's numbers,
// spelled out so that the diff stays portable.
func (own Ownership) family() uint8 {
	const unspec, inet, inet6 = 0, 2, 10
	f := uint8(unspec)
	for i, n := range own.Networks {
		nf := uint8(inet)
		if n.Addr().Is6() {
			nf = inet6
		}
		if i > 0 && nf != f {
			return unspec
		}
		f = nf
	}
	return f
}

// peerEntries are the kernel entries of one peer: a route (through a nexthop object where
// the kernel has them), and for an overlay peer the neighbour and FDB entry its route relies
// on.
// Values, not pointers: made for every peer at every full Apply, pointers would be three
// allocations a peer (at 65,000 peers, 7.5 MiB of garbage at the cold start's peak).
type peerEntries struct {
	route   Route
	nh      Nexthop // when hasNH
	neigh   Neighbor
	fdb     FDBEntry // neigh and fdb when overlay
	hasNH   bool
	overlay bool
}

// layout is how a node programs its peers: its overlay device ("" for host-gw), its external
// interface, and whether routes go through nexthop objects (network is where their IDs come
// from).
type layout struct {
	dev, underlay string
	network       netip.Prefix
	nexthops      bool
}

// entriesOf is what flannel programs for p (with weft's nexthop objects where l has them).
func (l layout) entriesOf(p backend.Peer) peerEntries {
	e := peerEntries{route: l.route(p), overlay: p.Overlay()}
	e.nh, e.hasNH = l.nexthop(e.route)
	if e.overlay {
		e.neigh, _ = l.neighbor(p)
		e.fdb, _ = l.fdb(p)
	}
	return e
}

// route is p's route: to its VTEP on the overlay device, or to its public IP on the
// underlay; through its nexthop object where l has them.
func (l layout) route(p backend.Peer) Route {
	r := Route{Dst: p.Subnet, Gw: p.PublicIP, Dev: l.underlay}
	if p.Overlay() {
		r = Route{Dst: p.Subnet, Gw: p.VTEP(), Dev: l.dev, Onlink: true}
	}
	if l.nexthops {
		r.NH = nexthopID(p.Subnet, l.network)
	}
	return r
}

// nexthop is the nexthop object route r goes through, if it goes through one.
func (l layout) nexthop(r Route) (Nexthop, bool) {
	return Nexthop{ID: r.NH, Gw: r.Gw, Dev: r.Dev, Onlink: r.Onlink}, r.NH != 0
}

// neighbor is the neighbour entry of an overlay peer's VTEP.
func (l layout) neighbor(p backend.Peer) (Neighbor, bool) {
	return Neighbor{IP: p.VTEP(), MAC: p.VTEPMAC, Dev: l.dev}, p.Overlay()
}

// fdb is the FDB entry that sends an overlay peer's frames to its public IP.
func (l layout) fdb(p backend.Peer) (FDBEntry, bool) {
	return FDBEntry{MAC: p.VTEPMAC, Dst: p.PublicIP, Dev: l.dev}, p.Overlay()
}

func layoutOf(st *backend.State, nexthops bool) layout {
	l := layout{underlay: st.Underlay, network: st.Network(), nexthops: nexthops}
	if st.Device != nil {
		l.dev = st.Device.Name
	}
	return l
}

// WantOf translates st into the kernel's terms, routes through nexthop objects or not, and
// says which entries are ours. It copies the peers, 14 bytes each, and makes their entries
// only as they are read.
func WantOf(st *backend.State, nexthops bool) (Want, Ownership) {
	l := layoutOf(st, nexthops)
	w := Want{Device: l.dev, peers: newPeerTable(l, st.SubnetLen(), st.Peers)}
	if st.Device != nil {
		w.Addrs = st.DeviceAddresses()
	}
	own := Ownership{Networks: []netip.Prefix{st.Network()}, Devices: []string{st.Underlay}}
	if st.Own.IsValid() {
		own.Own = []netip.Prefix{st.Own}
	}
	return w, own
}

// AddBlackhole adds to w and own the blackhole route to the node's own subnet that flanneld's
// --ip-blackhole-route adds (for Canal, whose pods' addresses are not on a bridge): traffic
// to an address of the subnet that no pod holds is dropped here instead of following the
// default route out. A no-op before the subnet is known.
func AddBlackhole(w *Want, own *Ownership, subnet netip.Prefix) {
	if !subnet.IsValid() {
		return
	}
	dst := subnet.Masked()
	w.Routes = append(w.Routes, Route{Dst: dst, Blackhole: true})
	own.Blackhole = dst
}

// kernelNexthop is a nexthop object as dumped; Other marks one no route of weft's can use
// (a group, a blackhole).
type kernelNexthop struct {
	Nexthop
	Other bool
}

// kernelRoute is a main-table route as dumped. Dev is "" when the route has no single
// outgoing device (multipath, blackhole); such routes are never ours.
type kernelRoute struct {
	Route
	Metric      int
	ProtoKernel bool
	raw         rawRoute // what a delete must name
}

// rawRoute is what a delete must name of a dumped route so that the kernel deletes exactly
// it: left out, the kernel matches loosely (a priority of 0 matches any route to the same
// destination). Its gateway and nexthop object are the route's own (Route.Gw, Route.NH). It
// is kept small: a dump holds one per route, and at 65,000 peers each byte here is 64 KiB.
type rawRoute struct {
	Family, Tos, Table, Protocol, Scope, Type uint8
	LinkIndex                                 int32
}

// kernelNeighbor is a neighbour of the VXLAN device as dumped.
type kernelNeighbor struct {
	Neighbor
	Permanent bool
}

// kernelFDB is an FDB entry of the VXLAN device as dumped; Dst is invalid when the entry has
// no destination IP.
type kernelFDB struct {
	FDBEntry
	Permanent bool
}

// kernelState is what a full Apply dumped, in portable form, so the diff can be tested anywhere.
type kernelState struct {
	Nexthops  []kernelNexthop
	Routes    []kernelRoute
	Neighbors []kernelNeighbor
	FDB       []kernelFDB
	Addrs     []netip.Prefix // of the VXLAN device
}

// kernelSink takes a dump of the kernel one kind at a time, in any order, each kind once.
type kernelSink interface {
	nexthops([]kernelNexthop)
	routes([]kernelRoute)
	neighbors([]kernelNeighbor)
	fdb([]kernelFDB)
	addrs([]netip.Prefix)
}

// kernelState keeps every kind, for a caller that reads them after the diff.
func (s *kernelState) nexthops(h []kernelNexthop)   { s.Nexthops = h }
func (s *kernelState) routes(h []kernelRoute)       { s.Routes = h }
func (s *kernelState) neighbors(h []kernelNeighbor) { s.Neighbors = h }
func (s *kernelState) fdb(h []kernelFDB)            { s.FDB = h }
func (s *kernelState) addrs(h []netip.Prefix)       { s.Addrs = h }

// differ diffs each kind as the dump delivers it, and keeps only what its plan names: a full
// comparison holds one kind's dump at a time, not all four (at 65,000 peers, each kind's
// dump and the indexes of its diff are 5 to 20 MiB).
type differ struct {
	want Want
	own  Ownership
	plan plan
}

func (d *differ) nexthops(have []kernelNexthop) {
	v6 := len(d.own.Networks) > 0 && d.own.Networks[0].Addr().Is6()
	var del []int
	d.plan.SetNexthops, del = diffNexthops(d.want.nexthops(), have, v6)
	d.plan.DelNexthops = pickOf(have, del, func(n kernelNexthop) Nexthop { return n.Nexthop })
}

func (d *differ) routes(have []kernelRoute) {
	var del []int
	d.plan.SetRoutes, del = diffRoutes(d.want.routes(), have, routeOwner(d.want.routes(), d.want.Device, d.own))
	d.plan.DelRoutes = pickOf(have, del, func(r kernelRoute) kernelRoute { return r })
}

func (d *differ) neighbors(have []kernelNeighbor) {
	var del []int
	d.plan.SetNeighbors, del = diffNeighbors(d.want.neighbors(), have, d.want.Device)
	d.plan.DelNeighbors = pickOf(have, del, func(n kernelNeighbor) Neighbor { return n.Neighbor })
}

func (d *differ) fdb(have []kernelFDB) {
	var del []int
	d.plan.SetFDB, del = diffFDB(d.want.fdb(), have, d.want.Device)
	d.plan.DelFDB = pickOf(have, del, func(f kernelFDB) FDBEntry { return f.FDBEntry })
}

func (d *differ) addrs(have []netip.Prefix) {
	var del []int
	d.plan.AddAddrs, del = diffAddrs(d.want.Addrs, have, d.own.Networks)
	d.plan.DelAddrs = pickOf(have, del, func(a netip.Prefix) netip.Prefix { return a })
}

// diff computes the plan that turns have into want, touching only what own allows. The
// entries it deletes are those dumped, so that each delete names the exact kernel entry
// (metric, protocol, scope).
func diff(want Want, have kernelState, own Ownership) plan {
	d := differ{want: want, own: own}
	d.nexthops(have.Nexthops)
	d.routes(have.Routes)
	d.neighbors(have.Neighbors)
	d.fdb(have.FDB)
	d.addrs(have.Addrs)
	return d.plan
}

// pickOf is the entries of have at the indexes idx, as the plan holds them.
func pickOf[T, U any](have []T, idx []int, as func(T) U) []U {
	if len(idx) == 0 {
		return nil
	}
	out := make([]U, len(idx))
	for j, i := range idx {
		out[j] = as(have[i])
	}
	return out
}

// routeOwner returns the ownership test for routes: inside the cluster networks, not to our
// own subnet, not the kernel's, and either on the VXLAN device or through a gateway on a
// device we route peers through.
func routeOwner(want list[Route], vx string, own Ownership) func(kernelRoute) bool {
	gwDevs := map[string]bool{}
	for _, d := range own.Devices {
		gwDevs[d] = true
	}
	for _, r := range want.given {
		gwDevs[r.Dev] = true
	}
	if t := want.peers; t.len() > 0 {
		// Every peer's route goes through one of the two; reading them all would make them.
		gwDevs[t.l.underlay], gwDevs[t.l.dev] = true, true
	}
	return func(r kernelRoute) bool {
		if r.Blackhole {
			return !r.ProtoKernel && own.Blackhole.IsValid() && r.Dst.Masked() == own.Blackhole &&
				r.Metric == defaultMetric(r.Dst)
		}
		if r.ProtoKernel || !within(r.Dst, own.Networks) || within(r.Dst, own.Own) {
			return false
		}
		if ownsNexthop(r.NH) {
			return true
		}
		if r.Dev == "" {
			return false
		}
		return r.Dev == vx || r.Gw.IsValid() && gwDevs[r.Dev]
	}
}

// within reports whether p equals or lies inside one of nets.
func within(p netip.Prefix, nets []netip.Prefix) bool {
	if !p.IsValid() {
		return false
	}
	for _, n := range nets {
		if n.Bits() <= p.Bits() && n.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// defaultMetric is the metric the kernel gives a route added without one: a replace only
// overwrites the route of that metric, so routes of other metrics must be deleted.
func defaultMetric(dst netip.Prefix) int {
	if dst.Addr().Is6() {
		return 1024
	}
	return 0
}

// sameRoute: a route through a nexthop object is right when it uses the right one (the
// nexthop's own diff sees to its gateway); a plain one when it has the gateway itself.
func sameRoute(k kernelRoute, w Route) bool {
	if k.NH != w.NH || k.Metric != defaultMetric(w.Dst) || k.Blackhole != w.Blackhole {
		return false
	}
	if w.Blackhole {
		return true
	}
	return w.NH != 0 || k.Dev == w.Dev && k.Gw == w.Gw && k.Onlink == w.Onlink
}

// diffNexthops: weft's nexthop objects (by ID) that are missing or differ are set, those no
// peer needs deleted (after the routes that used them moved or went). Only the objects of the
// plane's family (v6) are looked at: the other family's plane owns the others. (weft makes
// IPv4 ones only; one without a gateway counts as IPv4's.)
func diffNexthops(want list[Nexthop], have []kernelNexthop, v6 bool) (set list[Nexthop], del []int) {
	byID := make(map[uint32]int32, len(have))
	for i, h := range have {
		if ownsNexthop(h.ID) && (h.Gw.IsValid() && h.Gw.Is6()) == v6 {
			byID[h.ID] = int32(i)
		}
	}
	// wanted marks, by their index in have, the objects held that one wants.
	wanted := make([]bool, len(have))
	var setting []int32
	for j, w := range want.all() {
		i, ok := byID[w.ID]
		if ok {
			wanted[i] = true
		}
		if ok && !have[i].Other && have[i].Nexthop == w {
			continue
		}
		setting = append(setting, int32(j))
	}
	for _, i := range byID {
		if !wanted[i] {
			del = append(del, int(i))
		}
	}
	slices.Sort(del)
	return subset(want, setting), del
}

// groups are the indexes of dumped entries by key, in dump order, chained through one slice
// rather than a slice per key: there is almost always one entry per key. Indexes are int32:
// no dump holds 2^31 entries, and the map's entries are smaller.
type groups[K comparable] struct {
	first map[K]int32
	next  []int32
}

// groupBy groups the indexes of have by key; entries key refuses are left out.
func groupBy[T any, K comparable](have []T, key func(T) (K, bool)) groups[K] {
	g := groups[K]{first: make(map[K]int32, len(have)), next: make([]int32, len(have))}
	for i := len(have) - 1; i >= 0; i-- {
		k, ok := key(have[i])
		if !ok {
			continue
		}
		g.next[i] = -1
		if j, ok := g.first[k]; ok {
			g.next[i] = j
		}
		g.first[k] = int32(i)
	}
	return g
}

// of appends the indexes grouped under k to into: a diff reuses one slice for every key.
func (g groups[K]) of(k K, into []int) []int {
	i, ok := g.first[k]
	if !ok {
		return into
	}
	for ; i >= 0; i = g.next[i] {
		into = append(into, int(i))
	}
	return into
}

// addrKey is an address as a map key: 17 bytes without a pointer, where a netip.Addr takes 24
// with one (its zone's), so that a map of 65,000 is smaller and the GC need not scan it. The
// addresses a diff compares have no zone.
type addrKey struct {
	a   [16]byte
	is4 bool // an IPv4 address, not the IPv4-mapped IPv6 one
}

func keyOfAddr(a netip.Addr) addrKey { return addrKey{a: a.As16(), is4: a.Is4()} }

// prefixKey is a prefix as a map key, as addrKey is an address; bits is 255 for an invalid
// prefix.
type prefixKey struct {
	addrKey
	bits uint8
}

func keyOfPrefix(p netip.Prefix) prefixKey {
	return prefixKey{addrKey: keyOfAddr(p.Addr()), bits: uint8(p.Bits())}
}

func diffRoutes(want list[Route], have []kernelRoute, owned func(kernelRoute) bool) (set list[Route], del []int) {
	byDst := groupBy(have, func(r kernelRoute) (prefixKey, bool) { return keyOfPrefix(r.Dst.Masked()), owned(r) })
	wanted := make(map[prefixKey]bool, want.Len())
	var setting []int32
	var cands []int
	for j, w := range want.all() {
		dst := keyOfPrefix(w.Dst.Masked())
		if wanted[dst] {
			continue // one route per destination; the backend never asks for two
		}
		wanted[dst] = true
		cands = byDst.of(dst, cands[:0])
		keep := slices.IndexFunc(cands, func(i int) bool { return sameRoute(have[i], w) })
		if keep < 0 {
			setting = append(setting, int32(j))
		}
		for j, i := range cands {
			// A replace overwrites the route of the default metric in place (no gap), so that
			// one must not be deleted after it: the delete would hit the new route.
			if j == keep || keep < 0 && have[i].Metric == defaultMetric(w.Dst) {
				continue
			}
			del = append(del, i)
		}
	}
	for dst := range byDst.first {
		if !wanted[dst] {
			del = byDst.of(dst, del)
		}
	}
	slices.Sort(del)
	return subset(want, setting), del
}

// diffNeighbors: the permanent neighbours of the overlay device vx are ours; the kernel holds
// one a device and address, so they are found by address alone.
func diffNeighbors(want list[Neighbor], have []kernelNeighbor, vx string) (set list[Neighbor], del []int) {
	owned := make(map[addrKey]int32, len(have))
	for i, n := range have {
		if n.Dev == vx && n.Permanent {
			owned[keyOfAddr(n.IP)] = int32(i)
		}
	}
	// wanted marks, by their index in have, the neighbours held that one wants.
	wanted := make([]bool, len(have))
	var setting []int32
	for j, w := range want.all() {
		if w.Dev != vx { // none of the device's: it is found among none held
			setting = append(setting, int32(j))
			continue
		}
		i, ok := owned[keyOfAddr(w.IP)]
		if ok {
			wanted[i] = true
		}
		if ok && have[i].MAC == w.MAC {
			continue
		}
		setting = append(setting, int32(j))
	}
	for _, i := range owned {
		if !wanted[i] {
			del = append(del, int(i))
		}
	}
	slices.Sort(del)
	return subset(want, setting), del
}

// ownsFDB: permanent entries with a unicast destination. The all-zero MAC entries (flooding
// defaults) and learned entries are someone else's.
func ownsFDB(f kernelFDB, vx string) bool {
	return f.Dev == vx && f.Permanent && f.MAC != backend.MAC{} &&
		f.Dst.IsValid() && !f.Dst.IsUnspecified() && !f.Dst.IsMulticast()
}

// diffFDB: the entries ownsFDB names, all of the overlay device vx, so found by MAC alone.
func diffFDB(want list[FDBEntry], have []kernelFDB, vx string) (set list[FDBEntry], del []int) {
	owned := groupBy(have, func(f kernelFDB) (backend.MAC, bool) { return f.MAC, ownsFDB(f, vx) })
	wanted := make(map[backend.MAC]bool, want.Len())
	var setting []int32
	var cands []int
	for j, w := range want.all() {
		if w.Dev != vx { // none of the device's: it is found among none held
			setting = append(setting, int32(j))
			continue
		}
		if wanted[w.MAC] {
			continue // a unicast MAC has one destination; the kernel refuses to append a second
		}
		wanted[w.MAC] = true
		cands = owned.of(w.MAC, cands[:0])
		keep := slices.IndexFunc(cands, func(i int) bool { return have[i].Dst == w.Dst })
		if keep < 0 {
			setting = append(setting, int32(j))
			keep = 0 // a replace rewrites the MAC's first destination in place
		}
		for j, i := range cands {
			if j != keep {
				del = append(del, i)
			}
		}
	}
	for m := range owned.first {
		if !wanted[m] {
			del = owned.of(m, del)
		}
	}
	slices.Sort(del)
	return subset(want, setting), del
}

// diffAddrs: the VXLAN device's addresses inside the cluster networks are ours; others (the
// IPv6 link-local one) are the kernel's.
func diffAddrs(want, have, networks []netip.Prefix) (add []netip.Prefix, del []int) {
	for _, w := range want {
		if !slices.Contains(have, w) {
			add = append(add, w)
		}
	}
	for i, h := range have {
		if within(netip.PrefixFrom(h.Addr(), h.Addr().BitLen()), networks) && !slices.Contains(want, h) {
			del = append(del, i)
		}
	}
	return add, del
}
