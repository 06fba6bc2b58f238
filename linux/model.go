package linux

import (
	"net/netip"
	"slices"
	"sync"

	"github.com/weftnet/weft/backend"
)

// model is what the plane programmed (or is programming): the State of its last Apply,
// indexed for the two questions asked of it: which kernel entries an incremental Apply
// writes, and whether a kernel notification is the echo of the plane's own writes or drift.
// It holds one Peer per peer and one MAC index entry per overlay peer.
type model struct {
	mu       sync.Mutex
	valid    bool // a full Apply set it up
	nexthops bool // routes go through nexthop objects
	dev      string
	underlay string
	network  netip.Prefix
	own      netip.Prefix
	// blackhole: the own subnet's blackhole route is the plane's (--ip-blackhole-route).
	blackhole bool
	bits      int // the length of peers' subnets
	addrs     []netip.Prefix
	// The peers, compact: IPv4 peers of the network's subnet length (all that the backend
	// programs today) in 16 bytes each, by subnet address; others whole.
	peers map[[4]byte]hop
	other map[netip.Prefix]backend.Peer
	// The overlay peers' VTEP MACs, for telling an FDB notification's MAC: the subnet
	// address of a compact peer (its hop holds the rest), else the whole subnet.
	macs      map[backend.MAC][4]byte
	otherMACs map[backend.MAC]netip.Prefix
	indexes   map[string]int // interface indexes by name, from the last full Apply
	nameOf    map[int]string
	devIndex  int
}

// reset makes the model st, before a full Apply writes it.
func (m *model) reset(st *backend.State, nexthops, blackhole bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.valid, m.nexthops, m.blackhole = true, nexthops, blackhole
	m.dev, m.underlay, m.network, m.own, m.bits = "", st.Underlay, st.Network(), st.Own, st.SubnetLen()
	if st.Device != nil {
		m.dev = st.Device.Name
	}
	m.addrs = st.DeviceAddresses()
	m.peers = refill(m.peers, st.Peers.Len())
	m.other = map[netip.Prefix]backend.Peer{}
	m.macs = refill(m.macs, st.Peers.Len())
	m.otherMACs = map[backend.MAC]netip.Prefix{}
	for _, p := range st.Peers.All() {
		m.learnLocked(p)
	}
}

// refill is m emptied to hold about n entries: cleared, keeping its tables, where it held
// between half and twice as many (a full Apply's model, made anew every time, was 6.8 MiB
// of garbage at 65,000 peers, at the drift watch's first comparison after a cold start: the
// start's second peak); else a new map made for n.
func refill[K comparable, V any](m map[K]V, n int) map[K]V {
	if m == nil || n < len(m)/2 || n > 2*len(m) {
		return make(map[K]V, n)
	}
	clear(m)
	return m
}

// hop is an IPv4 peer as the model keeps it.
type hop struct {
	ip  [4]byte
	mac backend.MAC
}

func (m *model) compact(sn netip.Prefix) bool { return sn.Addr().Is4() && sn.Bits() == m.bits }

func (m *model) put(p backend.Peer) {
	if m.compact(p.Subnet) && p.PublicIP.Is4() {
		m.peers[p.Subnet.Addr().As4()] = hop{ip: p.PublicIP.As4(), mac: p.VTEPMAC}
		return
	}
	m.other[p.Subnet] = p
}

func (m *model) get(sn netip.Prefix) (backend.Peer, bool) {
	if m.compact(sn) {
		if h, ok := m.peers[sn.Addr().As4()]; ok {
			return backend.Peer{Subnet: sn, PublicIP: netip.AddrFrom4(h.ip), VTEPMAC: h.mac}, true
		}
	}
	p, ok := m.other[sn]
	return p, ok
}

func (m *model) del(sn netip.Prefix) {
	if m.compact(sn) {
		delete(m.peers, sn.Addr().As4())
	}
	delete(m.other, sn)
}

// putMAC records that the overlay peer of subnet sn has the VTEP MAC mac.
func (m *model) putMAC(mac backend.MAC, sn netip.Prefix) {
	if m.compact(sn) {
		m.macs[mac] = sn.Addr().As4()
		return
	}
	m.otherMACs[mac] = sn
}

// subnetOf is the subnet of the overlay peer whose VTEP MAC is mac.
func (m *model) subnetOf(mac backend.MAC) (netip.Prefix, bool) {
	if a, ok := m.macs[mac]; ok {
		return netip.PrefixFrom(netip.AddrFrom4(a), m.bits), true
	}
	sn, ok := m.otherMACs[mac]
	return sn, ok
}

// delMAC forgets mac, if it is the VTEP MAC of the peer of subnet sn.
func (m *model) delMAC(mac backend.MAC, sn netip.Prefix) {
	if s, ok := m.subnetOf(mac); ok && s == sn {
		delete(m.macs, mac)
		delete(m.otherMACs, mac)
	}
}

// setIndexes records the interfaces a full Apply found.
func (m *model) setIndexes(index map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.indexes = index
	m.nameOf = make(map[int]string, len(index))
	for n, i := range index {
		m.nameOf[i] = n
	}
	m.devIndex = index[m.dev]
}

func (m *model) layoutLocked() layout {
	return layout{dev: m.dev, underlay: m.underlay, network: m.network, nexthops: m.nexthops}
}

// fits reports whether an incremental Apply of st can start from the model: the device,
// underlay and subnets are those of the last full Apply.
func (m *model) fits(st *backend.State) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	dev := ""
	if st.Device != nil {
		dev = st.Device.Name
	}
	return m.valid && m.indexes != nil && dev == m.dev && st.Underlay == m.underlay && st.Network() == m.network && st.Own == m.own
}

func (m *model) learnLocked(p backend.Peer) {
	if !p.IsValid() {
		return
	}
	m.put(p)
	if p.Overlay() {
		m.putMAC(p.VTEPMAC, p.Subnet)
	}
}

// change applies changes to the model and returns the plan that takes the kernel from what
// the model held to what it holds now. What was programmed comes from the model itself: a
// change's Old only names the subnet its key held. The subnets the changes touch are read
// before and after, forgetting every old subnet before learning any new one, so that peers
// that swap subnets or MACs in one batch end up as the State has them.
func (m *model) change(changes []backend.PeerChange) plan {
	m.mu.Lock()
	defer m.mu.Unlock()
	var touched []netip.Prefix
	seen := make(map[netip.Prefix]bool, 2*len(changes))
	for _, pc := range changes {
		for _, p := range [2]backend.Peer{pc.Old, pc.New} {
			if p.IsValid() && !seen[p.Subnet] {
				seen[p.Subnet] = true
				touched = append(touched, p.Subnet)
			}
		}
	}
	before := make([]backend.Peer, len(touched))
	for i, sn := range touched {
		before[i], _ = m.get(sn)
	}
	for _, pc := range changes {
		if !pc.Old.IsValid() {
			continue
		}
		if p, ok := m.get(pc.Old.Subnet); ok {
			m.del(p.Subnet)
			m.delMAC(p.VTEPMAC, p.Subnet)
		}
	}
	for _, pc := range changes {
		m.learnLocked(pc.New)
	}
	after := make([]backend.Peer, len(touched))
	for i, sn := range touched {
		after[i], _ = m.get(sn)
	}
	return m.layoutLocked().planPeers(before, after)
}

// links are the interface indexes by name as the last full Apply found them; the map is
// never changed once made.
func (m *model) links() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.indexes
}

// names are the interface names by index, for reading notifications; the map is never
// changed once made.
func (m *model) names() map[int]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nameOf
}

// deviceIndex is the overlay device's interface index; 0 for host-gw or before a full Apply.
func (m *model) deviceIndex() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dev == "" {
		return 0
	}
	return m.devIndex
}

// routeNote is a main-table route notification: Dev is "" for a route with no single device.
type routeNote struct {
	Del         bool
	Route       Route
	ProtoKernel bool
}

// unexpectedRoute reports whether a route notification is drift: one of the model's routes
// deleted or changed, or a route the plane would delete added. Echoes of the plane's own
// writes, and routes it does not own, are not.
func (m *model) unexpectedRoute(n routeNote) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.valid {
		return true
	}
	r := n.Route
	if r.Blackhole {
		// Only the own subnet's is ours, and only its deletion is drift: an added one is the
		// echo of the plane's own write or someone else's.
		return n.Del && m.blackhole && m.own.IsValid() && r.Dst.Masked() == m.own.Masked()
	}
	if n.ProtoKernel || !r.Dst.IsValid() || !within(r.Dst, []netip.Prefix{m.network}) || m.own.IsValid() && within(r.Dst, []netip.Prefix{m.own}) {
		return false
	}
	p, ours := m.get(r.Dst.Masked())
	matches := ours && r.Dev != "" && sameHop(m.layoutLocked().entriesOf(p).route, r)
	if n.Del {
		return matches
	}
	if ours {
		return !matches
	}
	// A route nobody asked for, on a device the plane owns gatewayed routes on.
	return r.Dev != "" && (r.Dev == m.dev && m.dev != "" || r.Gw.IsValid() && r.Dev == m.underlay)
}

// neighNote is a neighbour notification on the overlay device.
type neighNote struct {
	Del       bool
	IP        netip.Addr
	MAC       backend.MAC
	Permanent bool
}

// peerAt is the overlay peer whose VTEP address (its subnet's first address) is a.
func (m *model) peerAt(a netip.Addr) (backend.Peer, bool) {
	p, ok := m.get(netip.PrefixFrom(a, m.bits))
	return p, ok && p.Overlay() && p.VTEP() == a
}

func (m *model) unexpectedNeigh(n neighNote) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.valid {
		return true
	}
	p, ours := m.peerAt(n.IP)
	if n.Del {
		return ours
	}
	if !n.Permanent {
		// The kernel's own entries (incomplete, reachable, stale) never replace a permanent
		// one; they are not ours.
		return false
	}
	return !ours || p.VTEPMAC != n.MAC
}

// fdbNote is an FDB notification on the overlay device; Dst is invalid for entries with no
// destination (the flooding defaults, learned entries).
type fdbNote struct {
	Del       bool
	MAC       backend.MAC
	Dst       netip.Addr
	Permanent bool
}

func (m *model) unexpectedFDB(n fdbNote) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.valid {
		return true
	}
	sn, ours := m.subnetOf(n.MAC)
	p, _ := m.get(sn)
	matches := ours && p.PublicIP == n.Dst
	if n.Del {
		return matches
	}
	if matches {
		return false
	}
	return ownsFDB(kernelFDB{FDBEntry: FDBEntry{MAC: n.MAC, Dst: n.Dst, Dev: m.dev}, Permanent: n.Permanent}, m.dev)
}

// linkNote is a link notification.
type linkNote struct {
	Del  bool
	Name string
	Up   bool
}

// unexpectedLink: the overlay device or the underlay deleted or down.
func (m *model) unexpectedLink(n linkNote) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n.Name == "" || n.Name != m.dev && n.Name != m.underlay {
		return false
	}
	return !m.valid || n.Del || !n.Up
}

// addrNote is an address notification on the overlay device.
type addrNote struct {
	Del    bool
	Prefix netip.Prefix
}

func (m *model) unexpectedAddr(n addrNote) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.valid {
		return true
	}
	want := slices.Contains(m.addrs, n.Prefix)
	if n.Del {
		return want
	}
	return !want && within(netip.PrefixFrom(n.Prefix.Addr(), n.Prefix.Addr().BitLen()), []netip.Prefix{m.network})
}
