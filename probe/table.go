package probe

import (
	"iter"
	"slices"

	"github.com/weftnet/weft/internal/hashindex"
)

// table keeps a record of type R for each peer, by key, for many thousands of peers at a small
// cost each: the records sit in one slice, where a peer keeps its slot while it stays (one
// gone frees its slot for the next to come), with an index of the slots by their keys (5 bytes
// a slot of its own, not a map's 30-odd a peer). Finding, adding and removing a peer cost the
// same however many there are, so that what an event costs grows with what it changed, not
// with the cluster.
//
// Its rotations (one for each of its users) walk the slots in order, from where they stopped,
// round and round: every peer there when a pass begins comes up within that pass, however many
// come and go meanwhile (a newcomer may take a slot behind the cursor and wait for the next
// pass). Keys must not be empty: an empty key marks a free slot.
type table[R any] struct {
	index hashindex.Index[string, int32] // one past the slot: 0 is no slot
	slots []slot[R]
	free  []int32        // free slots, reused last first
	next  [rotations]int // each rotation's next slot
}

// The table's rotations: the Prober's, through every peer, and its Transport's, through those
// it checks.
const (
	rotProber = iota
	rotTransport
	rotations
)

// slot is a peer's key (the caller's string, not copied) and record; a free one has no key.
type slot[R any] struct {
	key string
	rec R
}

// init makes the table ready; it must not be copied after.
func (t *table[R]) init() { t.index = t.newIndex() }

// newIndex returns an empty index of the table's slots.
func (t *table[R]) newIndex() hashindex.Index[string, int32] {
	return hashindex.New(hashindex.String, func(i int32) string { return t.slots[i-1].key })
}

// len is how many peers the table holds.
func (t *table[R]) len() int { return t.index.Len() }

// get returns the record of the peer k, nil when there is none. The pointer is good until
// the next add or remove.
func (t *table[R]) get(k string) *R {
	if i, ok := t.index.Get(k); ok {
		return &t.slots[i-1].rec
	}
	return nil
}

// put returns the record of the peer k, a zero one in a slot of its own if k had none, and
// whether it is new. The pointer is good until the next add or remove.
func (t *table[R]) put(k string) (*R, bool) {
	if r := t.get(k); r != nil {
		return r, false
	}
	var i int32
	if n := len(t.free); n > 0 {
		i, t.free = t.free[n-1], t.free[:n-1]
	} else {
		i = int32(len(t.slots))
		t.slots = append(t.slots, slot[R]{})
	}
	t.slots[i] = slot[R]{key: k}
	t.index.Put(i + 1)
	return &t.slots[i].rec, true
}

// reserveFor makes room at once for the peers of put it does not hold (a full resync's), so
// that the room grows to what they take rather than by doubling.
func (t *table[R]) reserveFor(put []Target) {
	n := 0
	for _, tg := range put {
		if t.get(tg.Key) == nil {
			n++
		}
	}
	t.index.Reserve(n)
	if more := n - len(t.free); more > 0 {
		t.slots = slices.Grow(t.slots, more)
	}
}

// remove forgets the peer k, returning its record, and whether it was there.
func (t *table[R]) remove(k string) (R, bool) {
	i, ok := t.index.Delete(k) // while the slot holds k, which the index reads
	if !ok {
		var zero R
		return zero, false
	}
	i--
	rec := t.slots[i].rec
	t.slots[i] = slot[R]{}
	t.free = append(t.free, i)
	t.compact()
	return rec, true
}

// compact moves the records into the front of a smaller slice once half the slots or more
// are free (and there are a few): the slice does not keep the room of a cluster that shrank.
// It costs a pass over the peers once per as many removals as peers remain. The rotation
// goes on from the first peer at or after where it was.
func (t *table[R]) compact() {
	if len(t.free) < 64 || 2*len(t.free) < len(t.slots) {
		return
	}
	slots := make([]slot[R], 0, t.index.Len())
	var next [rotations]int
	for r := range next {
		next[r] = -1
	}
	for i, s := range t.slots {
		if s.key == "" {
			continue
		}
		for r := range next {
			if next[r] < 0 && i >= t.next[r] {
				next[r] = len(slots)
			}
		}
		slots = append(slots, s)
	}
	for r := range next {
		next[r] = max(next[r], 0)
	}
	t.slots, t.free, t.next = slots, nil, next
	t.index = t.newIndex()
	t.index.Reserve(len(slots))
	for i := range slots {
		t.index.Put(int32(i + 1))
	}
}

// rotate returns the next peer of the rotation rot whose record in accepts (any, if in is
// nil), its key and record (good until the next add or remove); false when there is none.
// Peers that in refuses are passed over: their turn is spent.
func (t *table[R]) rotate(rot int, in func(*R) bool) (string, *R, bool) {
	if t.index.Len() == 0 {
		return "", nil, false
	}
	for range len(t.slots) {
		if t.next[rot] >= len(t.slots) {
			t.next[rot] = 0
		}
		i := t.next[rot]
		t.next[rot]++
		if t.slots[i].key != "" && (in == nil || in(&t.slots[i].rec)) {
			return t.slots[i].key, &t.slots[i].rec, true
		}
	}
	return "", nil, false
}

// all yields every peer's key and record, in slot order.
func (t *table[R]) all() iter.Seq2[string, *R] {
	return func(yield func(string, *R) bool) {
		for i := range t.slots {
			if t.slots[i].key != "" && !yield(t.slots[i].key, &t.slots[i].rec) {
				return
			}
		}
	}
}
