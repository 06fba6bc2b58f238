package linux

import (
	"iter"
	"net/netip"

	"github.com/weftnet/weft/backend"
)

// list is the entries of one kind that a Want or a plan holds, read by index: those given,
// then those that the layout of a peer table makes for its peers. A peer's entries are made
// when they are read, one peer at a time, so that a full Apply of tens of thousands of peers
// never holds them all (at 65,000 peers the four lists of them were 15 MiB of the cold
// start's peak). idx, when not nil, picks the entries at those indexes, in that order: a
// plan's subset of a Want's.
type list[T any] struct {
	given []T
	peers *peerTable
	of    func(layout, backend.Peer) (T, bool) // the peer's entry of this kind, if it has one
	idx   []int32
}

// listOf is a list of the entries s.
func listOf[T any](s []T) list[T] { return list[T]{given: s} }

// Len is the number of indexes of l, counting the peers that have no entry of its kind.
func (l list[T]) Len() int {
	if l.idx != nil {
		return len(l.idx)
	}
	return len(l.given) + l.peers.len()
}

// at is the entry at index i, and false for a peer that has none of l's kind.
func (l list[T]) at(i int) (T, bool) {
	if l.idx != nil {
		i = int(l.idx[i])
	}
	if i < len(l.given) {
		return l.given[i], true
	}
	return l.of(l.peers.l, l.peers.peer(i-len(l.given)))
}

// get is the entry at index i of a plan's list, which has no holes.
func (l list[T]) get(i int) T {
	e, _ := l.at(i)
	return e
}

// all yields the entries with their indexes, in order.
func (l list[T]) all() iter.Seq2[int, T] {
	return func(yield func(int, T) bool) {
		for i := range l.Len() {
			if e, ok := l.at(i); ok && !yield(i, e) {
				return
			}
		}
	}
}

// slice is the entries in a slice of their own, for reports and tests.
func (l list[T]) slice() []T {
	var out []T
	for _, e := range l.all() {
		out = append(out, e)
	}
	return out
}

// add appends e to a list of given entries (an incremental plan's).
func (l *list[T]) add(e T) { l.given = append(l.given, e) }

// subset is the entries of want at the indexes idx (ascending, none a hole): want itself
// when they are all of it, as at a cold start.
func subset[T any](want list[T], idx []int32) list[T] {
	if len(idx) == 0 {
		return list[T]{}
	}
	if len(idx) == want.Len() {
		return want
	}
	if want.idx != nil {
		for j, i := range idx {
			idx[j] = want.idx[i]
		}
	}
	want.idx = idx
	return want
}

// peerTable is the peers of a Want in an order that stays (a State's come from a map or a
// hash index, whose order may not), with the layout that makes their entries. IPv4 peers of
// the network's subnet length, all that the backends program today, take 14 bytes each;
// others are kept whole.
type peerTable struct {
	l     layout
	bits  int
	v4    []peer4
	other []backend.Peer
}

type peer4 struct {
	sn, ip [4]byte
	mac    backend.MAC
}

// newPeerTable tables peers, whose IPv4 subnets of bits bits it keeps compact.
func newPeerTable(l layout, bits int, peers backend.Peers) *peerTable {
	t := &peerTable{l: l, bits: bits, v4: make([]peer4, 0, peers.Len())}
	for _, p := range peers.All() {
		if p.Subnet.Addr().Is4() && p.Subnet.Bits() == bits && p.PublicIP.Is4() && p.WireGuard == nil {
			t.v4 = append(t.v4, peer4{sn: p.Subnet.Addr().As4(), ip: p.PublicIP.As4(), mac: p.VTEPMAC})
			continue
		}
		t.other = append(t.other, p)
	}
	return t
}

func (t *peerTable) len() int {
	if t == nil {
		return 0
	}
	return len(t.v4) + len(t.other)
}

// peer is the peer at index i.
func (t *peerTable) peer(i int) backend.Peer {
	if i < len(t.v4) {
		p := &t.v4[i]
		return backend.Peer{Subnet: netip.PrefixFrom(netip.AddrFrom4(p.sn), t.bits), PublicIP: netip.AddrFrom4(p.ip), VTEPMAC: p.mac}
	}
	return t.other[i-len(t.v4)]
}

// The kinds of entry of a peer, for a list's of.
func routeOf(l layout, p backend.Peer) (Route, bool)       { return l.route(p), true }
func nexthopOf(l layout, p backend.Peer) (Nexthop, bool)   { return l.nexthop(l.route(p)) }
func neighborOf(l layout, p backend.Peer) (Neighbor, bool) { return l.neighbor(p) }
func fdbOf(l layout, p backend.Peer) (FDBEntry, bool)      { return l.fdb(p) }
