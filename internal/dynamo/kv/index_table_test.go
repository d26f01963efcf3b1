package kv

import (
	"math/rand/v2"
	"testing"
)

// TestTablesAgainstMaps runs random inserts and removals through both
// tables and compares them with maps. The edge table's path hashes are small
// numbers here, so they all start at slot 0: probes run long and removals
// shift many slots back.
func TestTablesAgainstMaps(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	var bt blockTable
	bt.init(minTableLog, 0)
	var et edgeTable
	et.init(minTableLog)
	bm := map[uint64]int32{}
	type edge struct {
		path   uint64
		parent int32
	}
	em := map[edge]int32{}
	for step := range 200000 {
		h := uint64(rnd.IntN(3000))
		e := edge{uint64(rnd.IntN(500)), int32(rnd.IntN(3))}
		if rnd.IntN(2) == 0 {
			if i, ok := bt.find(h); ok {
				bt.remove(i)
				delete(bm, h)
			} else {
				bt.insert(i, blockSlot{hash: h, node: int32(step + 1)})
				bm[h] = int32(step + 1)
			}
		} else {
			if i, ok := et.find(e.path, e.parent); ok {
				et.remove(i)
				delete(em, e)
			} else {
				et.insert(i, edgeSlot{path: e.path, parent: e.parent, node: int32(step + 1)})
				em[e] = int32(step + 1)
			}
		}
		if step%5000 != 0 {
			continue
		}
		if bt.n != len(bm) || et.n != len(em) {
			t.Fatalf("step %d: sizes %d %d, want %d %d", step, bt.n, et.n, len(bm), len(em))
		}
		for h, n := range bm {
			if i, ok := bt.find(h); !ok || bt.slots[i].node != n {
				t.Fatalf("step %d: block %d lost", step, h)
			}
		}
		for e, n := range em {
			if i, ok := et.find(e.path, e.parent); !ok || et.slots[i].node != n {
				t.Fatalf("step %d: edge %v lost", step, e)
			}
		}
		for _, s := range bt.slots {
			if _, ok := bm[s.hash]; s.node != 0 && !ok {
				t.Fatalf("step %d: block %d kept after its removal", step, s.hash)
			}
		}
	}
	// Emptied, the tables shrink back, and stay whole on the way.
	for h := range bm {
		i, ok := bt.find(h)
		if !ok {
			t.Fatalf("block %d lost while shrinking", h)
		}
		bt.remove(i)
	}
	for e := range em {
		i, ok := et.find(e.path, e.parent)
		if !ok {
			t.Fatalf("edge %v lost while shrinking", e)
		}
		et.remove(i)
	}
	if bt.n != 0 || et.n != 0 || len(bt.slots) != 1<<minTableLog || len(et.slots) != 1<<minTableLog {
		t.Fatalf("emptied: %d entries in %d slots, %d in %d", bt.n, len(bt.slots), et.n, len(et.slots))
	}
}
