package probe

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// checkTable fails unless the table's index and slots agree: every indexed key in its slot,
// every keyed slot indexed, every other slot free once.
func checkTable[R any](t *testing.T, tb *table[R]) {
	t.Helper()
	for i := range tb.index.All() {
		k := tb.slots[i-1].key
		if r := tb.get(k); r != &tb.slots[i-1].rec {
			t.Fatalf("slot %d indexed, holding %q, which is found elsewhere", i-1, k)
		}
	}
	free := map[int32]bool{}
	for _, i := range tb.free {
		if free[i] || tb.slots[i].key != "" {
			t.Fatalf("free slot %d listed twice or holding %q", i, tb.slots[i].key)
		}
		free[i] = true
	}
	for i, s := range tb.slots {
		if s.key == "" && !free[int32(i)] || s.key != "" && tb.get(s.key) != &tb.slots[i].rec {
			t.Fatalf("slot %d (%q): not free and not indexed", i, s.key)
		}
	}
}

// TestTable: puts and removes at random against a map: the table holds what the map does,
// records kept while their peers stay, and it shrinks when most peers have gone.
func TestTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var tb table[int]
	tb.init()
	model := map[string]int{}
	for i := range 20000 {
		k := fmt.Sprintf("k%d", rng.IntN(2000))
		if rng.IntN(3) == 0 {
			_, had := model[k]
			got, ok := tb.remove(k)
			if ok != had || ok && got != model[k] {
				t.Fatalf("remove(%s) = %d, %v; the model has %d, %v", k, got, ok, model[k], had)
			}
			delete(model, k)
		} else {
			r, added := tb.put(k)
			if _, had := model[k]; added == had || !added && *r != model[k] {
				t.Fatalf("put(%s) = %d, new %v; the model has %v", k, *r, added, model[k])
			}
			*r = i
			model[k] = i
		}
		if i%1000 == 0 {
			checkTable(t, &tb)
		}
	}
	checkTable(t, &tb)
	if tb.len() != len(model) {
		t.Fatalf("len %d, the model %d", tb.len(), len(model))
	}
	for k, r := range tb.all() {
		if *r != model[k] {
			t.Fatalf("%s: %d, the model %d", k, *r, model[k])
		}
	}
	for k := range model {
		if r := tb.get(k); r == nil || *r != model[k] {
			t.Fatalf("get(%s) = %v, the model %d", k, r, model[k])
		}
		tb.remove(k)
	}
	checkTable(t, &tb)
	if tb.len() != 0 || len(tb.slots) > 128 {
		t.Errorf("emptied: %d peers in %d slots", tb.len(), len(tb.slots))
	}
	if _, _, ok := tb.rotate(rotProber, nil); ok {
		t.Error("an empty table's rotation gave a peer")
	}
}

// TestTableRotation: a pass of the rotation gives every peer there at its start once, and
// peers added and removed meanwhile (the table compacting on the way) take nothing from the
// others.
func TestTableRotation(t *testing.T) {
	var tb table[int]
	tb.init()
	for i := range 1000 {
		tb.put(fmt.Sprintf("k%04d", i))
	}
	// Half go: the table compacts, the rotation resumes where it was.
	for i := 0; i < 1000; i += 2 {
		tb.remove(fmt.Sprintf("k%04d", i))
	}
	checkTable(t, &tb)
	if len(tb.slots) != 500 {
		t.Fatalf("%d slots for 500 peers after half went", len(tb.slots))
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for pass := range 3 {
		present := map[string]bool{}
		for k := range tb.all() {
			present[k] = true
		}
		seen := map[string]int{}
		// A pass: as many turns as there are peers and newcomers ahead of the cursor, at
		// most; one peer comes and one goes each turn, outside the present set.
		for turn := 0; turn < 2*len(present) && len(seen) < len(present); turn++ {
			k, _, ok := tb.rotate(rotProber, nil)
			if !ok {
				t.Fatal("rotation ran dry")
			}
			if present[k] {
				seen[k]++
			}
			nk := fmt.Sprintf("new%d-%d", pass, turn)
			tb.put(nk)
			if turn > 0 {
				tb.remove(fmt.Sprintf("new%d-%d", pass, turn-1))
			}
			if rng.IntN(10) == 0 {
				checkTable(t, &tb)
			}
		}
		for k := range present {
			if seen[k] != 1 {
				t.Fatalf("pass %d: %s came up %d times", pass, k, seen[k])
			}
		}
	}
}
