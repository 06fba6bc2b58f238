package backend

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"iter"
	"net/netip"
	"slices"
	"strings"

	"github.com/weftnet/weft/internal/hashindex"
	"github.com/weftnet/weft/subnet"
)

// Set is every peer lease the node knows and the State it programs for them, kept up to date
// one lease at a time: Put and Remove cost work proportional to the leases they touch (the
// lease and those that share a claim with it), whatever the size of the cluster.
//
// A usable lease claims its subnet, its public IP and (vxlan) its VTEP MAC. When two claim the
// same, the older (subnet.Lease.Created: the first there; then subnet order, then key order)
// is programmed and the other is skipped until the first goes away, so that a newcomer that
// copies a live node's address (a cloned VM, a misconfigured or hostile writer) cannot
// displace it; the node's own lease beats every peer. Every node decides the same.
type Set struct {
	b      *Backend
	st     *State
	own    subnet.Lease
	ownKey string // own.Key(), which every Put compares
	claim  ownClaims

	// Every lease but the own, by key, and the claims of usable leases: hash indexes of the
	// entries themselves, 8 bytes a slot, not maps that keep each key again beside it (20,000
	// leases: 11 to 21 bytes a lease each rather than 30 to 40).
	entries    hashindex.Index[string, *entry]
	on         int // entries programmed
	contesting int // entries whose self Skipped Contests: claims of the own lease's that come first
	// contestingMAC: those of them that claim the own VTEP MAC (and no more of the own
	// lease than that).
	contestingMAC int
	// The claims' subnets all have the config's length, so the first address names one.
	// Addresses are keyed by their 16 bytes (addrKey).
	bySubnet claims[[16]byte]
	byIP     claims[[16]byte]
	byMAC    claims[MAC]
	byKey    claims[Key]
}

// claims indexes one kind of claim: the entries claiming each value, in an index holding them
// all (almost always one a value), so that the index costs one slot per lease and no
// allocation of its own, and an entry no link to the next claimant of each kind.
type claims[K comparable] struct {
	of func(*entry) K // the value an entry claims
	m  hashindex.Index[K, *entry]
}

func newClaims[K comparable](hash func(maphash.Seed, K) uint64, of func(*entry) K) claims[K] {
	return claims[K]{of: of, m: hashindex.New(hash, of)}
}

// The hashes of the claims' values, their bytes (maphash.Comparable would move each value to
// the heap to hash it).
func hashAddr(seed maphash.Seed, k [16]byte) uint64 { return maphash.Bytes(seed, k[:]) }
func hashMAC(seed maphash.Seed, k MAC) uint64       { return maphash.Bytes(seed, k[:]) }
func hashKey(seed maphash.Seed, k Key) uint64       { return maphash.Bytes(seed, k[:]) }

// add makes e a claimant of what it claims; every claimant of that is touched.
func (c *claims[K]) add(e *entry, touched *touchList) {
	c.m.Add(e)
	for o := range c.m.Values(c.of(e)) {
		touched.add(o)
	}
}

// drop takes e out of the claimants of what it claims; the others are touched.
func (c *claims[K]) drop(e *entry, touched *touchList) {
	c.m.Remove(e)
	for o := range c.m.Values(c.of(e)) {
		touched.add(o)
	}
}

// addrKey is an address as a claim's key: its 16 bytes, which hash as they are. Within a Set it
// names one address: the Set's addresses are all of its family and have no zone (translate).
func addrKey(a netip.Addr) [16]byte { return a.As16() }

// first is the claimant that wins what e, one of them, claims.
func (c *claims[K]) first(e *entry) *entry {
	w := e
	for o := range c.m.Values(c.of(e)) {
		if before(o, w) < 0 {
			w = o
		}
	}
	return w
}

// entry is one lease as the Set keeps it: no raw datastore value, only what the decisions
// and /status need. Its candidate is kept flat, the peer's addresses by their 16 bytes: a
// netip value carries a pointer and padding beside them, and a candidate kept whole made an
// entry of 144 bytes, not 112 (65,000 leases: 2 MiB). A Set's addresses have no zone
// (translate skips a public IP with one, whose zone /status then does not show).
type entry struct {
	key     string
	created int64      // subnet.Lease.Created: the claim's age
	sn, ip  [16]byte   // the candidate's subnet address and public IP (addrKey)
	more    *entryMore // what few entries have; nil for one that has none of it (rare, setSkip)
	vtep    MAC        // the candidate's peer's VTEPMAC
	mac     MAC        // the VTEP MAC it claims (candidate.mac)
	bits    uint8      // of the subnet
	addrs   uint8      // which of sn and ip are valid, and IPv4 (the addr flags)
	claimed bool       // registered in the claim indexes
	on      bool       // programmed: its peer is in the State
}

// entryMore is what an entry holds only in a WireGuard network or when it is skipped: kept
// apart, the entries of a VXLAN or host-gw network's usable leases, nearly all of them, take
// the allocator's 80-byte class rather than 112 (65,000 leases: 2 MiB). Each entry has its own.
type entryMore struct {
	wg   *WireGuardPeer
	skip *Skipped // the candidate's: why translate rules it out
	self *Skipped // why translate or the own lease rule it out; nil if usable
	lost *Skipped // why it lost a claim to another peer; nil if it did not
	said *Skipped // the skip last reported in a Result, so that each is reported once
}

// rare is what e holds apart (entryMore), zero if nothing.
func (e *entry) rare() entryMore {
	if e.more == nil {
		return entryMore{}
	}
	return *e.more
}

// The skips of an entry that change after it is made (entryMore's self, lost and said).
type skipField uint8

const (
	selfField skipField = iota
	lostField
	saidField
)

// setSkip sets one of e's skips to v, making e.more for it if need be and dropping it once it
// holds nothing.
func (e *entry) setSkip(f skipField, v *Skipped) {
	if e.more == nil {
		if v == nil {
			return
		}
		e.more = new(entryMore)
	}
	switch f {
	case selfField:
		e.more.self = v
	case lostField:
		e.more.lost = v
	case saidField:
		e.more.said = v
	}
	if *e.more == (entryMore{}) {
		e.more = nil
	}
}

// The flags of entry.addrs.
const (
	snValid = 1 << iota
	sn4
	ipValid
	ip4
)

// newEntry is the entry of the lease key, of age created, that translate made c of.
func newEntry(key string, created int64, c candidate) *entry {
	p := c.peer
	e := &entry{key: key, created: created, sn: addrKey(p.Subnet.Addr()), ip: addrKey(p.PublicIP),
		vtep: p.VTEPMAC, mac: c.mac, bits: uint8(max(p.Subnet.Bits(), 0))}
	if p.WireGuard != nil || c.skip != nil {
		e.more = &entryMore{wg: p.WireGuard, skip: c.skip}
	}
	for _, f := range [...]struct {
		a           netip.Addr
		valid, four uint8
	}{{p.Subnet.Addr(), snValid, sn4}, {p.PublicIP, ipValid, ip4}} {
		if f.a.IsValid() {
			e.addrs |= f.valid
		}
		if f.a.Is4() {
			e.addrs |= f.four
		}
	}
	return e
}

// addrOf is an address kept by its 16 bytes, under flags valid and four of entry.addrs.
func (e *entry) addrOf(b [16]byte, valid, four uint8) netip.Addr {
	switch {
	case e.addrs&valid == 0:
		return netip.Addr{}
	case e.addrs&four != 0:
		return netip.AddrFrom16(b).Unmap()
	}
	return netip.AddrFrom16(b)
}

// peer is what the entry programs when it is on.
func (e *entry) peer() Peer {
	return Peer{Subnet: e.subnet(), PublicIP: e.publicIP(), VTEPMAC: e.vtep, WireGuard: e.rare().wg}
}

// subnet is the subnet the lease claims. It reads only what an entry never changes, as
// publicIP does: a Snapshot's reader may call both while the Set's owner changes e.more.
func (e *entry) subnet() netip.Prefix {
	if e.addrs&snValid == 0 {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(e.addrOf(e.sn, snValid, sn4), int(e.bits))
}

// publicIP is the public IP the lease claims.
func (e *entry) publicIP() netip.Addr { return e.addrOf(e.ip, ipValid, ip4) }

// candidate is the candidate the entry was made of.
func (e *entry) candidate() candidate {
	return candidate{peer: e.peer(), mac: e.mac, skip: e.rare().skip}
}

// wgKey is the WireGuard public key the entry claims (candidate.key).
func (e *entry) wgKey() Key {
	wg := e.rare().wg
	if wg == nil {
		return Key{}
	}
	return wg.Key
}

// skipped is why the entry is not programmed, or nil.
func (e *entry) skipped() *Skipped {
	m := e.rare()
	if m.self != nil {
		return m.self
	}
	return m.lost
}

// NewSet returns an empty Set for a node holding own.
func NewSet(b *Backend, own subnet.Lease, masquerade bool) *Set {
	s := &Set{b: b, entries: hashindex.New(hashindex.String, func(e *entry) string { return e.key }),
		bySubnet: newClaims(hashAddr, func(e *entry) [16]byte { return e.sn }),
		byIP:     newClaims(hashAddr, func(e *entry) [16]byte { return e.ip }),
		byMAC:    newClaims(hashMAC, func(e *entry) MAC { return e.mac }),
		byKey:    newClaims(hashKey, func(e *entry) Key { return e.wgKey() })}
	s.st = b.StateFor(own, masquerade)
	s.st.Peers = programmed{s}
	s.own, s.ownKey, s.claim = own, own.Key(), b.ownClaims(own)
	return s
}

// State is the desired State. It is the Set's own: it changes with every Put, Remove and
// SetOwn, so a caller reads it between those calls only.
func (s *Set) State() *State { return s.st }

// Len is the number of peer leases known, usable or not.
func (s *Set) Len() int { return s.entries.Len() }

// entry is the lease key's entry, nil if there is none.
func (s *Set) entry(key string) *entry {
	e, _ := s.entries.Get(key)
	return e
}

// Result is what a change of the Set means for the data plane and the operator. One Result
// may gather several Puts and Removes (a burst of events is one Apply).
type Result struct {
	// Changes are the peers whose programmed entries changed, one per key: from what was
	// programmed before the first of the gathered calls to what the last one left.
	Changes []PeerChange
	// Skipped are leases newly skipped, or skipped for a new reason: each is logged once.
	Skipped []Skipped
	// Full says that the changes need not be recorded: the next Apply is a full one, which
	// looks at every peer. At start-up that saves a change of each of tens of thousands of
	// peers (200 bytes each) that nothing would read.
	Full bool

	index map[string]int // of Changes, by key
}

// change records that key's peer went from old to new.
func (r *Result) change(key string, old, new Peer) {
	if r.Full {
		return
	}
	if i, ok := r.index[key]; ok {
		r.Changes[i].New = new
		return
	}
	if r.index == nil {
		r.index = map[string]int{}
	}
	r.index[key] = len(r.Changes)
	r.Changes = append(r.Changes, PeerChange{Key: key, Old: old, New: new})
}

// Put adds or replaces a peer lease (the own lease's key is ignored: see SetOwn).
func (s *Set) Put(l subnet.Lease, r *Result) { s.PutKeyed(l.Key(), l, r) }

// PutKeyed is Put of a lease whose key, l.Key(), the caller holds already: the Set keeps
// that string.
func (s *Set) PutKeyed(key string, l subnet.Lease, r *Result) {
	if key == s.ownKey {
		return
	}
	var touched touchList
	e := newEntry(key, l.Created, s.b.translate(key, l))
	old := s.entry(key)
	if skip := e.rare().skip; old != nil && old.on && skip != nil && unreadable(skip.Code) {
		// A programmed peer's new value that cannot be read keeps what it programmed, as
		// flanneld does (it skips such an event): flanneld.exe republishes its lease without a
		// VtepMAC on every start until HNS has its network again, and a peer dropped then is
		// cut off until the good value returns.
		if said := old.rare().said; said == nil || *said != *skip {
			kept := *skip
			kept.Reason += "; its last good value stays programmed"
			r.Skipped = append(r.Skipped, kept)
			old.setSkip(saidField, skip)
		}
		return
	}
	if old != nil {
		s.unclaim(old, &touched)
		e.setSkip(saidField, old.rare().said)
		if old.on {
			s.on--
		}
		s.setSelf(old, nil)
	}
	s.entries.Put(e)
	s.settle(e, &touched)
	s.resolve(touched, r, old)
}

// unreadable reports whether a skip says the lease's value cannot be read (its backend data
// or public IP), rather than that it clashes or does not belong to this network.
func unreadable(code string) bool { return code == SkipBadData || code == SkipBadPublicIP }

// Remove drops the lease key.
func (s *Set) Remove(key string, r *Result) {
	e := s.entry(key)
	if e == nil {
		return
	}
	var touched touchList
	s.unclaim(e, &touched)
	s.setSelf(e, nil)
	s.entries.Delete(key)
	if e.on {
		s.on--
		r.change(key, e.peer(), Peer{})
	}
	s.resolve(touched, r, nil)
}

// SetOwn changes the node's own lease (a renewal that moved it, a new VTEP MAC): every lease
// is weighed again, and r gets the peers that changed. The State's Own and Sibling follow
// own; no PeerChange carries them, so a plane that built on the old ones must be told
// otherwise (the daemon makes its next Apply a full one).
func (s *Set) SetOwn(own subnet.Lease, r *Result) {
	s.own, s.ownKey, s.claim = own, own.Key(), s.b.ownClaims(own)
	s.st.Own, s.st.Sibling = s.b.fam.Subnet(own), s.b.sibling(own)
	if e := s.entry(s.ownKey); e != nil { // a peer lease that is now our own
		s.Remove(e.key, r)
	}
	all := touchList(slices.Collect(s.entries.All()))
	for _, e := range all {
		s.unclaim(e, nil)
	}
	for _, e := range all {
		s.settle(e, nil)
	}
	s.resolve(all, r, nil)
}

// touchList is the entries a change may have changed the fate of: a handful, since they
// share a claim with the changed lease.
type touchList []*entry

// add adds e unless it is there; a nil list takes nothing (SetOwn weighs every entry).
func (t *touchList) add(e *entry) {
	if t != nil && !slices.Contains(*t, e) {
		*t = append(*t, e)
	}
}

// settle decides whether e passes the own lease's rule and, if usable, registers its claims;
// the entries sharing a claim with it are added to touched.
func (s *Set) settle(e *entry, touched *touchList) {
	touched.add(e)
	self := e.rare().skip
	if self == nil {
		self = s.claim.against(e.key, e.candidate(), e.created)
	}
	s.setSelf(e, self)
	if self != nil {
		return
	}
	e.claimed = true
	s.bySubnet.add(e, touched)
	s.byIP.add(e, touched)
	if e.mac != (MAC{}) {
		s.byMAC.add(e, touched)
	}
	if !e.wgKey().IsZero() {
		s.byKey.add(e, touched)
	}
}

// setSelf sets e.self, keeping the counts of contesting entries.
func (s *Set) setSelf(e *entry, self *Skipped) {
	if was := e.rare().self; was != nil && was.Contests {
		s.contesting--
		if was.Code == SkipDuplicateMAC {
			s.contestingMAC--
		}
	}
	e.setSkip(selfField, self)
	if self != nil && self.Contests {
		s.contesting++
		if self.Code == SkipDuplicateMAC {
			s.contestingMAC++
		}
	}
}

// Contesting is how many peer leases claim the own lease's subnet, public IP or VTEP MAC and
// come before it (claimOrder: older, or as old and of a lower subnet): this node is the
// newcomer to those claims.
func (s *Set) Contesting() int { return s.contesting }

// MACContested reports whether a peer lease that comes before the own one (claimOrder)
// claims the own lease's VTEP MAC (and neither its subnet nor its public IP, which are
// checked first): every node programs that lease and skips this node's, which a new MAC of
// the node's own device would end.
func (s *Set) MACContested() bool { return s.contestingMAC > 0 }

// unclaim takes e out of the claim indexes; the entries that shared a claim with it are
// added to touched.
func (s *Set) unclaim(e *entry, touched *touchList) {
	if !e.claimed {
		return
	}
	e.claimed = false
	s.bySubnet.drop(e, touched)
	s.byIP.drop(e, touched)
	if e.mac != (MAC{}) {
		s.byMAC.drop(e, touched)
	}
	if !e.wgKey().IsZero() {
		s.byKey.drop(e, touched)
	}
}

// before orders the claimants of one thing: the first wins. The older claim comes first (an
// unknown age counts as the newest), then subnet order, then key order.
func before(a, b *entry) int {
	return claimOrder(a.created, b.created, a.peer().Subnet.Addr(), b.peer().Subnet.Addr(), a.key, b.key)
}

// claimOrder orders two leases that claim one thing, the one that keeps it first: the older
// (age), then the lower subnet address, then the lower key. Every node orders them the same,
// the node whose lease one of them is too.
func claimOrder(aCreated, bCreated int64, aSubnet, bSubnet netip.Addr, aKey, bKey string) int {
	return cmp.Or(age(aCreated, bCreated), aSubnet.Compare(bSubnet), strings.Compare(aKey, bKey))
}

// age compares two Created values, zero (unknown) last.
func age(a, b int64) int {
	switch {
	case a == b:
		return 0
	case a == 0:
		return 1
	case b == 0:
		return -1
	}
	return cmp.Compare(a, b)
}

// rival says why e loses one of its claims to another entry, or nil when it wins them all.
func (s *Set) rival(e *entry) *Skipped {
	p := e.peer()
	if w := s.bySubnet.first(e); w != e {
		return &Skipped{Key: e.key, Family: s.b.fam, Code: SkipOverlapsPeer, ClashesWith: w.key,
			Reason: fmt.Sprintf("subnet %s is also claimed by %s", p.Subnet, w.key)}
	}
	if w := s.byIP.first(e); w != e {
		return &Skipped{Key: e.key, Family: s.b.fam, Code: SkipDuplicateIP, ClashesWith: w.key,
			Reason: fmt.Sprintf("public IP %s is also claimed by %s", p.PublicIP, w.key)}
	}
	if e.mac != (MAC{}) {
		if w := s.byMAC.first(e); w != e {
			return &Skipped{Key: e.key, Family: s.b.fam, Code: SkipDuplicateMAC, ClashesWith: w.key,
				Reason: fmt.Sprintf("VtepMAC %s is also used by %s", e.mac, w.key)}
		}
	}
	if !e.wgKey().IsZero() {
		if w := s.byKey.first(e); w != e {
			return &Skipped{Key: e.key, Family: s.b.fam, Code: SkipDuplicateKey, ClashesWith: w.key,
				Reason: fmt.Sprintf("WireGuard public key %s is also used by %s", e.wgKey(), w.key)}
		}
	}
	return nil
}

// resolve decides, for every touched entry, whether it is programmed, and records what
// changed in r. replaced, if not nil, is the entry a Put just replaced: what it programmed is
// what its successor's change starts from.
func (s *Set) resolve(touched touchList, r *Result, replaced *entry) {
	// In key order, so that a Result is the same whatever the order of the Set's maps.
	slices.SortFunc(touched, func(a, b *entry) int { return strings.Compare(a.key, b.key) })
	for _, e := range touched {
		if s.entry(e.key) != e {
			continue // replaced or removed meanwhile
		}
		var lost *Skipped
		if e.rare().self == nil {
			lost = s.rival(e)
		}
		e.setSkip(lostField, lost)
		now := e.skipped()
		if said := e.rare().said; now != nil && (said == nil || *said != *now) {
			r.Skipped = append(r.Skipped, *now)
		}
		e.setSkip(saidField, now)
		had, old := e.on, e.peer()
		if replaced != nil && replaced.key == e.key {
			had, old = replaced.on, replaced.peer()
		}
		if !had {
			old = Peer{}
		}
		switch {
		case now == nil:
			if !e.on {
				e.on = true
				s.on++
			}
			if p := e.peer(); !had || !old.Equal(p) {
				r.change(e.key, old, p)
			}
		case e.on:
			e.on = false
			s.on--
			r.change(e.key, old, Peer{})
		case had: // the replaced entry was programmed, its successor is not
			r.change(e.key, old, Peer{})
		}
	}
}

// programmed is the State's view of a Set: the peers of the entries that are on.
type programmed struct{ s *Set }

func (p programmed) Len() int { return p.s.on }

func (p programmed) All() iter.Seq2[string, Peer] {
	return func(yield func(string, Peer) bool) {
		for e := range p.s.entries.All() {
			if e.on && !yield(e.key, e.peer()) {
				return
			}
		}
	}
}

// PeerInfo is one peer lease as /status shows it.
type PeerInfo struct {
	Key         string
	Subnet      netip.Prefix
	PublicIP    netip.Addr
	BackendType string
	VTEPMAC     MAC // zero when not known
	Skipped     *Skipped
}

// Peers lists every peer lease in subnet order, built when asked: nothing per peer is kept
// for it.
func (s *Set) Peers() []PeerInfo { return s.Snapshot().Peers() }

// Snapshot is the peer leases of a Set at one moment, which other goroutines may read while
// the Set's owner changes the Set: Set.Snapshot costs a slice of two pointers a lease. It
// shares what a Set never changes of a lease once put (its key, MAC, subnet and public IP; a
// new value is a new entry) and copies the rest, whether and why the lease is skipped
// (Skipped values are never changed either). It must not read e.more, which the owner
// rewrites in place (setSkip).
type Snapshot struct {
	peers []snapPeer
	typ   string // the node's backend type: every lease's but those skipped for theirs
}

type snapPeer struct {
	e       *entry
	skipped *Skipped
}

// Snapshot takes a Snapshot of s.
func (s *Set) Snapshot() Snapshot {
	peers := make([]snapPeer, 0, s.entries.Len())
	for e := range s.entries.All() {
		peers = append(peers, snapPeer{e: e, skipped: e.skipped()})
	}
	return Snapshot{peers: peers, typ: s.b.Type()}
}

// Len is the number of peer leases, usable or not.
func (sn Snapshot) Len() int { return len(sn.peers) }

// All yields every peer lease, in no order.
func (sn Snapshot) All() iter.Seq[PeerInfo] {
	return func(yield func(PeerInfo) bool) {
		for _, p := range sn.peers {
			e := p.e
			typ := sn.typ
			// Only translate skips for the backend type, and a lease translate skips is
			// skipped for that (settle), so the copied skip tells the lease's type.
			if p.skipped != nil && p.skipped.Code == SkipBackendType {
				typ = p.skipped.typ
			}
			if !yield(PeerInfo{Key: e.key, Subnet: e.subnet(), PublicIP: e.publicIP(),
				BackendType: typ, VTEPMAC: e.mac, Skipped: p.skipped}) {
				return
			}
		}
	}
}

// Peers lists every peer lease in subnet order, then key order.
func (sn Snapshot) Peers() []PeerInfo {
	out := make([]PeerInfo, 0, len(sn.peers))
	for p := range sn.All() {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b PeerInfo) int {
		return cmp.Or(a.Subnet.Addr().Compare(b.Subnet.Addr()), strings.Compare(a.Key, b.Key))
	})
	return out
}

// Desired is the State for own and every lease in leases (own among them or not), with the
// leases skipped: what a Set holds after putting them all.
func Desired(b *Backend, own subnet.Lease, leases []subnet.Lease, masquerade bool) (*State, []Skipped) {
	s := NewSet(b, own, masquerade)
	var r Result
	for _, l := range leases {
		s.Put(l, &r)
	}
	var skipped []Skipped
	for _, p := range s.Peers() {
		if p.Skipped != nil {
			skipped = append(skipped, *p.Skipped)
		}
	}
	return s.st, skipped
}
