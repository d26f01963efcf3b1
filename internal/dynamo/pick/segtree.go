package pick

import "math"

// segtree is a segment tree over leaves holding a key (+Inf for "absent"):
// each node keeps the minimum of its leaves and how many leaves hold it, so
// the minimum, its multiplicity, and the k-th leaf holding it (in leaf
// order) are O(log n).
type segtree struct {
	size int // leaves, a power of two
	min  []float64
	cnt  []int32
}

var inf = math.Inf(1)

// newSegtree returns a tree of n absent leaves.
func newSegtree(n int) *segtree {
	size := 1
	for size < n {
		size *= 2
	}
	t := &segtree{size: size, min: make([]float64, 2*size), cnt: make([]int32, 2*size)}
	for i := range t.min {
		t.min[i] = inf
	}
	for i := size; i < 2*size; i++ {
		t.cnt[i] = 1
	}
	for i := size - 1; i >= 1; i-- {
		t.pull(i)
	}
	return t
}

func (t *segtree) pull(i int) {
	l, r := 2*i, 2*i+1
	switch {
	case t.min[l] < t.min[r]:
		t.min[i], t.cnt[i] = t.min[l], t.cnt[l]
	case t.min[r] < t.min[l]:
		t.min[i], t.cnt[i] = t.min[r], t.cnt[r]
	default:
		t.min[i], t.cnt[i] = t.min[l], t.cnt[l]+t.cnt[r]
	}
}

// set changes leaf i's key.
func (t *segtree) set(i int, v float64) {
	i += t.size
	if t.min[i] == v {
		return
	}
	t.min[i] = v
	for i /= 2; i >= 1; i /= 2 {
		t.pull(i)
	}
}

// root returns the minimum key and how many leaves hold it.
func (t *segtree) root() (float64, int) { return t.min[1], int(t.cnt[1]) }

// kth returns the index of the k-th leaf (from 0, in leaf order) holding
// the minimum key; k < the root's count.
func (t *segtree) kth(k int) int {
	target := t.min[1]
	i := 1
	for i < t.size {
		l := 2 * i
		if t.min[l] == target {
			if k < int(t.cnt[l]) {
				i = l
				continue
			}
			k -= int(t.cnt[l])
		}
		i = l + 1
	}
	return i - t.size
}

// countPrefix counts the leaves in [0, p) holding v, where v is no larger
// than any key of the tree (the root's minimum).
func (t *segtree) countPrefix(p int, v float64) int {
	n := 0
	l, r := t.size, t.size+p
	for l < r {
		if l&1 == 1 {
			if t.min[l] == v {
				n += int(t.cnt[l])
			}
			l++
		}
		if r&1 == 1 {
			r--
			if t.min[r] == v {
				n += int(t.cnt[r])
			}
		}
		l /= 2
		r /= 2
	}
	return n
}
