// Package hashindex finds values by a key each of them carries, in an open-addressing hash
// table of the values alone (linear probing). A Go map keeps the key beside each value, in
// groups with control bytes, and costs 30 to 40 bytes an entry for a pointer by a string or
// an address; an Index of pointers costs 9 bytes a slot (the value and a byte of its hash),
// 12 to 24 an entry as it grows (3/8 to 3/4 full), and one of int32 5 a slot. weft indexes
// tens of thousands of peers several times over (by key, subnet, public IP, MAC), so that
// what an event costs grows with what it changed: each of those indexes is one of these.
package hashindex

import (
	"hash/maphash"
	"iter"
)

// Index holds values of type V by their keys of type K: one value a key (Put, Get, Delete),
// or several (Add, Values, Remove), which an Index does not mix. V's zero value is never
// held. The key of a value must not change while the Index holds it. The zero Index holds
// nothing and can be read, not filled: make one with New.
//
// Beside each slot a tag keeps 7 bits of its value's hash (0: empty), so that a probe
// reads a value, and its key (most often behind a pointer, a cache miss away), only where
// the tags match: about once a Get.
type Index[K comparable, V comparable] struct {
	hash  func(maphash.Seed, K) uint64
	key   func(V) K
	seed  maphash.Seed
	slots []V     // a power of two of them, or none
	tags  []uint8 // by slot: tagOf the value's hash, or 0 where the slot is empty
	n     int
}

// tagOf is a hash's tag: its top 7 bits, with the eighth set, never 0. The slot comes from
// the low bits: the two are independent.
func tagOf(h uint64) uint8 { return uint8(h>>57) | 0x80 }

// minSlots is the size of an Index's first table.
const minSlots = 8

// New returns an empty Index of the values whose keys key returns, hashed by hash (of the
// seed it is given: maphash.String, or maphash.Bytes of an array's bytes, which unlike
// maphash.Comparable need not move the key to the heap).
func New[K comparable, V comparable](hash func(maphash.Seed, K) uint64, key func(V) K) Index[K, V] {
	return Index[K, V]{hash: hash, key: key, seed: maphash.MakeSeed()}
}

// String hashes a string key: the hash New takes for an Index keyed by strings.
func String(seed maphash.Seed, k string) uint64 { return maphash.String(seed, k) }

// Len is the number of values held.
func (x *Index[K, V]) Len() int { return x.n }

// home is the slot where a probe for k starts.
func (x *Index[K, V]) home(k K) int { return int(x.hash(x.seed, k) & uint64(len(x.slots)-1)) }

// find returns the slot holding the value of k, or the empty slot where it would go, with
// k's tag, and whether it is there.
func (x *Index[K, V]) find(k K) (int, uint8, bool) {
	h := x.hash(x.seed, k)
	tag, mask := tagOf(h), len(x.slots)-1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		switch t := x.tags[i]; {
		case t == 0:
			return i, tag, false
		case t == tag && x.key(x.slots[i]) == k:
			return i, tag, true
		}
	}
}

// Get returns the value of key k, and whether there is one.
func (x *Index[K, V]) Get(k K) (V, bool) {
	var zero V
	if x.n == 0 {
		return zero, false
	}
	if i, _, ok := x.find(k); ok {
		return x.slots[i], true
	}
	return zero, false
}

// Put holds v, in place of the value of its key if there is one: that value is returned, and
// whether there was one. v must not be V's zero value.
func (x *Index[K, V]) Put(v V) (V, bool) {
	var zero V
	if v == zero {
		panic("hashindex: Put of the zero value, which marks an empty slot")
	}
	x.Reserve(1)
	i, tag, ok := x.find(x.key(v))
	old := x.slots[i]
	x.slots[i], x.tags[i] = v, tag
	if !ok {
		x.n++
	}
	return old, ok
}

// Delete removes the value of key k and returns it, and whether there was one.
func (x *Index[K, V]) Delete(k K) (V, bool) {
	var zero V
	if x.n == 0 {
		return zero, false
	}
	i, _, ok := x.find(k)
	if !ok {
		return zero, false
	}
	old := x.slots[i]
	x.deleteAt(i)
	return old, true
}

// Add holds v besides the values of its key already held. v must not be V's zero value.
func (x *Index[K, V]) Add(v V) {
	var zero V
	if v == zero {
		panic("hashindex: Add of the zero value, which marks an empty slot")
	}
	x.Reserve(1)
	h := x.hash(x.seed, x.key(v))
	mask := len(x.slots) - 1
	i := int(h) & mask
	for x.tags[i] != 0 {
		i = (i + 1) & mask
	}
	x.slots[i], x.tags[i] = v, tagOf(h)
	x.n++
}

// Values yields the values of key k. The Index must not change meanwhile.
func (x *Index[K, V]) Values(k K) iter.Seq[V] {
	return func(yield func(V) bool) {
		if x.n == 0 {
			return
		}
		h := x.hash(x.seed, k)
		tag, mask := tagOf(h), len(x.slots)-1
		for i := int(h) & mask; x.tags[i] != 0; i = (i + 1) & mask {
			if x.tags[i] == tag && x.key(x.slots[i]) == k && !yield(x.slots[i]) {
				return
			}
		}
	}
}

// Remove removes v, one of the values of its key, and reports whether it was held.
func (x *Index[K, V]) Remove(v V) bool {
	if x.n == 0 {
		return false
	}
	h := x.hash(x.seed, x.key(v))
	tag, mask := tagOf(h), len(x.slots)-1
	for i := int(h) & mask; x.tags[i] != 0; i = (i + 1) & mask {
		if x.tags[i] == tag && x.slots[i] == v {
			x.deleteAt(i)
			return true
		}
	}
	return false
}

// deleteAt empties the slot i.
func (x *Index[K, V]) deleteAt(i int) {
	var zero V
	x.slots[i], x.tags[i] = zero, 0
	x.n--
	// The values after the hole, up to the next empty slot, move back into it where their
	// probe passes it, so that no probe stops at the hole short of its value.
	mask := len(x.slots) - 1
	for j := (i + 1) & mask; x.tags[j] != 0; j = (j + 1) & mask {
		if h := x.home(x.key(x.slots[j])); (j-h)&mask >= (j-i)&mask {
			x.slots[i], x.tags[i] = x.slots[j], x.tags[j]
			x.slots[j], x.tags[j] = zero, 0
			i = j
		}
	}
	// A table an eighth full or less halves: an Index does not keep the room of many values
	// gone. It costs a pass over the values left once per as many deletions.
	if len(x.slots) > minSlots && 8*x.n <= len(x.slots) {
		x.resize(len(x.slots) / 2)
	}
}

// Reserve makes room for n more values, so that Puts of as many grow the table at most once
// beforehand, to what they take, rather than step by step.
func (x *Index[K, V]) Reserve(n int) {
	want := x.n + n
	if 4*want <= 3*len(x.slots) {
		return
	}
	size := max(len(x.slots), minSlots)
	for 4*want > 3*size {
		size *= 2
	}
	x.resize(size)
}

// resize moves the values into a table of size slots, a power of two that holds them.
func (x *Index[K, V]) resize(size int) {
	old, oldTags := x.slots, x.tags
	x.slots, x.tags = make([]V, size), make([]uint8, size)
	mask := size - 1
	for i, v := range old {
		if oldTags[i] == 0 {
			continue
		}
		// To the first empty slot from its home: the values of one key, when several,
		// are all kept.
		h := x.hash(x.seed, x.key(v))
		j := int(h) & mask
		for x.tags[j] != 0 {
			j = (j + 1) & mask
		}
		x.slots[j], x.tags[j] = v, oldTags[i]
	}
}

// All yields every value, in no order. The Index must not change meanwhile.
func (x *Index[K, V]) All() iter.Seq[V] {
	return func(yield func(V) bool) {
		for i, v := range x.slots {
			if x.tags[i] != 0 && !yield(v) {
				return
			}
		}
	}
}
