package hashindex

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// item is a value held by its key, as a Set's entries are.
type item struct {
	k [16]byte
	v int
}

func hash16(seed maphash.Seed, k [16]byte) uint64 { return maphash.Bytes(seed, k[:]) }

func newItems() Index[[16]byte, *item] {
	return New(hash16, func(it *item) [16]byte { return it.k })
}

// check fails unless x holds exactly model's values, each found by its key, and every value
// sits where a probe from its home reaches it without crossing an empty slot.
func check(t *testing.T, x *Index[[16]byte, *item], model map[[16]byte]*item) {
	t.Helper()
	if x.Len() != len(model) {
		t.Fatalf("Len() = %d, the model holds %d", x.Len(), len(model))
	}
	n := 0
	for v := range x.All() {
		if model[v.k] != v {
			t.Fatalf("holds %v, which the model does not", v.k)
		}
		n++
	}
	if n != len(model) {
		t.Fatalf("All yields %d values, the model holds %d", n, len(model))
	}
	for k, v := range model {
		if got, ok := x.Get(k); !ok || got != v {
			t.Fatalf("Get(%v) = %v, %v; want %v", k, got, ok, v)
		}
	}
	checkPlaces(t, x)
}

// checkPlaces fails unless every value is tagged with its hash's tag and sits where a probe
// from its home reaches it without crossing an empty slot, the table at most 3/4 full.
func checkPlaces(t *testing.T, x *Index[[16]byte, *item]) {
	t.Helper()
	mask := len(x.slots) - 1
	for i, v := range x.slots {
		if (v == nil) != (x.tags[i] == 0) {
			t.Fatalf("slot %d holds %v, tagged %#x", i, v, x.tags[i])
		}
		if v == nil {
			continue
		}
		if tag := tagOf(x.hash(x.seed, v.k)); x.tags[i] != tag {
			t.Fatalf("%v at slot %d tagged %#x, its hash's tag %#x", v.k, i, x.tags[i], tag)
		}
		for j := x.home(v.k); j != i; j = (j + 1) & mask {
			if x.slots[j] == nil {
				t.Fatalf("%v at slot %d, past an empty slot %d from its home", v.k, i, j)
			}
		}
	}
	if 4*x.n > 3*len(x.slots) {
		t.Fatalf("%d values in %d slots: more than 3/4 full", x.n, len(x.slots))
	}
}

// TestIndex: puts, replacements and deletions at random against a map (few keys, so that
// the probes' runs collide and deletions move values back): the Index holds what the map
// does, grows, and shrinks when most values are gone.
func TestIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	x := newItems()
	model := map[[16]byte]*item{}
	key := func() [16]byte { return [16]byte{10, byte(rng.IntN(8)), byte(rng.IntN(250))} }
	for i := range 60000 {
		// Phases: growing, churning, shrinking.
		del := rng.IntN(3) == 0
		switch {
		case i > 40000:
			del = rng.IntN(5) > 0
		case i < 10000:
			del = rng.IntN(8) == 0
		}
		k := key()
		if del {
			got, ok := x.Delete(k)
			if want, had := model[k]; ok != had || got != want {
				t.Fatalf("Delete(%v) = %v, %v; the model has %v, %v", k, got, ok, want, had)
			}
			delete(model, k)
		} else {
			v := &item{k: k, v: i}
			old, ok := x.Put(v)
			if want, had := model[k]; ok != had || old != want {
				t.Fatalf("Put(%v) replaced %v, %v; the model has %v, %v", k, old, ok, want, had)
			}
			model[k] = v
		}
		if i%500 == 0 {
			check(t, &x, model)
		}
		if i == 40000 && len(x.slots) < 1024 {
			t.Fatalf("%d values in %d slots", x.n, len(x.slots))
		}
	}
	check(t, &x, model)
	for k := range model {
		x.Delete(k)
	}
	check(t, &x, nil)
	if len(x.slots) > minSlots {
		t.Errorf("emptied: %d slots", len(x.slots))
	}
	if _, ok := x.Get([16]byte{1}); ok {
		t.Error("an empty Index found a value")
	}
}

// TestIndexMulti: Adds and Removes at random against a map of sets (few keys, many values
// each at times): Values yields what the map holds of a key, each value once, and the table
// keeps every value where its probe reaches it.
func TestIndexMulti(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	x := newItems()
	model := map[[16]byte]map[*item]bool{}
	var held []*item
	for i := range 30000 {
		if len(held) > 0 && (rng.IntN(3) == 0 || i > 20000 && rng.IntN(4) > 0) {
			j := rng.IntN(len(held))
			v := held[j]
			held[j] = held[len(held)-1]
			held = held[:len(held)-1]
			if !x.Remove(v) {
				t.Fatalf("Remove(%v) found nothing", v.k)
			}
			delete(model[v.k], v)
			if x.Remove(v) {
				t.Fatalf("Remove(%v) twice found it twice", v.k)
			}
		} else {
			v := &item{k: [16]byte{byte(rng.IntN(40))}, v: i}
			x.Add(v)
			held = append(held, v)
			if model[v.k] == nil {
				model[v.k] = map[*item]bool{}
			}
			model[v.k][v] = true
		}
		if i%300 != 0 {
			continue
		}
		for k, want := range model {
			got := map[*item]bool{}
			for v := range x.Values(k) {
				if got[v] || !want[v] {
					t.Fatalf("Values(%v) yields %d: twice, or not held", k, v.v)
				}
				got[v] = true
			}
			if len(got) != len(want) {
				t.Fatalf("Values(%v) yields %d values, %d held", k, len(got), len(want))
			}
		}
		if x.Len() != len(held) {
			t.Fatalf("Len() = %d, %d held", x.Len(), len(held))
		}
		checkPlaces(t, &x)
	}
}

// TestReserve: room reserved for n values takes n Puts without growing, at most 3/4 full.
func TestReserve(t *testing.T) {
	for _, n := range []int{1, 6, 7, 100, 20000} {
		x := newItems()
		x.Reserve(n)
		size := len(x.slots)
		for i := range n {
			x.Put(&item{k: [16]byte{byte(i), byte(i >> 8)}})
		}
		if len(x.slots) != size || 4*n > 3*size || n > 8 && 8*n <= 3*size {
			t.Errorf("%d values in %d slots, %d reserved", n, len(x.slots), size)
		}
	}
}

// TestIndexInt32: an Index of small numbers (slots of a slice, one up, since 0 marks an empty
// slot) by the strings the slice holds.
func TestIndexInt32(t *testing.T) {
	var keys []string
	x := New(String, func(i int32) string { return keys[i-1] })
	for i := range 1000 {
		keys = append(keys, fmt.Sprintf("k%d", i))
		x.Put(int32(len(keys)))
	}
	for i, k := range keys {
		if got, ok := x.Get(k); !ok || got != int32(i+1) {
			t.Fatalf("Get(%s) = %d, %v; want %d", k, got, ok, i+1)
		}
	}
	if _, ok := x.Get("absent"); ok {
		t.Error("found a key never put")
	}
}

// TestNoAllocations: finding, replacing and deleting values, in a table that need not grow,
// allocate nothing (the keys do not move to the heap to be hashed).
func TestNoAllocations(t *testing.T) {
	x := newItems()
	items := make([]*item, 1000)
	for i := range items {
		items[i] = &item{k: [16]byte{byte(i), byte(i >> 8), 1}}
		x.Put(items[i])
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		it := items[i%len(items)]
		i++
		if v, ok := x.Get(it.k); !ok || v != it {
			t.Fatal("lost a value")
		}
		x.Delete(it.k)
		x.Put(it)
	})
	if allocs != 0 {
		t.Errorf("%v allocations a Get, Delete and Put", allocs)
	}
}

// TestPutZero: the zero value, which marks an empty slot, cannot be held.
func TestPutZero(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Put(nil) did not panic")
		}
	}()
	x := newItems()
	x.Put(nil)
}

// BenchmarkGet: finding one of 20,000 values by a key of 16 bytes, in an Index and, beside
// it, in the map it replaces.
func BenchmarkGet(b *testing.B) {
	const n = 20000
	items := make([]*item, n)
	x := newItems()
	m := map[[16]byte]*item{}
	for i := range items {
		items[i] = &item{k: [16]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}}
		x.Put(items[i])
		m[items[i].k] = items[i]
	}
	rng := rand.New(rand.NewPCG(1, 1))
	order := make([][16]byte, 4096)
	for i := range order {
		order[i] = items[rng.IntN(n)].k
	}
	b.Run("index", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, ok := x.Get(order[i&4095]); !ok {
				b.Fatal("lost")
			}
			i++
		}
	})
	b.Run("map", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if m[order[i&4095]] == nil {
				b.Fatal("lost")
			}
			i++
		}
	})
}
