package kv

// This file: the nodes' owner lists, kept sorted in one arena of rank
// numbers so that the tree holds no pointer per node and a steady stream of
// events allocates nothing.

import (
	"slices"
	"unsafe"
)

// ownerClasses: a list of two or more lives in a chunk of 1<<class slots,
// class 1..12, so the largest chunk holds MaxOwnersPerNode ranks.
const ownerClasses = 13

// compactMin: the arena is rewritten when it has more free slots than live
// ones, and at least this many.
const compactMin = 1 << 16

// ownerArena holds chunks of rank numbers; freed chunks are reused by class.
type ownerArena struct {
	buf  []int32
	free [ownerClasses][]int32
	used int // slots of the chunks in use
}

func (a *ownerArena) alloc(class uint8) int32 {
	a.used += 1 << class
	if f := a.free[class]; len(f) > 0 {
		off := f[len(f)-1]
		a.free[class] = f[:len(f)-1]
		return off
	}
	off := len(a.buf)
	a.buf = slices.Grow(a.buf, 1<<class)[:off+1<<class]
	return int32(off)
}

func (a *ownerArena) release(off int32, class uint8) {
	a.used -= 1 << class
	a.free[class] = append(a.free[class], off)
}

func (a *ownerArena) bytes() int64 {
	b := int64(cap(a.buf))
	for _, f := range a.free {
		b += int64(cap(f))
	}
	return b * int64(unsafe.Sizeof(int32(0)))
}

// ownersOf returns node n's owners, sorted; the slice is valid until the
// nodes or the arena next change.
func (ix *Index) ownersOf(n int32) []int32 {
	nd := &ix.nodes[n]
	switch nd.nown {
	case 0:
		return nil
	case 1:
		return unsafe.Slice(&nd.own, 1)
	}
	return ix.owners.buf[nd.own : nd.own+int32(nd.nown)]
}

func (ix *Index) owns(n, r int32) bool {
	nd := &ix.nodes[n]
	if nd.nown == 1 {
		return nd.own == r
	}
	_, ok := slices.BinarySearch(ix.ownersOf(n), r)
	return ok
}

// addOwner inserts rank r, which does not hold n, into n's owners: one owner
// in the node itself, more in an arena chunk that doubles when full.
func (ix *Index) addOwner(n, r int32) {
	nd := &ix.nodes[n]
	a := &ix.owners
	switch {
	case nd.nown == 0:
		nd.own, nd.nown = r, 1
		return
	case nd.nown == 1:
		off := a.alloc(1)
		a.buf[off], a.buf[off+1] = min(nd.own, r), max(nd.own, r)
		nd.own, nd.nown, nd.class = off, 2, 1
		return
	case int(nd.nown) == 1<<nd.class:
		off := a.alloc(nd.class + 1)
		copy(a.buf[off:], a.buf[nd.own:nd.own+int32(nd.nown)])
		a.release(nd.own, nd.class)
		nd.own, nd.class = off, nd.class+1
	}
	list := a.buf[nd.own : nd.own+int32(nd.nown)+1]
	i, _ := slices.BinarySearch(list[:nd.nown], r)
	copy(list[i+1:], list[i:])
	list[i] = r
	nd.nown++
}

// removeOwner takes rank r, which holds n, out of n's owners. The last one
// moves into the node; a list down to a quarter of its chunk moves to a
// chunk half the size.
func (ix *Index) removeOwner(n, r int32) {
	nd := &ix.nodes[n]
	a := &ix.owners
	if nd.nown == 1 {
		nd.own, nd.nown = -1, 0
		return
	}
	list := ix.ownersOf(n)
	i, _ := slices.BinarySearch(list, r)
	copy(list[i:], list[i+1:])
	nd.nown--
	switch {
	case nd.nown == 1:
		last := list[0]
		a.release(nd.own, nd.class)
		nd.own, nd.class = last, 0
	case nd.class >= 2 && int(nd.nown) <= 1<<(nd.class-2):
		off := a.alloc(nd.class - 1)
		copy(a.buf[off:], a.buf[nd.own:nd.own+int32(nd.nown)])
		a.release(nd.own, nd.class)
		nd.own, nd.class = off, nd.class-1
	}
}

// maybeCompact rewrites the arena when most of it is free chunks: each list
// moves into the smallest chunk that fits it, and the free chunks go.
func (ix *Index) maybeCompact() {
	a := &ix.owners
	free := len(a.buf) - a.used
	if free < compactMin || free <= a.used {
		return
	}
	ix.cnt.compactions++
	buf := make([]int32, 0, a.used)
	used := 0
	for i := range ix.nodes {
		nd := &ix.nodes[i]
		if nd.nown < 2 {
			continue
		}
		class := uint8(1)
		for 1<<class < int(nd.nown) {
			class++
		}
		off := len(buf)
		buf = append(buf, a.buf[nd.own:nd.own+int32(nd.nown)]...)
		buf = append(buf, make([]int32, 1<<class-int(nd.nown))...)
		nd.own, nd.class = int32(off), class
		used += 1 << class
	}
	a.buf, a.used = buf, used
	for c := range a.free {
		a.free[c] = a.free[c][:0]
	}
}
