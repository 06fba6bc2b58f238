package windows

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/weftnet/weft/backend"
)

// netModel is the plane's one model of its HNS network, both families': what the last look
// at HNS and the host found of the network, once (an L2Bridge network carries both
// families' subnets; an Overlay one IPv4's alone), and for each family what the plane
// programmed, as of the family's last full Apply and the writes since. An incremental Apply
// compares peer changes with it, so that it needs no listing.
type netModel struct {
	network   string // HNS network name
	networkID string
	overlay   bool
	vni       uint32
	macPrefix string
	ifs       []Interface // host-gw: the host's interfaces when last listed
	v4, v6    famModel
	// lent is a look at HNS and the host that one family's Prepare or full Apply took for
	// the other family too, which the other's next call of the same kind starts from
	// instead of looking again, if it comes within lendFor of the end of the call that lent
	// it: the daemon prepares and applies the two families back to back (at start, on the
	// resync, after drift), so that a dual-stack node looks at its one network once.
	// Borrowed that soon, it is as fresh as the lender's own look was by the end of its
	// writes. Every call drops it.
	lent *look
	// repair are the families whose models the other family's full Apply dropped, for the
	// Watch to tell of drift.
	repair []backend.Family
}

// famModel is what the plane programmed for one family's peers.
type famModel struct {
	valid bool // built by a full Apply of the family, on the network the model names
	own   netip.Prefix
	// peers is the subnet the plane programmed for each peer, by lease key: what an
	// incremental Apply takes away when a peer changes or leaves, whatever the change's
	// Old says.
	peers  map[string]netip.Prefix
	rsr    map[netip.Prefix]Policy    // RemoteSubnetRoute policies by destination, as HNS has them
	eps    map[netip.Addr]remoteEP    // remote endpoints by address
	routes map[netip.Prefix]HostRoute // host-gw routes by destination
}

// look is what a family's Prepare or full Apply found of the network for the other family.
type look struct {
	prepare bool           // taken by a Prepare; else by a full Apply
	fam     backend.Family // the family it is for
	network string         // the network's name
	subnets []netip.Prefix // the node's subnets the network was found (or made) to carry
	// routes are a full Apply's listing of the host's routes, those of the family's
	// scope: the other family writes none of them.
	routes []HostRoute
	until  time.Time // zero until the call that lent it ends
}

// lendFor is how long after the call that lent it a look may be borrowed.
const lendFor = time.Second

// remoteEP is a remote endpoint as the model keeps it: its ID, to delete it, and what it is
// compared by.
type remoteEP struct {
	id   string
	name string
	mac  backend.MAC
	pa   netip.Addr
}

// stateFamily is st's family; a State built by hand without one is IPv4's.
func stateFamily(st *backend.State) backend.Family {
	if st.Family == backend.IPv6 {
		return backend.IPv6
	}
	return backend.IPv4
}

// fam is the model of family f.
func (m *netModel) fam(f backend.Family) *famModel {
	if f == backend.IPv6 {
		return &m.v6
	}
	return &m.v4
}

// valid reports whether some family's full Apply built the model: the network it names is
// the one the plane programs.
func (m *netModel) valid() bool { return m.v4.valid || m.v6.valid }

// fits reports whether the model was made for st: the family's subnet, the same network and
// kind.
func (m *netModel) fits(st *backend.State) bool {
	f := m.fam(stateFamily(st))
	return f.valid && f.own == st.Own && m.network == networkName(st) && m.overlay == (st.Device != nil) &&
		(st.Device == nil || m.vni == st.Device.VNI) && m.macPrefix == macPrefix(st)
}

// adopt records the network a full Apply of st found or made, with its ID, and the host's
// interfaces. A network other than the model's (made again: the host's vNIC went with the
// old one, and the routes on it) leaves the other family nothing of what it programmed: its
// model is dropped, and the Watch tells it of drift.
func (m *netModel) adopt(st *backend.State, id string, ifs []Interface) {
	name, overlay, mp := networkName(st), st.Device != nil, macPrefix(st)
	var vni uint32
	if overlay {
		vni = st.Device.VNI
	}
	if m.network != name || !strings.EqualFold(m.networkID, id) || m.overlay != overlay || m.vni != vni || m.macPrefix != mp {
		other := stateFamily(st).Other()
		if o := m.fam(other); o.valid {
			*o = famModel{}
			if !slices.Contains(m.repair, other) {
				m.repair = append(m.repair, other)
			}
		}
	}
	m.network, m.networkID, m.overlay, m.vni, m.macPrefix, m.ifs = name, id, overlay, vni, mp, ifs
}

// newFamModel is an empty model of a family whose own subnet is own.
func newFamModel(own netip.Prefix) famModel {
	return famModel{own: own, peers: map[string]netip.Prefix{}, rsr: map[netip.Prefix]Policy{},
		eps: map[netip.Addr]remoteEP{}, routes: map[netip.Prefix]HostRoute{}}
}

// learnPeers records the subnet of each of st's peers as what the family programs for it.
func (f *famModel) learnPeers(st *backend.State) {
	for key, p := range st.Peers.All() {
		f.peers[key] = p.Subnet
	}
}

// borrow takes the look lent to st's family for a call of the kind (Prepare if prepare), if
// it was taken for st's network and subnets and its time is not up at now; nil if there is
// none. The lent look is gone either way.
func (m *netModel) borrow(st *backend.State, prepare bool, now time.Time) *look {
	l := m.lent
	m.lent = nil
	if l == nil || l.prepare != prepare || l.fam != stateFamily(st) || l.network != networkName(st) ||
		!slices.Equal(l.subnets, bridgeSubnets(st)) || !now.Before(l.until) {
		return nil
	}
	return l
}

// lend keeps l for the other family of a dual-stack st (for no one in a single-stack one),
// until seal dates it.
func (m *netModel) lend(st *backend.State, l *look) {
	if !st.Sibling.IsValid() || st.Device != nil {
		return
	}
	l.fam, l.network, l.subnets = stateFamily(st).Other(), networkName(st), bridgeSubnets(st)
	m.lent = l
}

// seal dates a look lent by the call that ends now: it may be borrowed for lendFor.
func (m *netModel) seal(now func() time.Time) {
	if m.lent != nil && m.lent.until.IsZero() {
		m.lent.until = now().Add(lendFor)
	}
}

// touched is what a batch of changes of family f touches, from the model: the subnets, in
// order and each once, that the model programmed for the changes' keys and that their News
// want; the key of the peer each is for (a New's before the model's); and the peers the
// changes want, by subnet. The model then holds the News as what it programs for their
// keys. A change's Old is not read: what was programmed is the model's to know.
func (f *famModel) touched(changes []backend.PeerChange) (sns []netip.Prefix, keys map[netip.Prefix]string, want map[netip.Prefix]backend.Peer) {
	keys, want = map[netip.Prefix]string{}, map[netip.Prefix]backend.Peer{}
	note := func(sn netip.Prefix, key string) {
		if _, ok := keys[sn]; !ok {
			sns = append(sns, sn)
			keys[sn] = key
		}
	}
	for _, c := range changes {
		if sn, ok := f.peers[c.Key]; ok {
			note(sn, c.Key)
		}
		if c.New.IsValid() {
			note(c.New.Subnet, c.Key)
		}
	}
	for _, c := range changes {
		if c.New.IsValid() {
			want[c.New.Subnet], keys[c.New.Subnet] = c.New, c.Key
			f.peers[c.Key] = c.New.Subnet
		} else {
			delete(f.peers, c.Key)
		}
	}
	return sns, keys, want
}
