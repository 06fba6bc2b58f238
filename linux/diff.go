package linux

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/weftnet/weft/backend"
)

// Changes counts what Reconcile wrote. A changed entry (same destination, new gateway or
// MAC) is replaced in place and counts as one addition.
type Changes struct {
	RoutesAdded, RoutesRemoved       int
	NeighborsAdded, NeighborsRemoved int
	FDBAdded, FDBRemoved             int
	AddrsAdded, AddrsRemoved         int
}

func (c Changes) String() string {
	return fmt.Sprintf("routes +%d -%d, neighbours +%d -%d, fdb +%d -%d, addresses +%d -%d",
		c.RoutesAdded, c.RoutesRemoved, c.NeighborsAdded, c.NeighborsRemoved,
		c.FDBAdded, c.FDBRemoved, c.AddrsAdded, c.AddrsRemoved)
}

// Route is a route to a peer's subnet.
type Route struct {
	Dst    netip.Prefix
	Gw     netip.Addr
	Dev    string // outgoing interface by name
	Onlink bool   // the gateway is reachable on Dev without a route to it (VXLAN)
}

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

// Want is a State in the kernel's terms: what flannel programs for each peer.
type Want struct {
	Device    string         // the VXLAN device; "" for host-gw
	Addrs     []netip.Prefix // the VXLAN device's
	Routes    []Route
	Neighbors []Neighbor
	FDB       []FDBEntry
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
}

// peerEntries are the kernel entries of one peer: a route, and for an overlay peer the
// neighbour and FDB entry its route relies on.
type peerEntries struct {
	route Route
	neigh *Neighbor
	fdb   *FDBEntry
}

// entriesOf is what flannel programs for p on a node whose overlay device is dev (empty for
// host-gw) and whose external interface is underlay.
func entriesOf(p backend.Peer, dev, underlay string) peerEntries {
	if !p.Overlay() {
		return peerEntries{route: Route{Dst: p.Subnet, Gw: p.PublicIP, Dev: underlay}}
	}
	vtep := p.VTEP()
	return peerEntries{
		route: Route{Dst: p.Subnet, Gw: vtep, Dev: dev, Onlink: true},
		neigh: &Neighbor{IP: vtep, MAC: p.VTEPMAC, Dev: dev},
		fdb:   &FDBEntry{MAC: p.VTEPMAC, Dst: p.PublicIP, Dev: dev},
	}
}

// WantOf translates st into the kernel's terms, and says which entries are ours.
func WantOf(st *backend.State) (Want, Ownership) {
	var w Want
	if st.Device != nil {
		w.Device = st.Device.Name
		w.Addrs = st.DeviceAddresses()
	}
	w.Routes = make([]Route, 0, len(st.Peers))
	for _, p := range st.Peers {
		e := entriesOf(p, w.Device, st.Underlay)
		w.Routes = append(w.Routes, e.route)
		if e.neigh != nil {
			w.Neighbors = append(w.Neighbors, *e.neigh)
			w.FDB = append(w.FDB, *e.fdb)
		}
	}
	own := Ownership{Networks: []netip.Prefix{st.Network()}, Devices: []string{st.Underlay}}
	if st.Own.IsValid() {
		own.Own = []netip.Prefix{st.Own}
	}
	return w, own
}

// kernelRoute is a main-table route as dumped. Dev is "" when the route has no single
// outgoing device (multipath, blackhole); such routes are never ours.
type kernelRoute struct {
	Route
	Metric      int
	ProtoKernel bool
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

// kernelState is what Reconcile dumped, in portable form, so the diff can be tested anywhere.
type kernelState struct {
	Routes    []kernelRoute
	Neighbors []kernelNeighbor
	FDB       []kernelFDB
	Addrs     []netip.Prefix // of the VXLAN device
}

// plan is what Reconcile must write: entries to add or replace, and the indexes (into the
// kernelState slices) of entries to delete. Indexes rather than values, so the delete can
// name the exact kernel entry (metric, protocol, scope) that was dumped.
type plan struct {
	SetRoutes    []Route
	DelRoutes    []int
	SetNeighbors []Neighbor
	DelNeighbors []int
	SetFDB       []FDBEntry
	DelFDB       []int
	AddAddrs     []netip.Prefix
	DelAddrs     []int
}

func (p plan) empty() bool {
	return len(p.SetRoutes)+len(p.DelRoutes)+len(p.SetNeighbors)+len(p.DelNeighbors)+
		len(p.SetFDB)+len(p.DelFDB)+len(p.AddAddrs)+len(p.DelAddrs) == 0
}

// diff computes what turns have into want, touching only what own allows.
func diff(want Want, have kernelState, own Ownership) plan {
	vx, addrs := want.Device, want.Addrs
	var p plan
	p.SetRoutes, p.DelRoutes = diffRoutes(want.Routes, have.Routes, routeOwner(want.Routes, vx, own))
	p.SetNeighbors, p.DelNeighbors = diffNeighbors(want.Neighbors, have.Neighbors, vx)
	p.SetFDB, p.DelFDB = diffFDB(want.FDB, have.FDB, vx)
	p.AddAddrs, p.DelAddrs = diffAddrs(addrs, have.Addrs, own.Networks)
	return p
}

// routeOwner returns the ownership test for routes: inside the cluster networks, not to our
// own subnet, not the kernel's, and either on the VXLAN device or through a gateway on a
// device we route peers through.
func routeOwner(want []Route, vx string, own Ownership) func(kernelRoute) bool {
	gwDevs := map[string]bool{}
	for _, d := range own.Devices {
		gwDevs[d] = true
	}
	for _, r := range want {
		gwDevs[r.Dev] = true
	}
	return func(r kernelRoute) bool {
		if r.ProtoKernel || r.Dev == "" || !within(r.Dst, own.Networks) || within(r.Dst, own.Own) {
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

func sameRoute(k kernelRoute, w Route) bool {
	return k.Dev == w.Dev && k.Gw == w.Gw && k.Onlink == w.Onlink && k.Metric == defaultMetric(w.Dst)
}

func diffRoutes(want []Route, have []kernelRoute, owned func(kernelRoute) bool) (set []Route, del []int) {
	byDst := map[netip.Prefix][]int{}
	for i, r := range have {
		if owned(r) {
			dst := r.Dst.Masked()
			byDst[dst] = append(byDst[dst], i)
		}
	}
	wanted := map[netip.Prefix]bool{}
	for _, w := range want {
		dst := w.Dst.Masked()
		if wanted[dst] {
			continue // one route per destination; the backend never asks for two
		}
		wanted[dst] = true
		cands := byDst[dst]
		keep := slices.IndexFunc(cands, func(i int) bool { return sameRoute(have[i], w) })
		if keep < 0 {
			set = append(set, w)
		}
		for j, i := range cands {
			// A replace overwrites the route of the default metric in place (no gap), so that
			// one must not be deleted after it: the delete would hit the new route.
			if j == keep || keep < 0 && have[i].Metric == defaultMetric(dst) {
				continue
			}
			del = append(del, i)
		}
	}
	for dst, cands := range byDst {
		if !wanted[dst] {
			del = append(del, cands...)
		}
	}
	slices.Sort(del)
	return set, del
}

type neighKey struct {
	dev string
	ip  netip.Addr
}

func diffNeighbors(want []Neighbor, have []kernelNeighbor, vx string) (set []Neighbor, del []int) {
	owned := map[neighKey]int{} // the kernel holds one neighbour per device and address
	for i, n := range have {
		if n.Dev == vx && n.Permanent {
			owned[neighKey{n.Dev, n.IP}] = i
		}
	}
	wanted := map[neighKey]bool{}
	for _, w := range want {
		k := neighKey{w.Dev, w.IP}
		wanted[k] = true
		if i, ok := owned[k]; ok && have[i].MAC == w.MAC {
			continue
		}
		set = append(set, w)
	}
	for k, i := range owned {
		if !wanted[k] {
			del = append(del, i)
		}
	}
	slices.Sort(del)
	return set, del
}

type fdbKey struct {
	dev string
	mac backend.MAC
}

// ownsFDB: permanent entries with a unicast destination. The all-zero MAC entries (flooding
// defaults) and learned entries are someone else's.
func ownsFDB(f kernelFDB, vx string) bool {
	return f.Dev == vx && f.Permanent && f.MAC != backend.MAC{} &&
		f.Dst.IsValid() && !f.Dst.IsUnspecified() && !f.Dst.IsMulticast()
}

func diffFDB(want []FDBEntry, have []kernelFDB, vx string) (set []FDBEntry, del []int) {
	owned := map[fdbKey][]int{}
	for i, f := range have {
		if ownsFDB(f, vx) {
			k := fdbKey{f.Dev, f.MAC}
			owned[k] = append(owned[k], i)
		}
	}
	wanted := map[fdbKey]bool{}
	for _, w := range want {
		k := fdbKey{w.Dev, w.MAC}
		if wanted[k] {
			continue // a unicast MAC has one destination; the kernel refuses to append a second
		}
		wanted[k] = true
		cands := owned[k]
		keep := slices.IndexFunc(cands, func(i int) bool { return have[i].Dst == w.Dst })
		if keep < 0 {
			set = append(set, w)
			keep = 0 // a replace rewrites the MAC's first destination in place
		}
		for j, i := range cands {
			if j != keep {
				del = append(del, i)
			}
		}
	}
	for k, cands := range owned {
		if !wanted[k] {
			del = append(del, cands...)
		}
	}
	slices.Sort(del)
	return set, del
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
