package fleet

import (
	"iter"
	"slices"
	"sync/atomic"
)

// A tree is a persistent sorted sequence: a B+tree whose nodes, once a
// snapshot holds them, are never written again. A change copies the nodes on
// the path from the root to the leaf it touches (a few hundred bytes at any
// fleet size) and shares every other node with the trees before it, so
// publishing a view after one record changed costs time and memory
// logarithmic in the fleet, and readers of older views need no lock.
//
// The reducer owns one working tree per list. Nodes stamped with the
// working tree's epoch were made since its last freeze and may still be
// changed in place, so a batch of changes built into one snapshot copies
// each node at most once; freeze hands out a read-only copy and starts a new
// epoch.

const (
	// nodeMax is the most items a leaf, or children a branch, holds.
	nodeMax = 32
	// nodeMin: a node left with fewer after a removal is merged with a
	// neighbour (and split again when the two hold more than nodeMax).
	nodeMin = nodeMax / 4
)

// node is a leaf (items are the items) or a branch (items[i] is the least
// item under kids[i]). Either way items[0] is the node's least item. Its
// arrays are inline, one spare slot each for the insert that makes it
// split, so that copying a node is one allocation.
type node[T any] struct {
	epoch  uint64
	n      int
	branch bool
	items  [nodeMax + 1]T
	kids   [nodeMax + 1]*node[T]
}

func (n *node[T]) first() T { return n.items[0] }

// insertAt puts v (and, in a branch, its child k) at position i.
func (n *node[T]) insertAt(i int, v T, k *node[T]) {
	copy(n.items[i+1:n.n+1], n.items[i:n.n])
	n.items[i] = v
	if n.branch {
		copy(n.kids[i+1:n.n+1], n.kids[i:n.n])
		n.kids[i] = k
	}
	n.n++
}

// deleteAt removes position i.
func (n *node[T]) deleteAt(i int) {
	copy(n.items[i:n.n-1], n.items[i+1:n.n])
	if n.branch {
		copy(n.kids[i:n.n-1], n.kids[i+1:n.n])
		n.kids[n.n-1] = nil
	}
	n.n--
	var zero T
	n.items[n.n] = zero
}

// epochs hands out the epochs of working trees; 0 is never handed out and
// marks a frozen tree.
var epochs atomic.Uint64

// tree is a sorted sequence ordered by cmp. The zero tree is empty and
// frozen; a tree made with newTree may be changed.
type tree[T any] struct {
	root  *node[T]
	n     int
	epoch uint64
	cmp   func(a, b T) int
}

func newTree[T any](cmp func(a, b T) int) tree[T] {
	return tree[T]{cmp: cmp, epoch: epochs.Add(1)}
}

// buildTree returns a frozen tree of sorted, which must be in cmp order
// without equal items.
func buildTree[T any](sorted []T, cmp func(a, b T) int) tree[T] {
	t := tree[T]{n: len(sorted), cmp: cmp}
	if len(sorted) == 0 {
		return t
	}
	level := make([]*node[T], 0, (len(sorted)+nodeMax-1)/nodeMax)
	for part := range chunks(len(sorted)) {
		l := &node[T]{}
		l.n = copy(l.items[:], sorted[part[0]:part[1]])
		level = append(level, l)
	}
	for len(level) > 1 {
		up := make([]*node[T], 0, (len(level)+nodeMax-1)/nodeMax)
		for part := range chunks(len(level)) {
			b := &node[T]{branch: true}
			b.n = copy(b.kids[:], level[part[0]:part[1]])
			for i, k := range b.kids[:b.n] {
				b.items[i] = k.first()
			}
			up = append(up, b)
		}
		level = up
	}
	t.root = level[0]
	return t
}

// chunks splits n items into runs of at most nodeMax, as even as possible,
// so that no run is shorter than nodeMin unless n is.
func chunks(n int) iter.Seq[[2]int] {
	return func(yield func([2]int) bool) {
		k := (n + nodeMax - 1) / nodeMax
		for i := range k {
			if !yield([2]int{i * n / k, (i + 1) * n / k}) {
				return
			}
		}
	}
}

// Len returns the number of items.
func (t *tree[T]) Len() int { return t.n }

// freeze returns a read-only copy of t; t stays writable, and nodes the copy
// holds are copied before t changes them.
func (t *tree[T]) freeze() tree[T] {
	out := *t
	out.epoch = 0
	t.epoch = epochs.Add(1)
	return out
}

// writable returns n itself when t may change it, else a copy t may change.
func (t *tree[T]) writable(n *node[T]) *node[T] {
	if n.epoch == t.epoch {
		return n
	}
	c := new(node[T])
	*c = *n
	c.epoch = t.epoch
	return c
}

// search returns the position of v among n's items, and whether it is
// there.
func (t *tree[T]) search(n *node[T], v T) (int, bool) {
	return slices.BinarySearchFunc(n.items[:n.n], v, t.cmp)
}

// child returns the index of the branch's child whose range holds v.
func (t *tree[T]) child(n *node[T], v T) int {
	i, found := t.search(n, v)
	if !found && i > 0 {
		i--
	}
	return i
}

// get returns the item equal to v.
func (t *tree[T]) get(v T) (T, bool) {
	return t.find(func(x T) int { return t.cmp(x, v) })
}

// find returns the item for which probe returns 0; probe must order the
// items as cmp does (negative before the item, positive after it).
func (t *tree[T]) find(probe func(T) int) (T, bool) {
	at := func(v T, _ int) int { return probe(v) }
	for n := t.root; n != nil; {
		i, found := slices.BinarySearchFunc(n.items[:n.n], 0, at)
		if !n.branch {
			if found {
				return n.items[i], true
			}
			break
		}
		if !found && i > 0 {
			i--
		}
		n = n.kids[i]
	}
	var zero T
	return zero, false
}

// put inserts v, or replaces the item equal to it.
func (t *tree[T]) put(v T) {
	if t.root == nil {
		t.root = &node[T]{epoch: t.epoch}
	}
	root, added := t.insert(t.root, v)
	if root.n > nodeMax {
		l, r := t.split(root)
		root = &node[T]{epoch: t.epoch, branch: true, n: 2}
		root.items[0], root.items[1] = l.first(), r.first()
		root.kids[0], root.kids[1] = l, r
	}
	t.root = root
	if added {
		t.n++
	}
}

func (t *tree[T]) insert(n *node[T], v T) (*node[T], bool) {
	if !n.branch {
		i, found := t.search(n, v)
		n = t.writable(n)
		if found {
			n.items[i] = v
			return n, false
		}
		n.insertAt(i, v, nil)
		return n, true
	}
	i := t.child(n, v)
	k, added := t.insert(n.kids[i], v)
	n = t.writable(n)
	n.kids[i], n.items[i] = k, k.first()
	if k.n > nodeMax {
		l, r := t.split(k)
		n.kids[i], n.items[i] = l, l.first()
		n.insertAt(i+1, r.first(), r)
	}
	return n, added
}

// split divides a writable node that outgrew nodeMax into two.
func (t *tree[T]) split(n *node[T]) (*node[T], *node[T]) {
	h := n.n / 2
	r := &node[T]{epoch: t.epoch, branch: n.branch, n: n.n - h}
	copy(r.items[:], n.items[h:n.n])
	clear(n.items[h:n.n])
	if n.branch {
		copy(r.kids[:], n.kids[h:n.n])
		clear(n.kids[h:n.n])
	}
	n.n = h
	return n, r
}

// remove deletes the item equal to v, if any.
func (t *tree[T]) remove(v T) bool {
	if t.root == nil {
		return false
	}
	root, removed := t.delete(t.root, v)
	if !removed {
		return false
	}
	t.n--
	for root.branch && root.n == 1 {
		root = root.kids[0]
	}
	if root.n == 0 {
		root = nil
	}
	t.root = root
	return true
}

func (t *tree[T]) delete(n *node[T], v T) (*node[T], bool) {
	if !n.branch {
		i, found := t.search(n, v)
		if !found {
			return n, false
		}
		n = t.writable(n)
		n.deleteAt(i)
		return n, true
	}
	i := t.child(n, v)
	k, removed := t.delete(n.kids[i], v)
	if !removed {
		return n, false
	}
	n = t.writable(n)
	if k.n == 0 {
		n.deleteAt(i)
		return n, true
	}
	n.kids[i], n.items[i] = k, k.first()
	if k.n < nodeMin && n.n > 1 {
		t.rebalance(n, i)
	}
	return n, true
}

// rebalance merges the writable branch n's child i with a neighbour, and
// splits the merged node again when it holds more than nodeMax.
func (t *tree[T]) rebalance(n *node[T], i int) {
	j := i + 1
	if j == n.n {
		i, j = i-1, i
	}
	a, b := n.kids[i], n.kids[j]
	if a.n+b.n <= nodeMax {
		m := t.writable(a)
		copy(m.items[m.n:], b.items[:b.n])
		if m.branch {
			copy(m.kids[m.n:], b.kids[:b.n])
		}
		m.n += b.n
		n.kids[i], n.items[i] = m, m.first()
		n.deleteAt(j)
		return
	}
	// Move items from the fuller neighbour so that both hold about half.
	a, b = t.writable(a), t.writable(b)
	h := (a.n + b.n) / 2
	if a.n < h { // take from the front of b
		d := h - a.n
		copy(a.items[a.n:], b.items[:d])
		copy(b.items[:], b.items[d:b.n])
		clear(b.items[b.n-d : b.n])
		if a.branch {
			copy(a.kids[a.n:], b.kids[:d])
			copy(b.kids[:], b.kids[d:b.n])
			clear(b.kids[b.n-d : b.n])
		}
		a.n, b.n = h, b.n-d
	} else { // give the back of a to the front of b
		d := a.n - h
		copy(b.items[d:], b.items[:b.n])
		copy(b.items[:d], a.items[h:a.n])
		clear(a.items[h:a.n])
		if a.branch {
			copy(b.kids[d:], b.kids[:b.n])
			copy(b.kids[:d], a.kids[h:a.n])
			clear(a.kids[h:a.n])
		}
		a.n, b.n = h, b.n+d
	}
	n.kids[i], n.items[i] = a, a.first()
	n.kids[j], n.items[j] = b, b.first()
}

// All yields every item in order.
func (t *tree[T]) All() iter.Seq[T] {
	root := t.root
	return func(yield func(T) bool) {
		if root != nil {
			walk(root, yield)
		}
	}
}

func walk[T any](n *node[T], yield func(T) bool) bool {
	if !n.branch {
		for _, v := range n.items[:n.n] {
			if !yield(v) {
				return false
			}
		}
		return true
	}
	for _, k := range n.kids[:n.n] {
		if !walk(k, yield) {
			return false
		}
	}
	return true
}

// span yields, in order, the items for which probe returns 0. probe must
// order the items as cmp does: negative before the span, positive after it.
func (t *tree[T]) span(probe func(T) int) iter.Seq[T] {
	root := t.root
	return func(yield func(T) bool) {
		if root != nil {
			seek(root, probe, func(v T) bool { return probe(v) == 0 && yield(v) })
		}
	}
}

// seek walks n from its first item for which probe is not negative; it
// returns false once yield has.
func seek[T any](n *node[T], probe func(T) int, yield func(T) bool) bool {
	i, _ := slices.BinarySearchFunc(n.items[:n.n], 0, func(v T, _ int) int { return probe(v) })
	if !n.branch {
		for _, v := range n.items[i:n.n] {
			if !yield(v) {
				return false
			}
		}
		return true
	}
	// The span may start inside the child before the first one whose least
	// item is in or after it.
	i = max(i-1, 0)
	if !seek(n.kids[i], probe, yield) {
		return false
	}
	for _, k := range n.kids[i+1 : n.n] {
		if !walk(k, yield) {
			return false
		}
	}
	return true
}
