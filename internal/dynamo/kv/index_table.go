package kv

// This file: the two hash tables of the index, open addressing with linear
// probing and deletion by backward shift (no tombstones, so a stream of
// stores and removals keeps probes short). A table doubles past 3/4 full and
// halves under 1/8 full, so it never holds much more than its entries need.
// Slots are 16 bytes without pointers. Homes depend on a random seed: the
// keys come from workers.

import (
	"math/bits"
	"math/rand/v2"
)

const (
	minTableLog = 4
	// tableLoadNum/tableLoadDen: a table grows past this load.
	tableLoadNum, tableLoadDen = 3, 4
	// tableShrinkDen: a table shrinks under 1/tableShrinkDen full.
	tableShrinkDen = 8
)

// mix64 scrambles x with the seed; a table takes the top bits
// (multiplicative hashing, good for keys that are hashes already).
func mix64(x, seed uint64) uint64 { return (x ^ seed) * 0x9e3779b97f4a7c15 }

func newSeed() uint64 { return rand.Uint64() }

// blockTable maps one rank's engine hashes to nodes.
type blockTable struct {
	slots []blockSlot
	n     int
	shift uint8 // 64 - log2(len(slots))
	seed  uint64
}

// blockSlot is one engine hash and its node. node 0 (the root, which no
// rank holds) marks an empty slot.
type blockSlot struct {
	hash uint64
	node int32
}

func (t *blockTable) init(log uint8, seed uint64) {
	t.slots = make([]blockSlot, 1<<log)
	t.n, t.shift, t.seed = 0, 64-log, seed
}

func (t *blockTable) home(h uint64) int { return int(mix64(h, t.seed) >> t.shift) }

// find returns the slot of h, or the empty slot where it would go.
func (t *blockTable) find(h uint64) (int, bool) {
	mask := len(t.slots) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.node == 0 {
			return i, false
		}
		if s.hash == h {
			return i, true
		}
	}
}

// insert puts a new slot at i, the empty slot find returned for it.
func (t *blockTable) insert(i int, s blockSlot) {
	if (t.n+1)*tableLoadDen > len(t.slots)*tableLoadNum {
		t.resize(1)
		i, _ = t.find(s.hash)
	}
	t.slots[i] = s
	t.n++
}

// resize doubles the table (by 1) or halves it (by -1).
func (t *blockTable) resize(by int) {
	old := t.slots
	t.init(uint8(bits.Len(uint(len(old)))-1+by), t.seed)
	for _, s := range old {
		if s.node != 0 {
			i, _ := t.find(s.hash)
			t.slots[i] = s
			t.n++
		}
	}
}

// remove empties slot i and moves back the slots after it that may no
// longer be reached.
func (t *blockTable) remove(i int) {
	mask := len(t.slots) - 1
	for j := i; ; {
		j = (j + 1) & mask
		if t.slots[j].node == 0 {
			break
		}
		// The slot at j stays if its home is cyclically in (i, j].
		if k := t.home(t.slots[j].hash); (j-k)&mask < (j-i)&mask {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = blockSlot{}
	t.n--
	if t.n*tableShrinkDen < len(t.slots) && len(t.slots) > 1<<minTableLog {
		t.resize(-1)
	}
}

// edgeTable finds a node by its path hash and its parent.
type edgeTable struct {
	slots []edgeSlot
	n     int
	shift uint8
}

// edgeSlot is one node under its parent; node 0 (the root, nobody's child)
// marks an empty slot.
type edgeSlot struct {
	path   uint64
	parent int32
	node   int32
}

// pathHash is the hash of the path of a node whose tokens_hash is th and
// whose parent's path hash is parent; the root's is the index's seed. For a
// given parent it is a bijection of th, so (parent node, path hash) names
// a child exactly, and the path hashes of a chain can be computed before its
// nodes are found.
func pathHash(parent, th uint64) uint64 {
	x := parent ^ th
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func (t *edgeTable) init(log uint8) {
	t.slots = make([]edgeSlot, 1<<log)
	t.n, t.shift = 0, 64-log
}

func (t *edgeTable) home(path uint64) int { return int(path >> t.shift) }

func (t *edgeTable) find(path uint64, parent int32) (int, bool) {
	mask := len(t.slots) - 1
	for i := t.home(path); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.node == 0 {
			return i, false
		}
		if s.path == path && s.parent == parent {
			return i, true
		}
	}
}

func (t *edgeTable) insert(i int, s edgeSlot) {
	if (t.n+1)*tableLoadDen > len(t.slots)*tableLoadNum {
		t.resize(1)
		i, _ = t.find(s.path, s.parent)
	}
	t.slots[i] = s
	t.n++
}

func (t *edgeTable) resize(by int) {
	old := t.slots
	t.init(uint8(bits.Len(uint(len(old))) - 1 + by))
	for _, s := range old {
		if s.node != 0 {
			i, _ := t.find(s.path, s.parent)
			t.slots[i] = s
			t.n++
		}
	}
}

func (t *edgeTable) remove(i int) {
	mask := len(t.slots) - 1
	for j := i; ; {
		j = (j + 1) & mask
		s := &t.slots[j]
		if s.node == 0 {
			break
		}
		if k := t.home(s.path); (j-k)&mask < (j-i)&mask {
			continue
		}
		t.slots[i] = *s
		i = j
	}
	t.slots[i] = edgeSlot{}
	t.n--
	if t.n*tableShrinkDen < len(t.slots) && len(t.slots) > 1<<minTableLog {
		t.resize(-1)
	}
}
